"""Many candidate strategies at once: the analytical closed form, vectorised with numpy.

``estimate_many(cluster, workload, strategies)`` returns one DataFrame row per strategy with the
same numbers :func:`simulator.analytical.estimate` gives (tested equal). How it is fast:

1. Everything but the global batch and the input pipeline decides a candidate's per-chunk and
   per-rank numbers (:class:`simulator.analytical_formula.StepArrays`): its *structure*. Each
   distinct structure is compiled once (with a tiny batch, so no long schedule is built) and
   remembered in the :class:`~simulator.compile.CostCache`, which also remembers every collective
   time and compute table by its inputs — so candidates sharing a tp group, a bucket size or a
   (tp, micro-batch) compute table share the work.
2. The remembered structures are kept stacked by pipeline shape (p, v), one row each, with their
   scalars (dp, micro-batch, pp, schedule, world size, FLOPs per sample) in one table
   (:mod:`simulator.analytical_structures`). A candidate costs one dictionary look-up of its
   structure key; the batch rules run on arrays (:mod:`simulator.strategy.rules`, the same rules
   :func:`build_layout` uses); the closed form runs once per pipeline shape over its candidates.

Pass the same ``cache`` to later calls on the same cluster (a planner's successive sweeps) to
reuse the compiled structures. The cost per candidate is measured by ``benchmarks/bench_analytical.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from simulator.analytical_formula import StepArrays, evaluate, stack
from simulator.analytical_structures import ARRAY_FIELDS, KINDS, Scalars, Structures, structure_key
from simulator.cluster.spec import Cluster
from simulator.compile import CostCache, ParamFetch
from simulator.compile.offload_part import data_s
from simulator.engine.gc_passes import fewer_young_passes
from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.hashed_key import HashedKey
from simulator.results import Category
from simulator.schedule_shape import shape_of
from simulator.schedules import ScheduleKind
from simulator.strategy import Strategy, build_layout
from simulator.strategy.rules import BATCH_RULES, Candidates, mask

class OnInvalid(Kind):
    """What :func:`estimate_many` does with a candidate whose layout is invalid."""

    RAISE = "raise"
    """Raise the first bad candidate's SpecError (its message starts with the candidate's index)."""
    MARK = "mark"
    """Give it NaN times and its message in the ``error`` column; evaluate the others."""


def _lookup(cache, workload, strategies, fetch, store, stop_at_first, gpus=None):
    """Per candidate: structure number (−1 if bad), global batch, prefetch, input bytes; and the
    errors {index: SpecError}. With ``stop_at_first`` the scan stops at the first structure error."""
    index, n = store.index, len(strategies)
    ids, gbs, pre, reads, errors = [-1] * n, [0] * n, [0] * n, [], {}
    for i, s in enumerate(strategies):
        if not isinstance(s, Strategy):
            errors[i] = SpecError("strategy", f"expected a Strategy, got {type(s).__name__}")
            continue
        key = structure_key(s)
        j = index.get(key)
        if j is None:
            key = HashedKey(key)  # hashed once more, then stored and its stages key derived without hashing it again
            try:
                j = store.add(key, cache, workload, s, fetch, gpus)
            except SpecError as err:
                errors[i] = err
                if stop_at_first:
                    return ids[:i], gbs[:i], pre[:i], reads, errors
                continue
        ids[i], gbs[i] = j, s.global_batch
        inp = s.input
        pre[i] = inp.prefetch_batches
        if inp.bytes_per_sample:
            reads.append(i)
    return ids, gbs, pre, reads, errors


@dataclass
class _Candidates:
    """What :func:`estimate_many` knows of its k candidates before the closed form (k = n unless a
    structure error stopped the scan in raise mode)."""

    ids: np.ndarray
    """(k,) structure number of each candidate, −1 if its structure is bad."""
    ok: np.ndarray
    """(k,) bool: evaluate it."""
    m: np.ndarray
    """(k,) micro-batches."""
    scalars: Scalars
    """Its structure's scalars (rows of bad ones are structure 0's or zeros)."""
    gbs: np.ndarray
    """(k,) global batch."""
    prefetch: np.ndarray
    """(k,) batches the input pipeline prefetches."""
    reads: list[int]
    """Candidates whose input pipeline reads bytes (data read time to compute)."""
    errors: dict[int, SpecError]
    """Bad candidates' errors by index."""


