"""The step DES's shortcuts against the plain computation they replace, on cases small enough for both.

- A collective's plan (fixed delay, fused steps, γ) is built from per-step flows shared between steps
  of equal content: its delay must equal the one built from :func:`schedule_time_s` and the chain of
  a freshly built schedule, bit for bit.
- Replica checks take a replica's links without timing it: the same set as its full plan's.
- Single-step replicas start as one batch: the same timeline as one process per replica.
- Isolated classes run as measured delays: the same step as on the shared network.
Exact (==) where the arithmetic is the same; 1e-12 relative where only the clock's rounding differs.
"""

from dataclasses import replace

import pandas as pd
import pytest

from simulator.cluster.facts import DegradedNic
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.collectives.cost import Env, Flow, Group
from simulator.collectives.registry import build_schedule, estimate, get_algorithm
from simulator.collectives.replay import schedule_time_s
from simulator.engine import step as step_engine
from simulator.engine.callfold import CallFolder
from simulator.engine.replay_work import CommRunner
from simulator.engine.shapes import ScheduleCache
from simulator.engine.step import simulate
from simulator.errors import SpecError
from simulator.strategy import Strategy
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport
from compiled_work import compiled
from simulator.workload.presets import get_preset

A100 = load_preset("dgx-a100")
GPT13 = get_preset("gpt3-1.3b")
GROUPS = [tuple(range(32)), (0, 8, 16, 24), (0, 1, 8, 9)]
"""On 4 DGX A100 nodes: every GPU; one GPU per node (one channel); two GPUs on each of two nodes."""
ALGORITHMS = ["ring", "tree", "halving_doubling", "recursive_doubling", "hierarchical", "direct"]


def _call(group, name, op=Op.ALL_REDUCE, nbytes=3 * 2**20 + 4, extra_s=1e-5):
    time_s = estimate(A100.with_nodes(4), list(group), op, nbytes, name).time_s + extra_s
    return CommCall(kind=CommKind.DP, op=op, group=group, nbytes=nbytes, transport=Transport.COLLECTIVE,
                    algorithm=CollectiveAlgorithm(name), time_s=time_s)


def _reference_pre_s(cluster, call) -> float:
    """The plan's fixed delay as the unshared computation defines it: overhead + (time − replay) + the
    schedule's latency (:meth:`Algorithm.schedule_latency_s`)."""
    chosen = estimate(cluster, call.group, call.op, call.nbytes, call.algorithm.value).protocol
    protocol = next((p for p in cluster.comm.protocols if p.name == chosen), None)
    schedule = build_schedule(cluster, call.group, call.op, call.nbytes, call.algorithm.value)
    algorithm = get_algorithm(schedule.algorithm)
    env = Env(cluster, protocol, family=algorithm.family)
    chain_s = algorithm.schedule_latency_s(env, schedule)  # rank chain, or a chunk pipeline's latency
    replay_s = schedule_time_s(cluster, schedule, protocol)
    return env.overhead_s(algorithm.family, algorithm.calls) + max(0.0, call.time_s - replay_s) + chain_s


def _cases():
    for group in GROUPS:
        for name in ALGORITHMS:
            for op in (Op.ALL_REDUCE, Op.ALL_GATHER):
                try:
                    call = _call(group, name, op)
                except SpecError:
                    continue  # the algorithm does not run this op on this group
                yield pytest.param(call, id=f"{name}-{op.value}-{len(group)}r-{group[1]}")


@pytest.mark.parametrize("call", list(_cases()))
def test_plan_delay_equals_the_unshared_replay(call):
    cluster = A100.with_nodes(4)
    plan = CommRunner(None, None, cluster, None, replicas=False).plan(call)
    assert plan.pre_s == _reference_pre_s(cluster, call)


def test_cases_cover_every_algorithm():
    assert {c.values[0].algorithm.value for c in _cases()} == set(ALGORITHMS)


@pytest.mark.parametrize("name", ["ring", "tree", "direct"])
def test_replica_links_without_timing_equal_the_full_plan(name):
    # tp-shifted copies of a one-GPU-per-node group (the dp groups of a tp=2 layout) on 4 nodes.
    cluster = A100.with_nodes(4)
    for g in [(1, 9, 17, 25), (3, 11, 19, 27)]:
        call = _call((0, 8, 16, 24), name)
        fresh = CommRunner(None, None, cluster, None)
        links = fresh.resources(call, g)
        assert links and fresh._plans == {}  # found without building a plan
        assert links == CommRunner(None, None, cluster, None).plan(call, g).resources


def _replicated_work():
    """tp 8, pp 2, dp 4 on 8 DGX A100 nodes: the p2p sends of the dp replicas share rail 0 with the
    representative's dp ring, so they are kept on the network (one step each)."""
    cluster = A100.with_nodes(8)
    return cluster, compiled(cluster, Strategy(global_batch=16, tp=8, pp=2), GPT13, fwd_s=0.01, bwd_s=0.02)


