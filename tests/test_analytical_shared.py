"""The closed form's shortcuts give bit-for-bit the numbers of the plain computation.

- :func:`simulator.analytical_sync.sync_stretch` (inlined interval overlap, stops once the buckets run past the
  backward) against the plain loop over :func:`simulator.interference.overlap_s` it replaced;
- the calls' seconds and kinds read once per run of one repeated object, against every call read;
- :func:`simulator.analytical.exposed_gathers` at prefetch 1 (its own loop) against its general play;
- :func:`simulator.analytical.summarize_stages` shares one bucket computation between stages whose buckets
  agree bit for bit: the same arrays as each stage computed on its own;
- :func:`simulator.analytical_vec.estimate_many` compiles GPipe and 1F1B structures that agree elsewhere
  once (:func:`simulator.analytical_structures.stages_key`): the same frame as each candidate estimated
  in a cache of its own, and the scalar estimate's numbers.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import analytical, analytical_sync
from simulator.analytical import estimate, summarize
from simulator.analytical_sync import sync_stretch
from simulator.analytical_vec import estimate_many
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import CostCache, ParamFetch, compile_step
from simulator.interference import overlap_s, takes_sms
from simulator.strategy import AllReduceSync, Recompute, ScheduleKind, Strategy, ZeroStage
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport
from simulator.workload import get_preset

CLUSTER = load_preset("dgx-a100", 2)
MODEL = get_preset("megatron-1.7b")


def plain_sync_stretch(b_last, calls, fractions, sm_fraction) -> np.ndarray:
    """The loop :func:`sync_stretch` replaced: every bucket, through ``overlap_s`` and ``takes_sms``."""
    out = np.zeros(len(calls))
    if sm_fraction <= 0 or not calls:
        return out
    end = -np.inf
    for j, (c, f) in enumerate(zip(calls, fractions)):
        end = max((f - 1.0) * b_last, end) + c.time_s
        if takes_sms(c):
            out[j] = sm_fraction * overlap_s(end - c.time_s, end, -b_last, 0.0)
    return out


_TRANSPORTS = (Transport.COLLECTIVE, Transport.HOST, Transport.P2P)
buckets = st.lists(st.tuples(st.floats(0.0, 2.0), st.sampled_from(_TRANSPORTS), st.integers(1, 10 ** 9)),
                   min_size=0, max_size=40)


def _calls(items) -> tuple[tuple[CommCall, ...], tuple[float, ...]]:
    calls = tuple(CommCall(kind=CommKind.DP, op=Op.ALL_REDUCE, group=(0, 1), nbytes=n, transport=t, time_s=d,
                           algorithm=CollectiveAlgorithm.RING if t is Transport.COLLECTIVE else None)
                  for d, t, n in items)
    done = np.cumsum([c.nbytes for c in calls])
    return calls, tuple((done / done[-1]).tolist()) if calls else ()


@settings(max_examples=300, deadline=None)
@given(buckets, st.floats(0.0, 5.0), st.sampled_from([0.0, 0.1, 0.25, 1.0]), st.booleans())
def test_sync_stretch_equals_the_plain_loop(items, b_last, sm_fraction, overlap):
    calls, fractions = _calls(items)
    if not overlap:
        fractions = (1.0,) * len(calls)
    fast = sync_stretch(b_last, calls, fractions, sm_fraction)
    plain = plain_sync_stretch(b_last, calls, fractions, sm_fraction)
    assert fast.tolist() == plain.tolist()
    assert fast.dtype == plain.dtype and fast.tobytes() == plain.tobytes()  # bit for bit, signed zeros included


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.sampled_from(_TRANSPORTS), st.integers(1, 10 ** 9)), min_size=1,
                max_size=40), st.floats(0.0, 20.0), st.sampled_from([0.0, 0.1, 0.25, 1.0]))
def test_gathers_one_ahead_equal_the_general_play(items, compute_s, sm_fraction):
    """:func:`exposed_gathers` at prefetch 1 (its own loop) against the general play at prefetch 1, bit for bit."""
    calls, _ = _calls(items)
    fast = analytical.exposed_gathers(calls, compute_s, sm_fraction)
    assert fast == analytical._exposed_any(calls, compute_s, sm_fraction, 1)
    assert np.float64(fast).tobytes() == np.float64(analytical._exposed_any(calls, compute_s, sm_fraction, 1)).tobytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.sampled_from(_TRANSPORTS), st.integers(1, 10 ** 9),
                          st.integers(1, 50)), max_size=8))
def test_calls_read_by_runs_equal_each_call_read(items):
    """:func:`analytical_sync.times_and_codes` reads a run of one repeated object once (as ``bucketed`` builds
    them; equal-valued objects in a row are runs apart): the arrays of reading every call."""
    calls = tuple(c for c, (*_, count) in zip(_calls([i[:3] for i in items])[0], items) for _ in range(count))
    times, codes = analytical_sync.times_and_codes(calls)
    assert times.tolist() == [c.time_s for c in calls]
    assert codes.tolist() == [analytical_sync.KIND_CODE.get(c.kind, 0) for c in calls]
    if calls:
        lengths, heads = analytical_sync.call_runs(calls)
        assert sum(lengths.tolist()) == len(calls) and all(a is not b for a, b in zip(heads, heads[1:]))


def _own_stage_each(monkeypatch) -> None:
    """Make summarize_stages compute every stage's buckets on their own (no sharing between stages)."""
    real = analytical_sync.stage_sync
    monkeypatch.setattr(analytical_sync, "stage_sync", lambda st_, b, f, seen, kept=None: real(st_, b, f, {}))


