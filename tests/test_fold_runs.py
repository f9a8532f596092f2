"""Folded runs kept per binade and parity of their start (simulator/engine/fold_runs.py).

- A DES step with kept runs equals the step that predicts every fold again, bit for bit (step time, breakdown,
  per-rank accounts, timeline, fold and event counts), and the kept runs are used.
- ``predict`` + ``Run.cut`` give what the item-by-item loop they replace gave (the reference below: ends, the
  reservation's resources and mask, no fold), under any pattern of busy resources.
- A run's offsets added to another start of its key give that start's own prediction to the bit, including rounding
  ties (where the parity in the key matters: an odd shift turns a tie the other way).
"""

import math

import pytest
from hypothesis import given, settings, strategies as st

import simulator.engine.fold as fold_module
from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.engine import fold_runs
from simulator.engine.fold_run import _Call
from simulator.engine.fold_runs import predict, replayed, run_key
from simulator.engine.step import simulate
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.presets import get_preset
from shortcut_runs import assert_same_run

H100 = load_preset("dgx-h100")
CASES = {
    "dp2-tp4-pp2": (H100.with_nodes(2), get_preset("gpt3-125m"), dict(global_batch=16, tp=4, pp=2, zero=1)),
    "interleaved-sp": (H100.with_nodes(2), get_preset("gpt3-1.3b"),
                       dict(global_batch=16, tp=4, pp=4, schedule="interleaved", virtual_stages=2,
                            sequence_parallel=True)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("trace", [False, True])
def test_kept_runs_give_the_same_step(monkeypatch, name, trace):
    cluster, model, keys = CASES[name]
    work = compile_step(cluster, model, strategy_from_flat(keys), memory=False)
    used = []
    real = fold_runs.replayed
    monkeypatch.setattr(fold_module, "replayed", lambda run, s: used.append(1) or real(run, s))
    kept = simulate(work, cluster, steps=2, trace=trace)
    monkeypatch.setattr(fold_module, "run_key", lambda *a: None)  # nothing kept: every fold predicted
    fresh = simulate(work, cluster, steps=2, trace=trace)
    assert len(used) > 10
    assert_same_run(kept, fresh, 0.0)
    for count in ("folds", "unfolds", "events"):
        assert kept.extras[count] == fresh.extras[count], count


def _loop(calls, seg_s, item, start, idle, mask_of, durations):
    """The item-by-item prediction :meth:`Folder.fold` made before its runs were kept (the reference)."""
    n, t = 2 * len(calls) + 1, start
    ends, res, mask, checked, folded = [], {}, 0, {}, 0
    while item < n:
        if item % 2 == 0:
            if seg_s > 0:
                t = t + seg_s
        else:
            call = calls[item // 2]
            if call is None:
                break
            if call.delay_s is None:
                if call.shape is not None:
                    rep_s, all_s = durations(call.shape, t)
                    if all_s > rep_s:
                        break
                free = checked.get(id(call.res))
                if free is None:
                    free = checked[id(call.res)] = idle(call.res)
                    res.update(dict.fromkeys(call.res))
                    mask |= mask_of(call.res)
                if not free:
                    break
                if call.shape is not None:
                    t = t + rep_s
                else:
                    t = call.end_s(t)
            else:
                t = t + call.delay_s
            folded += 1
        ends.append(t)
        item += 1
    return (ends, tuple(res), mask) if folded else None


class _Shape:
    """A stand-in call shape: durations a function of the start's binade and parity, as the real ones are."""

    def __init__(self, rep_s: float, tail: bool):
        self.rep_s, self.tail = rep_s, tail

    def durations(self, _net, t):
        e, parity = math.frexp(t)[1], int(t / math.ulp(t)) & 1
        rep = self.rep_s * (1 + parity) + e * 1e-7
        return rep, rep * 2 if self.tail else rep


POOL = [(0, 1), (2,), (3, 4), (1, 5)]
_mask_of = {id(r): sum(1 << x for x in r) for r in POOL}.__getitem__


def _mask(res):
    return _mask_of(id(res))


@st.composite
def calls_st(draw):
    out = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["delay", "ring", "ring2", "shape", "none"]))
        res = POOL[draw(st.integers(0, len(POOL) - 1))]
        if kind == "delay":
            out.append(_Call(draw(st.floats(0.0, 1e-3))))
        elif kind == "none":
            out.append(None)
        elif kind == "shape":
            out.append(_Call(None, res=res, shape=_Shape(draw(st.floats(0.0, 1e-3)), draw(st.booleans()))))
        else:
            a = draw(st.floats(1e-6, 1e-3))
            items = ((None, 1.0, 0.0),) * (2 if kind == "ring2" else 1)
            alone = a if kind == "ring" else None  # ring2: two flows of different dues (alone_finishes: not kept)
            out.append(_Call(None, draw(st.sampled_from([0.0, 1e-5])), draw(st.sampled_from([0.0, 2e-6])), items,
                             (1.0 / a, 0.5 / a), res, alone))
    return out


@settings(max_examples=150, deadline=None)
@given(calls=calls_st(), seg=st.floats(0.0, 1e-3), item=st.integers(0, 3), start=st.floats(0.0, 40.0),
       busy=st.sets(st.integers(0, len(POOL) - 1)))
def test_predict_and_cut_are_the_item_by_item_loop(calls, seg, item, start, busy):
    idle = {id(r): i not in busy for i, r in enumerate(POOL)}
    idle_of = lambda res: idle[id(res)]  # noqa: E731
    want = _loop(calls, seg, item, start, idle_of, _mask, lambda shape, t: shape.durations(None, t))
    run = predict(None, calls, seg, item, start, _mask)
    assert run.cut(run.ends, idle_of) == want
    if run.offsets is not None:  # kept: from its own start the offsets give its own ends
        assert replayed(run, start) == run.ends


def _tie_chain(u: float):
    """A segment of 1.5 spacings (a rounding tie at every start of the binade) then a delay call."""
    return [_Call(2.5 * u)], 1.5 * u


@settings(max_examples=150, deadline=None)
@given(calls=calls_st(), seg=st.floats(0.0, 1e-3), item=st.integers(0, 3), start=st.floats(1e-3, 40.0),
       shift=st.integers(-2 ** 20, 2 ** 20), ties=st.booleans())
def test_offsets_from_another_start_of_the_key_are_its_prediction(calls, seg, item, start, shift, ties):
    u = math.ulp(start)
    if ties:
        calls, seg = _tie_chain(u)
    other = start + shift * u  # odd shifts: another key (the parity), skipped below
    if run_key(calls, seg, item, other) != run_key(calls, seg, item, start):
        return  # another binade
    run = predict(None, calls, seg, item, start, _mask)
    if run.offsets is None:
        return
    got = replayed(run, other)
    if got is not None:
        assert got == predict(None, calls, seg, item, other, _mask).ends


def test_an_odd_shift_is_another_key_and_can_round_the_other_way():
    start = 1.0
    u = math.ulp(start)
    calls, seg = _tie_chain(u)
    assert run_key(calls, seg, 0, start + u) != run_key(calls, seg, 0, start)
    even = predict(None, calls, seg, 0, start, _mask).offsets
    odd = predict(None, calls, seg, 0, start + u, _mask).offsets
    assert even != odd  # kept under one key for both parities, one of them would be an ulp off


def test_runs_leaving_the_binade_are_not_reused():
    calls, seg = [_Call(0.25)], 0.25
    run = predict(None, calls, seg, 0, 1.0, _mask)  # ends 1.25, 1.5, 1.75: inside [1, 2)
    assert run.offsets == [0.25, 0.5, 0.75]
    assert replayed(run, 1.5) is None  # 1.5 + 0.75 = 2.25: the next binade
    assert replayed(run, 1.0) == [1.25, 1.5, 1.75]
    assert predict(None, calls, seg, 0, 1.5, _mask).offsets is None  # its own ends leave it: not kept
    assert predict(None, calls, seg, 0, 0.0, _mask).offsets is None  # a start at 0: no binade


def test_a_busy_call_cuts_the_run_with_its_resources_reserved():
    """As the loop did: the run stops before the first call whose resources are busy, and reserves those resources
    with the earlier calls' (not the later calls')."""
    ring = lambda res: _Call(None, 0.0, 0.0, ((None, 1.0, 0.0),), (1e4,), res, 1e-4)  # noqa: E731
    calls = [ring(POOL[0]), ring(POOL[1]), ring(POOL[2])]
    busy = lambda res: res is not POOL[1]  # noqa: E731
    run = predict(None, calls, 1e-3, 0, 1.0, _mask)
    want = _loop(calls, 1e-3, 0, 1.0, busy, _mask, None)
    assert want[1] == (0, 1, 2) and len(want[0]) == 3  # seg, call 0, seg; the busy call 1 reserved, not call 2
    assert run.cut(run.ends, busy) == want
    assert run.cut(run.ends, lambda res: True) == _loop(calls, 1e-3, 0, 1.0, lambda res: True, _mask, None)