def test_batched_replicas_give_the_timeline_of_one_process_each(monkeypatch):
    monkeypatch.setattr(CallFolder, "enabled", False)  # the replicas on the network, not folded
    cluster, work = _replicated_work()
    batched = simulate(work, cluster)
    monkeypatch.setattr(CommRunner, "merge_replicas", False)
    single = simulate(work, cluster)
    assert batched.step_time_s == single.step_time_s
    assert batched.extras["flows"] == single.extras["flows"]
    assert batched.extras["events"] < single.extras["events"]
    pd.testing.assert_frame_equal(batched.timeline, single.timeline)


def test_replicas_are_on_the_network_in_that_layout():
    cluster, work = _replicated_work()
    ctx = step_engine._Ctx(work, cluster, False, True)
    p2p = work.stages[0].chunks[0].p2p_fwd
    assert len(ctx.runner.replicas(p2p)) == 3  # the other dp replicas, same rail


def test_isolated_classes_equal_their_network_replay(monkeypatch):
    monkeypatch.setattr(CallFolder, "enabled", False)  # the non-isolated calls on the network, not folded
    cluster, work = _replicated_work()
    fast = simulate(work, cluster)
    assert fast.extras["isolated_classes"] > 0
    original = CommRunner.prepare
    monkeypatch.setattr(CommRunner, "prepare", lambda self, classes, isolate=True: original(self, classes, False))
    slow = simulate(work, cluster)
    assert slow.extras["isolated_classes"] == 0
    assert slow.extras["flows"] > fast.extras["flows"]
    assert fast.step_time_s == pytest.approx(slow.step_time_s, rel=1e-12)


def _plan_view(plan):
    return plan.pre_s, plan.gamma_s, [[(p.hops, b, a) for p, b, a in step] for step in plan.steps]


@pytest.mark.parametrize("op", [Op.ALL_REDUCE, Op.REDUCE_SCATTER, Op.ALL_GATHER])
@pytest.mark.parametrize("nbytes", [12 * 2**20, 12 * 2**20 + 6])
def test_a_ring_schedule_shared_between_groups_of_one_shape_equals_fresh_builds(op, nbytes):
    # 48 DGX A100 nodes, 20 per leaf: dp groups of a tp 8 × pp 4 × dp 12 layout for stages 0 and 3 and
    # tp indices 0 and 5 (other NICs), and a two-GPUs-per-node group; they cross leaves at different
    # positions. One runner shares a schedule between them; each fresh runner builds its own.
    cluster = A100.with_nodes(48)
    groups = [tuple(t + 8 * s + 32 * d for d in range(12)) for s in (0, 3) for t in (0, 5)]
    groups += [tuple(r + 8 * n for n in range(0, 48, 4) for r in (2, 6))]
    shared = CommRunner(None, None, cluster, None)
    for g in groups:
        time_s = estimate(cluster, list(g), op, nbytes, "ring").time_s
        call = CommCall(kind=CommKind.DP, op=op, group=g, nbytes=nbytes, transport=Transport.COLLECTIVE,
                        algorithm=CollectiveAlgorithm.RING, time_s=time_s)
        fresh = CommRunner(None, None, cluster, None)
        assert shared.resources(call, g) == fresh.plan(call, g).resources
        assert _plan_view(shared.plan(call, g)) == _plan_view(fresh.plan(call, g))
        assert shared.plan(call, g).pre_s == _reference_pre_s(cluster, call)
    assert len(shared._schedules._shared) == 2  # one GPU per node (4 groups), two per node


def _local_form(schedule, group):
    """A schedule in group-local terms: its transfers with each NIC as its index in the sender node's set."""
    index = [{nic: i for i, nic in enumerate(nics)} for nics in group.nic_sets]
    return [(t.step, t.src, t.dst, t.offset, t.nbytes, t.reduce, t.dst_offset, t.channel,
             None if t.nic is None else index[group.node_index[t.src]][t.nic]) for t in schedule.transfers]


def _dp_groups():
    """On 48 DGX A100 nodes (20 per leaf): dp groups of a tp 8 × pp 4 × dp 12 layout for stages 0 and 3 and
    tp indices 0 and 5 (other NICs), crossing leaves at different positions, and a two-GPUs-per-node group."""
    groups = [tuple(t + 8 * s + 32 * d for d in range(12)) for s in (0, 3) for t in (0, 5)]
    return groups + [tuple(r + 8 * n for n in range(0, 48, 4) for r in (2, 6))]


SICK_A100 = replace(A100.with_nodes(48), degraded_nics=(DegradedNic(node=4, nic=0, bw_fraction=0.02),))
"""NIC 0 of node 4 (in the stage-0, tp-0 dp group) at 2 %: that group's tree picks another chunk count."""


