"""The analytical engine: a closed-form step time from the compiled work, no contention.

:func:`estimate` compiles (cluster, workload, strategy) with :func:`simulator.compile.compile_step`
and evaluates the closed form of :mod:`simulator.analytical_formula` (Megatron-style pipeline
time, exposed gradient synchronisation, optimizer, data stall). The closed form is the outcome
of playing the :class:`~simulator.work.StepWork` on streams with nothing shared: one compute
stream per rank that blocks on its tensor-parallel calls, ZeRO gathers prefetched
``zero_prefetch_calls`` blocks ahead (one; DeepSpeed's per-tensor depth) on their own stream, p2p on its own stream, gradient buckets on a data-parallel stream as they
become ready. It is therefore a lower bound on the discrete-event engine, which adds contention
and stragglers. :func:`simulator.analytical_vec.estimate_many` evaluates many strategies at once
with the same numbers (``docs/simulator.md``).

Per chunk and micro-batch the forward action takes ``fwd_s + Σ tp_fwd + exposed ZeRO``; with
per-block compute ``t`` (the action's compute and TP time split evenly over its L blocks) and
gathers ``g_0, g_1, …`` issued one block ahead on a serial stream, the gathers finish at
``a_i = max(a_{i−1}, start of block i−1) + g_i`` and block i starts at ``max(end of block i−1, a_i)``
(for equal gathers: ``g_0 + (L−1)·max(0, g − t)`` exposed). A gather that takes SMs stretches the
block it overlaps by ``f·o_i`` (:mod:`simulator.interference`, ``f`` = ``StepWork.overlap_sm_fraction``).
"""

from __future__ import annotations

from dataclasses import replace
from operator import attrgetter, is_

import numpy as np
import pandas as pd

from simulator import analytical_sync
from simulator.analytical_formula import EXPOSED_KINDS, PART_KINDS, StepArrays, evaluate, stack
from simulator.cluster.spec import Cluster
from simulator.compile import CostCache, ParamFetch, compile_step
from simulator.errors import SpecError
from simulator.interference import overlap_s, takes_sms
from simulator.receive_first import expected_boundaries
from simulator.results import Category, Engine, StepResult
from simulator.schedule_shape import ScheduleShape, schedule_shape, shape_of
from simulator.strategy import Strategy
from simulator.work import ChunkWork, CommCall, CommKind, StageWork, StepWork, Transport

def exposed_gathers(calls: tuple[CommCall, ...], compute_s: float, sm_fraction: float = 0.0,
                    prefetch: int = 1) -> float:
    """Seconds a block-by-block action spends beyond its compute: waits for gathers prefetched
    ``prefetch`` blocks ahead (gather j issued once gather j−1 is done and block j−prefetch has
    started; module docstring), and the stretch ``f·o`` of a block by the gathers it overlaps
    (:mod:`simulator.interference`; ``o`` the parts of gathers i+1 .. i+prefetch inside block i's ``t``
    seconds: no other gather can overlap it). ``prefetch`` 0: every call blocks the compute, ``Σ g_i``."""
    if not calls:
        return 0.0
    if prefetch == 0:  # each call blocks the compute before its block: nothing overlaps, nothing stretches
        return sum(map(_TIME_S, calls))
    if prefetch == 1:
        return _exposed_one_ahead(calls, compute_s, sm_fraction)
    return _exposed_any(calls, compute_s, sm_fraction, prefetch)


def _exposed_any(calls: tuple[CommCall, ...], compute_s: float, sm_fraction: float, prefetch: int) -> float:
    """:func:`exposed_gathers` of a non-empty ``calls``, any ``prefetch``: the play as the docstring gives it."""
    n, t = len(calls), compute_s / len(calls)
    issued, done, starts = [0.0] * n, [0.0] * n, []
    last, g = 0.0, 0  # end of the last gather scheduled; the next gather to schedule

    def schedule(limit: int) -> None:  # gathers below ``limit``: their block j − prefetch has a start
        nonlocal last, g
        while g < min(limit, n):
            issued[g] = max(last, starts[g - prefetch] if g >= prefetch else 0.0)
            last = done[g] = issued[g] + calls[g].time_s
            g += 1

    schedule(prefetch)
    start = done[0]
    starts.append(start)
    for i in range(n - 1):
        schedule(i + 1 + prefetch)
        overlap = 0.0
        for j in range(i + 1, min(i + prefetch, n - 1) + 1):
            if takes_sms(calls[j]):
                overlap += overlap_s(issued[j], done[j], start, start + t)
        start = max(start + t + sm_fraction * overlap, done[i + 1])
        starts.append(start)
    return start + t - compute_s


