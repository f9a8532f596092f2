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
   scalars (dp × micro-batch, schedule code, world size, FLOPs per sample) in one table. A
   candidate costs one dictionary look-up of a cheap key (:func:`_key`: plain values, no hashing
   of whole dataclasses or enum members); everything after is numpy indexing by structure row,
   and the closed form runs once per pipeline shape over all its candidates.

Pass the same ``cache`` to later calls on the same cluster (a planner's successive sweeps) to
reuse the compiled structures. The cost per candidate is measured by ``benchmarks/bench_analytical.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from enum import Enum

import numpy as np
import pandas as pd

from simulator.analytical import summarize
from simulator.analytical_formula import StepArrays, evaluate, stack
from simulator.cluster.spec import Cluster
from simulator.compile import CostCache, ParamFetch, compile_step
from simulator.compile.compute_part import step_flops
from simulator.compile.offload_part import data_s
from simulator.errors import SpecError
from simulator.results import Category
from simulator.schedule_shape import shape_of
from simulator.schedules import ScheduleKind
from simulator.strategy import AllReduceSync, ParamServerSync, Role, Strategy, build_layout
from simulator.strategy.fields import declared

class OnInvalid(Enum):
    """What :func:`estimate_many` does with a candidate whose layout is invalid."""

    RAISE = "raise"
    """Raise the first bad candidate's SpecError (its message starts with the candidate's index)."""
    MARK = "mark"
    """Give it NaN times and its message in the ``error`` column; evaluate the others."""


_FIELDS = ("F", "B", "parts", "cf", "cb", "tail", "sync_exposed", "opt", "after")
"""The per-candidate arrays of :class:`StepArrays` that come from the structure (all but ``data``)."""
_KINDS = tuple(ScheduleKind)


@dataclass(frozen=True)
class _Scalars:
    """Per-structure (or, indexed, per-candidate) numbers beside the arrays, one array per field."""

    per_step: np.ndarray
    """Samples per micro-batch step over all data-parallel ranks (dp · micro-batch)."""
    interleave_pp: np.ndarray
    """pp when the schedule is interleaved with v > 1 (m must be a multiple of it), else 0."""
    kind: np.ndarray
    """The schedule kind, as its position in ``tuple(ScheduleKind)``."""
    world: np.ndarray
    """GPUs in the step."""
    model_flops: np.ndarray
    """Model FLOPs per token (per sample for layer lists)."""
    hw_flops: np.ndarray
    """Hardware FLOPs (recompute included) per token."""

    @classmethod
    def of(cls, rows: list[tuple]) -> "_Scalars":
        cols = np.array(rows, dtype=float).reshape(-1, len(fields(cls)))
        return cls(*(cols[:, i].astype(np.int64) if i < 4 else cols[:, i] for i in range(cols.shape[1])))

    def take(self, index: np.ndarray) -> "_Scalars":
        return _Scalars(*(getattr(self, f.name)[index] for f in fields(self)))


_KEY_FIELDS = tuple(f.name for f, d in declared(Strategy) if d.role is Role.STRUCTURE)
"""Strategy fields that decide the compiled structure (:func:`_key`): those declared with
:data:`Role.STRUCTURE` (:mod:`simulator.strategy.fields`), so a new field joins by its declaration."""
_SYNC_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in (AllReduceSync, ParamServerSync)}


def _key(s: Strategy) -> tuple:
    """The :data:`_KEY_FIELDS` of ``s``, the gradient sync expanded into its type and field values.
    Enum members hash by identity (cheap), so no value look-ups are needed."""
    d = s.dp_sync
    return (*(getattr(s, name) for name in _KEY_FIELDS if name != "dp_sync"), type(d),
            *(getattr(d, name) for name in _SYNC_FIELDS[type(d)]))


def _world(cluster: Cluster, s: Strategy) -> int:
    gpus = cluster.world_size
    if isinstance(s.dp_sync, ParamServerSync):
        gpus -= s.dp_sync.server_nodes * cluster.node.gpus_per_node
    return gpus


def _dp(cluster: Cluster, s: Strategy) -> int | None:
    if s.dp is not None:
        return s.dp
    gpus = _world(cluster, s)
    return gpus // (s.tp * s.pp) if gpus > 0 and gpus % (s.tp * s.pp) == 0 else None


def _compile(cache: CostCache, workload, s: Strategy, fetch: ParamFetch) -> tuple[StepArrays, int]:
    """(arrays, dp) of a strategy's structure, compiled with the smallest valid batch."""
    dp = _dp(cache.cluster, s)
    if dp is None:
        build_layout(s, cache.cluster, workload)  # raises the layout's own error
    interleaved = s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1
    small = replace(s, global_batch=dp * s.micro_batch * (s.pp if interleaved else 1))
    layout = build_layout(small, cache.cluster, workload)
    work = compile_step(cache.cluster, workload, small, fetch=fetch, cache=cache, memory=False, layout=layout)
    return summarize(work), layout.dp