@pytest.mark.parametrize("cluster", [A100.with_nodes(48), SICK_A100], ids=["uniform", "degraded-nic"])
@pytest.mark.parametrize("name,op", [("ring", Op.ALL_REDUCE), ("ring", Op.REDUCE_SCATTER), ("ring", Op.ALL_GATHER),
                                     ("tree", Op.ALL_REDUCE)])
def test_groups_with_equal_schedule_keys_have_equal_local_schedules(cluster, name, op):
    # Algorithm.schedule_key's promise, checked on the schedules themselves: equal keys, equal
    # transfers in group indices (NICs by index); links_key's: equal keys, equal pairs carrying bytes.
    algorithm = get_algorithm(name)
    for nbytes in (12 * 2**20, 3 * 2**20 + 6):
        by_key, by_links = {}, {}
        for g in _dp_groups():
            group = Group(cluster, g)
            local = _local_form(build_schedule(cluster, g, op, nbytes, name), group)
            assert by_key.setdefault(algorithm.schedule_key(group, op, nbytes), local) == local
            pairs = {(s, d, n) for _, s, d, _, b, _, _, _, n in local if b > 0}
            assert by_links.setdefault(algorithm.links_key(group, op, nbytes), pairs) == pairs
        assert len(by_links) == 2  # one GPU per node, two per node


def test_a_degraded_nic_gives_its_group_another_tree_key():
    nbytes = 12 * 2**20
    tree = get_algorithm("tree")
    chunks = [tree.chunks(Group(cluster, g), Op.ALL_REDUCE, nbytes)
              for cluster in (A100.with_nodes(48), SICK_A100) for g in _dp_groups()[:2]]
    assert chunks[0] == chunks[1] == chunks[3] != chunks[2]  # only the sick group's count moves


@pytest.mark.parametrize("cluster,schedules", [(A100.with_nodes(48), 2), (SICK_A100, 3)], ids=["uniform", "degraded-nic"])
@pytest.mark.parametrize("nbytes", [12 * 2**20, 3 * 2**20 + 6])
def test_a_tree_schedule_shared_between_groups_equals_fresh_builds(cluster, schedules, nbytes):
    # One runner shares schedules (by key), links (by links key) and pipeline latencies (by α) between
    # the groups; each fresh runner builds its own. Links are asked first: found without a schedule of that group.
    shared = CommRunner(None, None, cluster, None)
    for g in _dp_groups():
        time_s = estimate(cluster, list(g), Op.ALL_REDUCE, nbytes, "tree").time_s
        call = CommCall(kind=CommKind.DP, op=Op.ALL_REDUCE, group=g, nbytes=nbytes, transport=Transport.COLLECTIVE,
                        algorithm=CollectiveAlgorithm.TREE, time_s=time_s)
        fresh = CommRunner(None, None, cluster, None)
        assert shared.resources(call, g) == fresh.plan(call, g).resources
        assert _plan_view(shared.plan(call, g)) == _plan_view(fresh.plan(call, g))
        assert shared.plan(call, g).pre_s == _reference_pre_s(cluster, call)
    assert len(shared._schedules._pairs) == 2  # one GPU per node, two per node
    assert len(shared._schedules._shared) == schedules  # and the sick group's own chunk count


class _SlowerFrom(Env):
    """Costs whose connections from rank ``first`` up pay 1 µs more: groups of one shape with other α."""

    first = 96

    def path(self, src, dst, nic=None):
        p = super().path(src, dst, nic)
        return replace(p, latency_s=p.latency_s + 1e-6) if src >= self.first else p


@pytest.mark.parametrize("local_form", [False, True], ids=["schedule", "local-form"])
def test_a_shared_tree_schedule_times_its_pipeline_latency_on_each_group_own_alphas(local_form, monkeypatch):
    # Two dp groups of one tree key whose α differ: the second group's pipeline latency is computed on a
    # build of its own (not read from the first's), and a third group with the first's α reuses it. Built
    # from the tree's local form, there is no schedule to read: each α vector's first group is timed
    # directly (Algorithm.chunk_pipeline_latency_s), with no build.
    monkeypatch.setattr(ScheduleCache, "local_form", local_form)
    cluster, nbytes = A100.with_nodes(48), 12 * 2**20
    tree, costs = get_algorithm("tree"), _SlowerFrom(cluster, None, family="tree")
    groups = [tuple(8 * n for n in range(0, 12)), tuple(8 * n for n in range(12, 24)), tuple(1 + 8 * n for n in range(12))]
    cache, built, direct = ScheduleCache(cluster), [], []
    for g in groups:
        group = Group(cluster, g)
        local = cache.get(group, Op.ALL_REDUCE, nbytes, "tree", lambda: build_schedule(cluster, g, Op.ALL_REDUCE, nbytes, "tree"))
        links = dict(zip(local.pairs, local.links(group)))

        def rebuild(g=g):
            built.append(g)
            return build_schedule(cluster, g, Op.ALL_REDUCE, nbytes, "tree")

        def timed(group=group):
            direct.append(group.ranks)
            return tree.chunk_pipeline_latency_s(costs, group, Op.ALL_REDUCE, nbytes)

        got = local.pipeline_s(costs, group, links, lambda s: tree.schedule_latency_s(costs, s), rebuild,
                               timed if local_form else None)
        assert got == tree.schedule_latency_s(costs, build_schedule(cluster, g, Op.ALL_REDUCE, nbytes, "tree"))
    assert len(cache._shared) == 1
    assert (built, direct) == (([], groups[:2]) if local_form else ([groups[1]], []))


