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
from dataclasses import fields, replace
from enum import Enum

import numpy as np
import pandas as pd

from simulator.analytical import SCHED_CODE, summarize
from simulator.analytical_formula import StepArrays, evaluate
from simulator.cluster.spec import Cluster
from simulator.compile import CostCache, ParamFetch, compile_step
from simulator.compile.compute_part import step_flops
from simulator.compile.offload_part import data_s
from simulator.errors import SpecError
from simulator.results import Category
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
_PER, _IPP, _SCHED, _WORLD, _MODEL, _HW = range(6)
"""Columns of :attr:`_Structures.scalars`: dp·micro-batch, pp when interleaved (else 0), schedule
code, GPUs in the step, model and hardware FLOPs per token (per sample for layer lists)."""


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
        self._scalars: list[tuple[float, ...]] = []     # per structure: the _PER.._HW columns
        self._shapes: dict[tuple[int, int], int] = {}   # (p, v) → shape number
        self._parts: list[list[StepArrays]] = []        # per shape: its structures' arrays, in row order
        self._stacks: list[StepArrays | None] = []      # per shape: those stacked (None: to restack)
        self._table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

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
        self._scalars.append((dp * s.micro_batch, s.pp if interleaved else 0, SCHED_CODE[s.schedule],
                              _world(cache.cluster, s), flops[0], flops[1]))
        self._parts[shape].append(arrays)
        self._stacks[shape] = None
        self._table = None
        self.index[key] = len(self._rows) - 1
        return len(self._rows) - 1

    def table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shape number, row in its stack, scalars (structures × 6)) of every structure."""
        if self._table is None:
            rows = np.array(self._rows, dtype=np.int64).reshape(-1, 2)
            self._table = rows[:, 0], rows[:, 1], np.array(self._scalars, dtype=float).reshape(-1, 6)
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


def estimate_many(cluster: Cluster, workload, strategies: Sequence[Strategy], *,
                  fetch: ParamFetch = ParamFetch.INFINITY, cache: CostCache | None = None,
                  on_invalid: OnInvalid = OnInvalid.RAISE) -> pd.DataFrame:
    """One row per strategy: step_time_s, tokens_per_s, mfu, hfu, slowest_stage, m, seconds per
    category (slowest rank), error. ``on_invalid``: what to do with bad candidates (:class:`OnInvalid`)."""
    if not isinstance(on_invalid, OnInvalid):
        raise SpecError("on_invalid", f"must be an OnInvalid ({', '.join(f'OnInvalid.{o.name}' for o in OnInvalid)}), "
                        f"got {on_invalid!r}")
    cache = CostCache(cluster) if cache is None else cache
    store = cache.memo(("structures", workload, fetch), _Structures)
    n = len(strategies)
    ids, gbs, pre, reads, errors = _lookup(cache, workload, strategies, fetch, store, on_invalid is OnInvalid.RAISE)
    k = len(ids)  # n, or fewer when a structure error stopped the scan (raise mode)
    ids = np.array(ids, dtype=np.int64)
    shape_of, row_of, scalars = store.table()
    ok = ids >= 0
    sc = scalars[np.where(ok, ids, 0)] if len(scalars) else np.zeros((k, 6))
    gbs_k = np.array(gbs, dtype=np.int64)
    per = sc[:, _PER].astype(np.int64)
    m = np.where(ok, gbs_k // np.maximum(per, 1), 0)
    ipp = sc[:, _IPP].astype(np.int64)
    bad = ok & ((gbs_k % np.maximum(per, 1) != 0) | ((ipp > 0) & (m % np.maximum(ipp, 1) != 0)))
    for i in np.flatnonzero(bad):
        s = strategies[i]
        try:
            m[i] = _check_m(cluster, workload, s, int(per[i]) // s.micro_batch)
        except SpecError as err:
            errors[int(i)] = err
            ok[i] = False
    if errors and on_invalid is OnInvalid.RAISE:
        i = min(errors)
        raise SpecError(errors[i].field, f"candidate {i}: {errors[i].problem}") from None
    return _evaluate(cluster, workload, strategies, n, ids, ok, m, sc, np.array(gbs, dtype=float),
                     np.array(pre), reads, errors, store, shape_of, row_of)


def _evaluate(cluster, workload, strategies, n, ids, ok, m, sc, gbs, pre, reads, errors, store, shape_of,
              row_of) -> pd.DataFrame:
    """Run the closed form once per (p, v) shape over its valid candidates and build the frame."""
    data = np.zeros(n)
    for i in reads:
        if ok[i]:
            data[i] = data_s(cluster, strategies[i], int(sc[i, _WORLD]))
    step, slowest = np.full(n, np.nan), np.full(n, -1)
    bd = np.full((n, len(Category)), np.nan)
    idx_ok = np.flatnonzero(ok)
    shapes = shape_of[ids[idx_ok]]
    for shape in np.unique(shapes):
        idx = idx_ok[shapes == shape]
        stack, rows = store.shape(int(shape)), row_of[ids[idx]]
        arrays = StepArrays(p=stack.p, v=stack.v, data=data[idx], **{f: getattr(stack, f)[rows] for f in _FIELDS})
        out = evaluate(arrays, m[idx], sc[idx, _SCHED].astype(int), pre[idx])
        step[idx], slowest[idx] = out["step_time_s"], out["slowest"]
        bd[idx] = out["breakdown"][np.arange(len(idx)), out["slowest"]]
    seq = workload.seq_len
    gbs_n, world = np.zeros(n), np.ones(n)
    gbs_n[:len(gbs)], world[:len(ids)] = gbs, sc[:, _WORLD]
    model, hw = np.full(n, np.nan), np.full(n, np.nan)
    model[idx_ok] = sc[idx_ok, _MODEL] * gbs_n[idx_ok] * seq
    hw[idx_ok] = sc[idx_ok, _HW] * gbs_n[idx_ok] * seq
    m_n = np.zeros(n)
    m_n[idx_ok] = m[idx_ok]
    peak = cluster.device.peak_flops(workload.dtype.compute_dtype)
    columns = {"step_time_s": step, "tokens_per_s": gbs_n * seq / step,
               "mfu": model / (step * world * peak), "hfu": hw / (step * world * peak),
               "slowest_stage": slowest, "micro_batches": m_n}
    columns.update({c.value: bd[:, k] for k, c in enumerate(Category)})
    messages = [""] * n
    for i, err in errors.items():
        messages[i] = str(err)
    columns["error"] = messages
    return pd.DataFrame(columns)