def _exposed_one_ahead(calls: tuple[CommCall, ...], compute_s: float, sm_fraction: float) -> float:
    """:func:`exposed_gathers` with ``prefetch`` 1 (every framework's per-block gathers): the same
    floating-point operations in the same order, with the gather issued before block i + 1 (once gather i is
    done and block i has started) and the one gather that can overlap block i kept in locals."""
    t = compute_s / len(calls)
    start = last = 0.0 + calls[0].time_s  # gather 0: issued at 0.0
    collective = Transport.COLLECTIVE
    for c in calls[1:]:  # max and min of two floats as conditionals (analytical_sync.sync_stretch): the same floats
        issued = start if start > last else last  # max(last, start): gather i + 1 after gather i, block i started
        last = issued + c.time_s
        overlap = 0.0
        if c.transport is collective:  # takes_sms(c); overlap_s(issued, last, start, start + t) inlined
            block_end = start + t
            inside = (block_end if block_end < last else last) - (start if start > issued else issued)
            overlap = inside if inside > 0.0 else 0.0  # max(0, min(last, start + t) - max(issued, start))
        stretched = start + t + sm_fraction * overlap
        start = last if last > stretched else stretched  # max(stretched, last)
    return start + t - compute_s


_TIME_S, _KIND = attrgetter("time_s"), attrgetter("kind")
_EP_OR_OFFLOAD = {id(CommKind.EP), id(CommKind.OFFLOAD)}


def _chunk_numbers(ch: ChunkWork, sm_fraction: float = 0.0) -> tuple[float, float, list[float]]:
    tp_f, tp_b = sum(map(_TIME_S, ch.tp_fwd)), sum(map(_TIME_S, ch.tp_bwd))
    blocking = (*ch.tp_fwd, *ch.tp_bwd)
    if _EP_OR_OFFLOAD.isdisjoint(map(id, map(_KIND, blocking))):  # the usual chunk: every blocking call is tp's
        ep = copies = 0  # the sums below of no call
        tp = sum(map(_TIME_S, blocking))  # the same left-to-right sum, read at C speed
    else:
        ep = sum(c.time_s for c in blocking if c.kind is CommKind.EP)  # MoE all-to-alls
        copies = sum(c.time_s for c in blocking if c.kind is CommKind.OFFLOAD)  # activation offload's host copies
        tp = sum(c.time_s for c in blocking if c.kind is not CommKind.EP and c.kind is not CommKind.OFFLOAD)
    zf = exposed_gathers(ch.zero_fwd, ch.fwd_s + tp_f, sm_fraction, ch.zero_prefetch_calls)
    zb = exposed_gathers(ch.zero_bwd, ch.recompute_s + ch.bwd_s + tp_b, sm_fraction, ch.zero_prefetch_calls)
    if ch.gather_reuse is not None:  # kept gathered (simulator.gather_reuse): the share of the actions that gather
        zf, zb = zf * ch.zero_fwd_share, zb * ch.zero_bwd_share
    offload = bool(ch.zero_fwd) and ch.zero_fwd[0].kind is CommKind.OFFLOAD
    parts = [ch.fwd_s, ch.bwd_s, ch.recompute_s, tp, 0.0 if offload else zf + zb,
             (zf + zb if offload else 0.0) + copies, ep]  # the order of analytical_formula.PART_KINDS
    return ch.fwd_s + tp_f + zf, ch.recompute_s + ch.bwd_s + tp_b + zb, parts


def kept_chunk_numbers(ch: ChunkWork, sm_fraction: float, same: dict) -> tuple:
    """(the chunk's call tuples, then :func:`_chunk_numbers`' F, B and parts, then :func:`gradient_work_s`), remembered
    in ``same`` by the call tuples' ids and the chunk's seconds (the entry holds the tuples, so their ids stay
    theirs): chunks that hold the same call tuples (a shared stage's, or any two chunks asking the same remembered tp
    calls, :func:`simulator.compile.torch_tp.chunk_tp_calls`) and compute seconds share one answer."""
    calls = (ch.tp_fwd, ch.tp_bwd, ch.zero_fwd, ch.zero_bwd)
    key = ("chunk numbers", *map(id, calls), ch.fwd_s, ch.bwd_s, ch.recompute_s, ch.zero_prefetch_calls, sm_fraction,
           ch.zero_fwd_share, ch.zero_bwd_share)
    got = same.get(key)
    if got is None or not _same_objects(got[0], calls):
        got = same[key] = (calls, *_chunk_numbers(ch, sm_fraction), gradient_work_s(ch))
    return got