@dataclass(frozen=True)
class _Context:
    """The fixed inputs of one :func:`estimate_many` call."""

    cluster: Cluster
    workload: object
    strategies: Sequence[Strategy]
    cache: CostCache
    store: Structures
    gpus: int | None = None
    """Worker GPUs, the first of the cluster (None: all of them)."""


def _micro_batches(ctx: _Context, c: _Candidates) -> None:
    """Fill ``c.m``; candidates whose global batch does not split mark their layout's error. The batch
    rules read only the valid candidates' rows: an invalid one's row is a placeholder (all zeros when
    no candidate has a structure), whose pp and micro-batch of 0 the rules would divide by."""
    sc, gbs = c.scalars, c.gbs.astype(np.int64)
    c.m = np.where(c.ok, gbs // np.maximum(sc.dp * sc.micro_batch, 1), 0)
    valid = np.flatnonzero(c.ok)
    own = sc.take(valid)
    batch = Candidates.of(dp=own.dp, tp=1, pp=own.pp, v=1, micro_batch=own.micro_batch, global_batch=gbs[valid],
                          interleaved=own.interleaved.astype(bool))
    for i in valid[~mask(batch, BATCH_RULES)]:
        try:
            build_layout(ctx.strategies[i], ctx.cluster, ctx.workload, gpus=ctx.gpus)  # the rule's own error
        except SpecError as err:
            c.errors[int(i)] = err
            c.ok[i] = False


def estimate_many(cluster: Cluster, workload, strategies: Sequence[Strategy], *,
                  fetch: ParamFetch = ParamFetch.INFINITY, cache: CostCache | None = None,
                  on_invalid: OnInvalid = OnInvalid.RAISE, gpus: int | None = None) -> pd.DataFrame:
    """One row per strategy: step_time_s, tokens_per_s, mfu, hfu, slowest_stage, m, seconds per
    category (slowest rank), error. ``on_invalid``: what to do with bad candidates (:class:`OnInvalid`).
    ``gpus``: worker GPUs, the first of the cluster, for a job smaller than the cluster (None: all;
    as :func:`~simulator.strategy.build_layout`'s ``gpus``)."""
    if not isinstance(on_invalid, OnInvalid):
        raise SpecError("on_invalid", f"must be an OnInvalid ({', '.join(f'OnInvalid.{o.name}' for o in OnInvalid)}), "
                        f"got {on_invalid!r}")
    cache = CostCache(cluster) if cache is None else cache
    if cache.cluster is not cluster and cache.cluster != cluster:
        raise SpecError("cache", "the cost cache belongs to another cluster; make one per cluster")
    ctx = _Context(cluster, workload, strategies, cache, cache.memo(("structures", workload, fetch, gpus), Structures),
                   gpus)
    with fewer_young_passes():  # compiling structures allocates ~10^6 long-lived objects (gc_passes)
        ids, gbs, pre, reads, errors = _lookup(cache, workload, strategies, fetch, ctx.store,
                                               on_invalid is OnInvalid.RAISE, gpus)
    ids = np.array(ids, dtype=np.int64)
    ok = ids >= 0
    _, _, scalars = ctx.store.table()
    if not len(scalars.kind):
        scalars, ids_or_0 = Scalars.of([(0,) * len(fields(Scalars))]), np.zeros(len(ids), dtype=np.int64)
    else:
        ids_or_0 = np.where(ok, ids, 0)
    c = _Candidates(ids=ids, ok=ok, m=np.zeros(len(ids), dtype=np.int64), scalars=scalars.take(ids_or_0),
                    gbs=np.array(gbs, dtype=float), prefetch=np.array(pre), reads=reads, errors=errors)
    _micro_batches(ctx, c)
    if c.errors and on_invalid is OnInvalid.RAISE:
        i = min(c.errors)
        raise SpecError(c.errors[i].field, f"candidate {i}: {c.errors[i].problem}") from None
    return _evaluate(ctx, c)


def _pipelines(ctx: _Context, c: _Candidates, idx: np.ndarray, p: int, v: int):
    """The schedule shapes of candidates ``idx`` (one pipeline shape (p, v)), read once per (kind, m)."""
    runs = np.array([ctx.strategies[i].schedules_per_step for i in idx], dtype=np.int64)  # chained runs per step
    pairs = np.stack([c.scalars.kind[idx], c.m[idx], runs], axis=1)
    unique, inverse = np.unique(pairs, axis=0, return_inverse=True)
    shapes = [shape_of(ctx.cache, KINDS[k], p, int(m), v if KINDS[k] is ScheduleKind.INTERLEAVED else 1, int(n))
              for k, m, n in unique]
    return stack(shapes).take(inverse.reshape(-1))


def _run_closed_form(ctx: _Context, c: _Candidates, data: np.ndarray):
    """(step, slowest, breakdown of the slowest) per candidate: the closed form once per (p, v) shape."""
    n = len(ctx.strategies)
    step, slowest = np.full(n, np.nan), np.full(n, -1)
    bd = np.full((n, len(Category)), np.nan)
    shape_of_row, row_of, _ = ctx.store.table()
    idx_ok = np.flatnonzero(c.ok)
    shapes = shape_of_row[c.ids[idx_ok]]
    for shape in np.unique(shapes):
        idx = idx_ok[shapes == shape]
        stack_, rows = ctx.store.shape(int(shape)), row_of[c.ids[idx]]
        arrays = StepArrays(p=stack_.p, v=stack_.v, data=data[idx], **{f: getattr(stack_, f)[rows] for f in ARRAY_FIELDS})
        out = evaluate(arrays, _pipelines(ctx, c, idx, stack_.p, stack_.v), c.prefetch[idx])
        step[idx], slowest[idx] = out["step_time_s"], out["slowest"]
        bd[idx] = out["breakdown"][np.arange(len(idx)), out["slowest"]]
    return step, slowest, bd


def _evaluate(ctx: _Context, c: _Candidates) -> pd.DataFrame:
    """Run the closed form over the valid candidates and build the frame."""
    n, sc = len(ctx.strategies), c.scalars
    data = np.zeros(n)
    for i in c.reads:
        if c.ok[i]:
            data[i] = data_s(ctx.cluster, ctx.strategies[i], int(sc.world[i]))
    step, slowest, bd = _run_closed_form(ctx, c, data)
    idx_ok = np.flatnonzero(c.ok)
    seq = ctx.workload.seq_len
    gbs_n, world = np.zeros(n), np.ones(n)
    gbs_n[:len(c.gbs)], world[:len(c.ids)] = c.gbs, sc.world
    model, hw = np.full(n, np.nan), np.full(n, np.nan)
    model[idx_ok] = sc.model_flops[idx_ok] * gbs_n[idx_ok] * seq
    hw[idx_ok] = sc.hw_flops[idx_ok] * gbs_n[idx_ok] * seq
    m_n = np.zeros(n)
    m_n[idx_ok] = c.m[idx_ok]
    peak = ctx.cluster.device.peak_flops(ctx.workload.dtype.compute_dtype)
    columns = {"step_time_s": step, "tokens_per_s": gbs_n * seq / step,
               "mfu": model / (step * world * peak), "hfu": hw / (step * world * peak),
               "slowest_stage": slowest, "micro_batches": m_n}
    columns.update({cat.value: bd[:, k] for k, cat in enumerate(Category)})
    messages = [""] * n
    for i, err in c.errors.items():
        messages[i] = str(err)
    columns["error"] = messages
    return pd.DataFrame(columns)