STRATEGIES = [
    Strategy(global_batch=64, tp=2, pp=4, dp_sync=AllReduceSync(bucket_bytes=10_000_000)),
    Strategy(global_batch=64, tp=1, pp=8, zero=ZeroStage.ZERO1, recompute=Recompute.FULL),
    Strategy(global_batch=64, tp=2, pp=4, schedule=ScheduleKind.INTERLEAVED, virtual_stages=3,
             sequence_parallel=True, dp_sync=AllReduceSync(bucket_bytes=1_000_000)),
    Strategy(global_batch=32, tp=4, pp=2, zero=ZeroStage.ZERO1, dp_sync=AllReduceSync(overlap_grad_reduce=False)),
]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_stages_sharing_buckets_give_the_arrays_of_each_stage_alone(strategy, monkeypatch):
    work = compile_step(CLUSTER, MODEL, strategy)
    assert work.overlap_sm_fraction > 0  # the stretch is exercised
    shared = summarize(work)
    _own_stage_each(monkeypatch)
    alone = summarize(work)
    for name in ("F", "B", "parts", "cf", "cb", "tail", "sync_exposed", "opt", "after", "data"):
        assert getattr(shared, name).tolist() == getattr(alone, name).tolist(), name


def _alone(strategies) -> list[list]:
    """Each candidate estimated in a cache of its own (nothing compiled for another is reused)."""
    return [estimate_many(CLUSTER, MODEL, [s]).drop(columns="error").iloc[0].tolist() for s in strategies]


candidates = st.builds(
    lambda mbs, tp, pp, kind, rec, zero, bucket: Strategy(
        global_batch=64, micro_batch=mbs, tp=tp, pp=pp, schedule=kind, recompute=rec, zero=zero,
        dp_sync=AllReduceSync(bucket_bytes=bucket)),
    st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]),
    st.sampled_from([ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B]), st.sampled_from([Recompute.NONE, Recompute.FULL]),
    st.sampled_from([ZeroStage.ZERO0, ZeroStage.ZERO1]), st.sampled_from([5_000_000, 25_000_000]))


@settings(max_examples=15, deadline=None)
@given(st.lists(candidates, min_size=1, max_size=4))
def test_schedules_sharing_a_compilation_equal_each_alone(strategies):
    """Every candidate twice, once per schedule kind: one cache compiles their stages once per pair."""
    both = [replace(s, schedule=k) for s in strategies for k in (ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B)]
    frame = estimate_many(CLUSTER, MODEL, both, cache=CostCache(CLUSTER))
    assert (frame["error"] == "").all()
    assert frame.drop(columns="error").values.tolist() == _alone(both)


def test_shared_compilation_equals_the_scalar_estimate():
    # GPipe and 1F1B share the closed-form bubble, so the second also takes twice the micro-batches: the
    # pipeline shape (schedule, m) is per candidate, on one compiled structure
    pairs = [Strategy(global_batch=b, tp=2, pp=4, schedule=k)
             for b, k in ((64, ScheduleKind.GPIPE), (128, ScheduleKind.ONE_F_ONE_B))]
    cache = CostCache(CLUSTER)
    frame = estimate_many(CLUSTER, MODEL, pairs, cache=cache)
    store = cache.memo(("structures", MODEL, ParamFetch.INFINITY, None), lambda: None)
    assert len(store.index) == 2 and len(store._compiled) == 1  # two structures, one compilation
    steps = frame["step_time_s"].tolist()
    assert steps[1] > steps[0] * 1.5  # twice the micro-batches, per candidate
    for s, step in zip(pairs, steps):
        assert step == pytest.approx(estimate(CLUSTER, MODEL, s).step_time_s, rel=1e-12)