def _replica_groups_by_rank_of(layout, group, count):
    """The replica groups as they were built before the strides: one ``layout.rank_of`` per rank (reference)."""
    import itertools

    if count <= 1:
        return []
    coords = [layout.coords(r) for r in group]
    spanned = {d for d in ("dp", "tp") if len({getattr(c, d) for c in coords}) > 1}
    free = [d for d in ("dp", "tp") if d not in spanned]
    n_dp = layout.dims["dp"]
    offsets = range(n_dp) if "dp" in spanned and len({c.dp for c in coords}) < n_dp else (0,)
    out, used = [], set(group)
    for combo in itertools.product(*(range(layout.dims[d]) for d in free)):
        shift = dict(zip(free, combo))
        for k in offsets:
            g = tuple(layout.rank_of(dp=(shift.get("dp", c.dp) + k) % n_dp, pp=c.pp, tp=shift.get("tp", c.tp))
                      for c in coords)
            if used.isdisjoint(g):
                out.append(g)
                used.update(g)
            if len(out) == count - 1:
                return out
    return out


@pytest.mark.parametrize("placement", ["tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "pp-tp-dp"])
@pytest.mark.parametrize("tp, pp, dp", [(2, 2, 4), (4, 1, 2), (1, 4, 2), (2, 2, 1), (8, 8, 4)])
def test_replica_groups_from_strides_equal_one_rank_of_per_rank(placement, tp, pp, dp):
    """``replica_groups`` reads the layout's strides from ``rank_of`` once and shifts ranks by multiply-adds; the
    groups (tp, dp, pp-send pairs and their counts) are those one ``rank_of`` per rank gives."""
    from simulator.engine.replay_work import replica_groups
    from simulator.strategy import build_layout
    from simulator.strategy.kinds import PlacementOrder

    cluster = load_preset("dgx-h100").with_nodes(max(1, tp * pp * dp // 8))
    lay = build_layout(Strategy(global_batch=8 * dp, tp=tp, pp=pp, placement=PlacementOrder(placement)), cluster,
                       get_preset("gpt3-1.3b"))
    groups = list(lay.tp_groups[:2]) + list(lay.dp_groups[:2])
    groups += [(lay.rank_of(dp=d, pp=0, tp=0), lay.rank_of(dp=d, pp=pp - 1, tp=0)) for d in range(min(dp, 2))]
    for group in groups:
        for count in (1, 2, tp * dp, tp * dp * pp):
            assert replica_groups(lay, group, count) == _replica_groups_by_rank_of(lay, group, count)


def _step_bw_s_hop_by_hop(env, flows):
    """``Env.step_bw_s`` as it read every hop of every path for the max (reference)."""
    flows = [f for f in flows if f.nbytes > 0]
    if not flows:
        return 0.0
    paths = [env.path(f.src, f.dst, f.nic) for f in flows]
    load: dict = {}
    for f, p in zip(flows, paths):
        for hop in p.hops:
            load[hop.resource] = load.get(hop.resource, 0.0) + f.nbytes
    return max(max(load[h.resource] / env.bw_Bps(h) for h in p.hops) for p in paths)


@pytest.mark.parametrize("call", list(_cases()))
def test_step_bw_over_distinct_links_equals_the_hop_by_hop_max(call):
    """``Env.step_bw_s`` takes the max over distinct (resource, bandwidth) pairs: the same floats as over every
    hop (the max is exact and order-free), on every step of every algorithm's schedule, under each protocol."""
    from simulator.collectives.algorithm import flows_by_step

    cluster = A100.with_nodes(4)
    schedule = build_schedule(cluster, call.group, call.op, call.nbytes, call.algorithm.value)
    family = get_algorithm(schedule.algorithm).family
    for protocol in (None, *cluster.comm.protocols):
        env = Env(cluster, protocol, family=family)
        for step in flows_by_step(schedule):
            assert env.step_bw_s(step) == _step_bw_s_hop_by_hop(env, step)
