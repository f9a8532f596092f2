"""The per-holder bit-mask reservations (simulator/engine/reservations.py) answer as the map ``resource →
holder`` they replace: on generated sequences of reservations and releases (overlapping ones included: a later
reservation takes resources from an earlier holder for good), every check of a collection, its holders, and the
holders arriving flows meet in their order, equal the map's."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.reservations import Reservations, bits


class _MapModel:
    """The rule as a map (what FlowNetwork kept before the masks)."""

    def __init__(self):
        self.reserved: dict[int, object] = {}

    def reserve(self, holder, res):
        self.reserved.update(dict.fromkeys(res, holder))

    def release(self, holder, res):
        for r in res:
            if self.reserved.get(r) is holder:
                del self.reserved[r]

    def free(self, res):
        return self.reserved.keys().isdisjoint(res)

    def holders(self, res):
        return {id(h): h for h in map(self.reserved.get, res) if h is not None}

    def holders_met(self, flows):
        met: dict[int, object] = {}
        for f in flows:
            for r in f.res:
                h = self.reserved.get(r)
                if h is not None:
                    met.setdefault(id(h), h)
        return list(met.values())


_RES = st.lists(st.integers(0, 200), max_size=12, unique=True).map(tuple)
_OPS = st.lists(st.tuples(st.sampled_from(["reserve", "release", "check"]), st.integers(0, 5), _RES,
                          st.lists(_RES, max_size=4)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_the_masks_answer_as_the_map(ops):
    holders = [object() for _ in range(6)]
    reserved_res: dict[int, tuple] = {}
    masks, model = Reservations(), _MapModel()
    for op, h, res, flow_res in ops:
        holder = holders[h]
        if op == "reserve" and h not in reserved_res:  # the engine's holders reserve once
            reserved_res[h] = res
            masks.reserve(holder, res, None if h % 2 else bits(res))
            model.reserve(holder, res)
        elif op == "release" and h in reserved_res:
            masks.release(holder)
            model.release(holder, reserved_res[h])
        flows = [SimpleNamespace(res=r) for r in flow_res]
        assert masks.free(res) == model.free(res)
        assert bool(masks.reserved) == bool(model.reserved)
        assert {id(x) for x in masks.holders(res)} == set(model.holders(res))
        assert masks.holders_met(flows) == model.holders_met(flows)


def test_a_later_reservation_takes_resources_for_good():
    """Hand-worked: A holds 1, 2, 3; B takes 3; A's release frees 1 and 2 only; B's frees 3."""
    a, b = object(), object()
    rs = Reservations()
    rs.reserve(a, (1, 2, 3))
    rs.reserve(b, (3, 4))
    assert rs.holders((3,)) == [b] and rs.holders((1, 3)) == [a, b]
    rs.release(a)
    assert rs.free((1, 2)) and not rs.free((3,)) and rs.reserved == 0b11000
    rs.release(b)
    assert rs.reserved == 0 and rs.free(range(10))


def test_bits():
    assert bits(()) == 0 and bits((0,)) == 1 and bits((3, 9)) == (1 << 3) | (1 << 9)


def test_no_active_flow_means_every_resource_is_idle(monkeypatch):
    """``FlowNetwork.idle`` skips the per-resource scan while no flow is active; on a folded step with contention
    (hierarchical all-reduce, tp-dp-pp, small buckets) the counter and the flow maps agree at every check, and
    the answer is the full scan's."""
    from simulator.cluster.presets import load_preset
    from simulator.compile import compile_step
    from simulator.engine.network import FlowNetwork
    from simulator.engine.step import simulate
    from simulator.strategy.flat import strategy_from_flat
    from simulator.workload.presets import get_preset

    cluster = load_preset("dgx-h100").with_nodes(4)
    work = compile_step(cluster, get_preset("gpt3-1.3b"), strategy_from_flat(dict(
        global_batch=32, tp=2, pp=2, placement="tp-dp-pp", allreduce_algorithm="hierarchical",
        bucket_bytes=5_000_000)), memory=False)
    idle, seen = FlowNetwork.idle, []

    def checked(self, res):
        answer = idle(self, res)
        scan = not any(self._res_flows[r] for r in res) and self._reservations.free(res)
        seen.append((self._active, answer == scan, self._active or not any(self._res_flows)))
        return answer

    monkeypatch.setattr(FlowNetwork, "idle", checked)
    simulate(work, cluster, steps=1)
    assert any(a == 0 for a, _, _ in seen) and any(a > 0 for a, _, _ in seen)
    assert all(same and empty for _, same, empty in seen)