def gradient_work_s(chunk: ChunkWork) -> float:
    """The part of a backward action that produces gradients: backward compute and its TP calls.

    Bucket j is ready once ``grad_ready_fraction[j]`` of this work is done; recompute (before it) and
    waits for ZeRO gathers produce none. Both engines use this rule: here the buckets' ready times
    count back from the end of the last backward; the DES tracks the same progress as it plays.
    """
    return chunk.bwd_s + sum(map(_TIME_S, chunk.tp_bwd))  # the same left-to-right sum, read at C speed


def _same_objects(a: tuple, b: tuple) -> bool:
    """Whether ``a`` and ``b`` hold the same objects, position by position (a kept entry's tuples against the ones
    asked with the same ids): ``map`` over ``operator.is_`` (C), not a generator per entry."""
    return all(map(is_, a, b))


def stage_answers(st: StageWork, b_last: float, sm_fraction: float, seen: dict, same: dict) -> tuple:
    """(tail, exposed by category, after-step sums by category) of stage ``st`` under its last backward of
    ``b_last`` seconds (:func:`gradient_work_s` of its first chunk): :func:`analytical_sync.stage_sync` and
    :func:`analytical_sync.kept_sums_by_code`, remembered in ``same`` by the bucket, fraction and after-step tuples'
    ids (the entry holds them) and ``b_last``; ``seen``: :func:`analytical_sync.stage_sync`'s answers by value."""
    held = (st.grad_sync, st.grad_ready_fraction, st.after_step)
    key = (id(held[0]), id(held[1]), id(held[2]), b_last, sm_fraction)
    got = same.get(key)
    if got is None or not _same_objects(got[0], held):
        got = same[key] = (held, *analytical_sync.stage_sync(st, b_last, sm_fraction, seen, same),
                           analytical_sync.kept_sums_by_code(st.after_step, same))
    return got[1:]


def summarize(work: StepWork) -> StepArrays:
    """The closed form's inputs for one compiled step (a batch of one); a boundary whose sends have a receive-first
    price costs the mean price of its transfers in the schedule's order (:mod:`simulator.receive_first`)."""
    arrays = summarize_stages(work.stages, work.layout.v, work.overlap_sm_fraction)
    chunks = {ch.chunk: ch for st in work.stages for ch in st.chunks}
    n = len(chunks)
    first_f = [_first(chunks[c].p2p_fwd, arrays.cf[0, c]) for c in range(n - 1)]
    first_b = [_first(chunks[c + 1].p2p_bwd, arrays.cb[0, c]) for c in range(n - 1)]
    if first_f == list(arrays.cf[0]) and first_b == list(arrays.cb[0]):
        return arrays
    cf, cb, held_f, held_b, serial_f, serial_b = expected_boundaries(work.schedule, arrays.F[0], arrays.B[0],
                                                                     arrays.cf[0], arrays.cb[0], first_f, first_b)
    return replace(arrays, cf=np.array([cf]), cb=np.array([cb]), stream_cf=np.array([held_f]),
                   stream_cb=np.array([held_b]), serial_cf=np.array([serial_f]), serial_cb=np.array([serial_b]))


def _first(call, full_s: float) -> float:
    """A p2p call's receive-first seconds (``full_s`` without one)."""
    return full_s if call is None or call.receive_first_time_s is None else call.receive_first_time_s