class _Structures:
    """The compiled structures of one (workload, fetch) on one cache's cluster, stacked by (p, v).

    Mutable, but owned by the caller's :class:`CostCache` (``cache.memo``), like its other answers.
    """

    def __init__(self) -> None:
        self.index: dict[tuple, int] = {}
        """:func:`_key` → structure number."""
        self._rows: list[tuple[int, int]] = []          # per structure: (shape number, row in its stack)
        self._scalars: list[tuple] = []                 # per structure: the _Scalars fields
        self._shapes: dict[tuple[int, int], int] = {}   # (p, v) → shape number
        self._parts: list[list[StepArrays]] = []        # per shape: its structures' arrays, in row order
        self._stacks: list[StepArrays | None] = []      # per shape: those stacked (None: to restack)
        self._table: tuple[np.ndarray, np.ndarray, _Scalars] | None = None

    def add(self, key: tuple, cache: CostCache, workload, s: Strategy, fetch: ParamFetch) -> int:
        """Compile ``s``'s structure (raises its SpecError) and remember it under ``key``."""
        arrays, dp = _compile(cache, workload, s, fetch)
        shape = self._shapes.setdefault((arrays.p, arrays.v), len(self._shapes))
        if shape == len(self._parts):
            self._parts.append([])
            self._stacks.append(None)
        interleaved = s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1
        flops = cache.memo(("flops", workload, s.recompute, s.attention),
                           lambda: step_flops(workload, 1, s.recompute, s.attention))
        self._rows.append((shape, len(self._parts[shape])))
        self._scalars.append((dp * s.micro_batch, s.pp if interleaved else 0, _KINDS.index(s.schedule),
                              _world(cache.cluster, s), flops[0], flops[1]))
        self._parts[shape].append(arrays)
        self._stacks[shape] = None
        self._table = None
        self.index[key] = len(self._rows) - 1
        return len(self._rows) - 1

    def table(self) -> tuple[np.ndarray, np.ndarray, _Scalars]:
        """(shape number, row in its stack, scalars) of every structure."""
        if self._table is None:
            rows = np.array(self._rows, dtype=np.int64).reshape(-1, 2)
            self._table = rows[:, 0], rows[:, 1], _Scalars.of(self._scalars)
        return self._table

    def shape(self, shape: int) -> StepArrays:
        """The stacked arrays of one (p, v) shape (``data`` left empty)."""
        if self._stacks[shape] is None:
            items = self._parts[shape]
            first = items[0]
            cat = {f: np.concatenate([getattr(a, f) for a in items]) for f in _FIELDS}
            self._stacks[shape] = StepArrays(p=first.p, v=first.v, data=np.zeros(0), **cat)
        return self._stacks[shape]


def _check_m(cluster: Cluster, workload, s: Strategy, dp: int) -> int:
    per = dp * s.micro_batch
    m = s.global_batch // per
    bad = s.global_batch % per or (s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1 and m % s.pp)
    if bad:
        build_layout(s, cluster, workload)  # raises the precise error
    return m


def _lookup(cache, workload, strategies, fetch, store, stop_at_first):
    """Per candidate: structure number (−1 if bad), global batch, prefetch, input bytes; and the
    errors {index: SpecError}. With ``stop_at_first`` the scan stops at the first structure error."""
    index, n = store.index, len(strategies)
    ids, gbs, pre, reads, errors = [-1] * n, [0] * n, [0] * n, [], {}
    for i, s in enumerate(strategies):
        if not isinstance(s, Strategy):
            errors[i] = SpecError("strategy", f"expected a Strategy, got {type(s).__name__}")
            continue
        key = _key(s)
        j = index.get(key)
        if j is None:
            try:
                j = store.add(key, cache, workload, s, fetch)
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
    scalars: _Scalars
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
    store: _Structures


def _micro_batches(ctx: _Context, c: _Candidates) -> None:
    """Fill ``c.m``; candidates whose global batch does not split mark their layout's error."""
    per, gbs = c.scalars.per_step, c.gbs.astype(np.int64)
    c.m = np.where(c.ok, gbs // np.maximum(per, 1), 0)
    ipp = c.scalars.interleave_pp
    bad = c.ok & ((gbs % np.maximum(per, 1) != 0) | ((ipp > 0) & (c.m % np.maximum(ipp, 1) != 0)))
    for i in np.flatnonzero(bad):
        s = ctx.strategies[i]
        try:
            c.m[i] = _check_m(ctx.cluster, ctx.workload, s, int(per[i]) // s.micro_batch)
        except SpecError as err:
            c.errors[int(i)] = err
            c.ok[i] = False


def estimate_many(cluster: Cluster, workload, strategies: Sequence[Strategy], *,
                  fetch: ParamFetch = ParamFetch.INFINITY, cache: CostCache | None = None,
                  on_invalid: OnInvalid = OnInvalid.RAISE) -> pd.DataFrame:
    """One row per strategy: step_time_s, tokens_per_s, mfu, hfu, slowest_stage, m, seconds per
    category (slowest rank), error. ``on_invalid``: what to do with bad candidates (:class:`OnInvalid`)."""
    if not isinstance(on_invalid, OnInvalid):
        raise SpecError("on_invalid", f"must be an OnInvalid ({', '.join(f'OnInvalid.{o.name}' for o in OnInvalid)}), "
                        f"got {on_invalid!r}")
    cache = CostCache(cluster) if cache is None else cache
    ctx = _Context(cluster, workload, strategies, cache, cache.memo(("structures", workload, fetch), _Structures))
    ids, gbs, pre, reads, errors = _lookup(cache, workload, strategies, fetch, ctx.store, on_invalid is OnInvalid.RAISE)
    ids = np.array(ids, dtype=np.int64)
    ok = ids >= 0
    _, _, scalars = ctx.store.table()
    if not len(scalars.kind):
        scalars, ids_or_0 = _Scalars.of([(0,) * len(fields(_Scalars))]), np.zeros(len(ids), dtype=np.int64)
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
    pairs = np.stack([c.scalars.kind[idx], c.m[idx]], axis=1)
    unique, inverse = np.unique(pairs, axis=0, return_inverse=True)
    shapes = [shape_of(ctx.cache, _KINDS[k], p, int(m), v if _KINDS[k] is ScheduleKind.INTERLEAVED else 1)
              for k, m in unique]
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
        arrays = StepArrays(p=stack_.p, v=stack_.v, data=data[idx], **{f: getattr(stack_, f)[rows] for f in _FIELDS})
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