def summarize_stages(stages: tuple[StageWork, ...], v: int, sm_fraction: float = 0.0,
                     kept: dict | None = None, classes: tuple[int, ...] | None = None) -> StepArrays:
    """:func:`summarize` from a step's stages, its chunks per rank and the share of SMs an overlapped
    collective takes (:attr:`StepWork.overlap_sm_fraction`): all it reads of the step. ``kept``: a dict the caller
    keeps between calls (a search's structures: :mod:`simulator.analytical_structures`), where a stage's bucket
    answers are remembered by its bucket tuples' ids and its last backward's seconds; each entry holds the tuples,
    so their ids stay theirs (a search's structures that differ in recompute or ZeRO 0/1 share their stages'
    bucketed syncs, :func:`simulator.compile.comm_part.bucketed`). ``classes``: rank ``r``'s stage is
    ``stages[classes[r]]`` as rank ``r`` (its chunks ``r``, ``r + p``, …), read without a relabelled copy
    (:func:`simulator.compile.shared_stages.closed_form_models`); None: ``stages`` are every rank's own."""
    if classes is None:
        chunks = {ch.chunk: ch for st in stages for ch in st.chunks}
    else:
        stages = tuple(stages[j] for j in classes)
        chunks = {r + k * len(stages): ch for r, st in enumerate(stages) for k, ch in enumerate(st.chunks)}
    p = len(stages)
    n = p * v
    F, B, parts = np.zeros(n), np.zeros(n), np.zeros((n, len(PART_KINDS)))
    cf, cb = np.zeros(max(n - 1, 0)), np.zeros(max(n - 1, 0))
    same: dict[tuple, tuple] = {} if kept is None else kept  # answers by the tuples' ids, each entry holding them
    b_lasts: dict[int, float] = {}  # each chunk's gradient_work_s
    for c, ch in chunks.items():  # chunks holding the same call tuples and seconds (a shared stage's) share them
        got = kept_chunk_numbers(ch, sm_fraction, same)
        F[c], B[c], parts[c] = got[1:4]
        b_lasts[c] = got[4]
        if c < n - 1 and ch.p2p_fwd is not None:
            cf[c] = ch.p2p_fwd.time_s
        if c > 0 and ch.p2p_bwd is not None:
            cb[c - 1] = ch.p2p_bwd.time_s
    tail, exposed = np.zeros(p), np.zeros((p, len(EXPOSED_KINDS)))
    after = np.zeros((p, len(EXPOSED_KINDS)))
    seen: dict[tuple, tuple[float, np.ndarray]] = {}  # one answer per equal set of buckets (analytical_sync.stage_sync)
    for r, st in enumerate(stages):
        tail[r], exposed[r], after[r] = stage_answers(st, b_lasts[r], sm_fraction, seen, same)  # b_last: chunks[r]'s
    return StepArrays(p=p, v=v, F=F[None], B=B[None], parts=parts[None], cf=cf[None], cb=cb[None],
                      tail=tail[None], sync_exposed=exposed[None],
                      opt=np.array([[st.optimizer_s for st in stages]]), after=after[None],
                      data=np.array([stages[0].data_s if stages else 0.0]))


def per_rank_frame(work: StepWork, breakdown: np.ndarray) -> pd.DataFrame:
    """One row per stage: rank, stage, then seconds per category."""
    rows = [{"rank": st.rank, "stage": st.stage, **{c.value: float(breakdown[i, k]) for k, c in enumerate(Category)}}
            for i, st in enumerate(work.stages)]
    return pd.DataFrame(rows)


def work_shape(work: StepWork, cache: CostCache | None = None) -> ScheduleShape:
    """The closed form's view of ``work.schedule``: read from its action lists, so a schedule loaded from a
    file (``replace(work, schedule=from_csv(text))``) is simulated as written. A built-in schedule's
    shape is remembered in ``cache`` per (kind, p, m, v)."""
    sched, layout = work.schedule, work.layout
    if (sched.p, sched.v) != (len(work.stages), layout.v) or sched.m != work.micro_batches:
        raise SpecError("schedule", f"has pp={sched.p}, v={sched.v}, {sched.m} micro-batches; the compiled step "
                        f"has pp={len(work.stages)}, v={layout.v}, {work.micro_batches}")
    if cache is not None and sched is layout.schedule and sched.kind is not None:
        return shape_of(cache, sched.kind, sched.p, sched.m, sched.v, sched.schedules)
    return schedule_shape(sched)


def estimate_work(work: StepWork, cache: CostCache | None = None) -> StepResult:
    """The analytical estimate of a compiled step, for the pipeline schedule ``work.schedule``."""
    arrays = summarize(work)
    out = evaluate(arrays, stack([work_shape(work, cache)]), np.array([work.strategy.input.prefetch_batches]))
    breakdown = out["breakdown"][0]
    slowest = int(out["slowest"][0])
    return StepResult(engine=Engine.ANALYTICAL, step_time_s=float(out["step_time_s"][0]),
                      tokens_per_step=work.tokens_per_step, model_flops_per_step=work.model_flops_per_step,
                      hardware_flops_per_step=work.hardware_flops_per_step, world_size=work.world_size,
                      peak_flops_per_gpu=work.peak_flops_per_gpu,
                      breakdown={c: float(breakdown[slowest, k]) for k, c in enumerate(Category)},
                      per_rank=per_rank_frame(work, breakdown), memory=work.memory,
                      extras={"slowest_stage": slowest, "slowest_rank": work.stages[slowest].rank,
                              "pipeline_s": float(out["pipeline_s"][0]),
                              **({"host_bound": "+".join(work.host_bound)} if work.host_bound else {})})


def estimate(cluster: Cluster, workload, strategy: Strategy, *, fetch: ParamFetch = ParamFetch.INFINITY,
             cache: CostCache | None = None) -> StepResult:
    """Analytical step estimate (Engine.ANALYTICAL) of ``strategy`` for ``workload`` on ``cluster``."""
    return estimate_work(compile_step(cluster, workload, strategy, fetch=fetch, cache=cache), cache)
