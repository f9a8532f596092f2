"""Many candidate strategies at once: the analytical closed form, vectorised with numpy.

``estimate_many(cluster, workload, strategies)`` returns one DataFrame row per strategy with the
same numbers :func:`simulator.analytical.estimate` gives (tested equal). How it is fast:

1. Everything but the global batch decides a candidate's per-chunk and per-rank numbers
   (:class:`simulator.analytical_formula.StepArrays`); those are compiled once per distinct
   structure (with a tiny batch, so no long schedule is built) and remembered in the
   :class:`~simulator.compile.CostCache`, which also remembers every collective time and compute
   table by its inputs — so candidates sharing a tp group, a bucket size or a (tp, micro-batch)
   compute table share the work.
2. The global batch only sets m and the data read; candidates with the same pipeline shape
   (p, v) are stacked and the closed form runs once over the stack.

Pass the same ``cache`` to later calls on the same cluster (a planner's successive sweeps) to
reuse the compiled structures. The cost per candidate is measured by ``benchmarks/bench_analytical.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

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
from simulator.strategy import ParamServerSync, Strategy, build_layout
from simulator.workload import TransformerSpec


def _key(s: Strategy) -> tuple:
    return (s.micro_batch, s.dp, s.tp, s.pp, s.placement, s.schedule, s.virtual_stages, s.layer_split,
            s.sequence_parallel, s.zero, s.offload, s.recompute, s.attention, s.dp_sync)


def _dp(cluster: Cluster, s: Strategy) -> int | None:
    if s.dp is not None:
        return s.dp
    gpus = cluster.world_size
    if isinstance(s.dp_sync, ParamServerSync):
        gpus -= s.dp_sync.server_nodes * cluster.node.gpus_per_node
    return gpus // (s.tp * s.pp) if gpus > 0 and gpus % (s.tp * s.pp) == 0 else None


def _structure(cache: CostCache, workload, s: Strategy, fetch: ParamFetch) -> tuple[StepArrays, int]:
    """(arrays, dp) of a strategy's structure, compiled with the smallest valid batch."""
    def build():
        dp = _dp(cache.cluster, s)
        if dp is None:
            build_layout(s, cache.cluster, workload)  # raises the layout's own error
        interleaved = s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1
        small = replace(s, global_batch=dp * s.micro_batch * (s.pp if interleaved else 1))
        layout = build_layout(small, cache.cluster, workload)
        work = compile_step(cache.cluster, workload, small, fetch=fetch, cache=cache, memory=False, layout=layout)
        return summarize(work), layout.dp
    return cache.memo(("structure", workload, fetch, _key(s)), build)


def _check_m(cluster: Cluster, workload, s: Strategy, dp: int) -> int:
    per = dp * s.micro_batch
    m = s.global_batch // per
    bad = s.global_batch % per or (s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1 and m % s.pp)
    if bad:
        build_layout(s, cluster, workload)  # raises the precise error
    return m


def _stack(items: list[StepArrays]) -> StepArrays:
    first = items[0]

    def cat(name):
        return np.concatenate([getattr(a, name) for a in items])

    return StepArrays(p=first.p, v=first.v, F=cat("F"), B=cat("B"), parts=cat("parts"), cf=cat("cf"), cb=cat("cb"),
                      tail=cat("tail"), sync_exposed=cat("sync_exposed"), opt=cat("opt"), after=cat("after"),
                      data=np.zeros(len(items)))


def estimate_many(cluster: Cluster, workload, strategies: Sequence[Strategy], *,
                  fetch: ParamFetch = ParamFetch.INFINITY, cache: CostCache | None = None,
                  on_invalid: str = "raise") -> pd.DataFrame:
    """One row per strategy: step_time_s, tokens_per_s, mfu, hfu, slowest_stage, m, seconds per
    category (slowest rank), error. ``on_invalid``: ``"raise"`` the first bad strategy's SpecError
    (its message starts with the candidate's index), or ``"mark"`` it (NaN times, the message in
    ``error``)."""
    if on_invalid not in ("raise", "mark"):
        raise SpecError("on_invalid", f"must be 'raise' or 'mark', got {on_invalid!r}")
    cache = CostCache(cluster) if cache is None else cache
    seq = workload.seq_len if isinstance(workload, TransformerSpec) else 1
    groups: dict[tuple[int, int], list[int]] = {}
    arrays, m, errors = [None] * len(strategies), np.zeros(len(strategies)), [""] * len(strategies)
    for i, s in enumerate(strategies):
        try:
            if not isinstance(s, Strategy):
                raise SpecError("strategy", f"expected a Strategy, got {type(s).__name__}")
            arrays[i], dp = _structure(cache, workload, s, fetch)
            m[i] = _check_m(cluster, workload, s, dp)
        except SpecError as err:
            if on_invalid == "raise":
                raise SpecError(err.field, f"candidate {i}: {err.problem}") from None
            errors[i] = str(err)
            continue
        groups.setdefault((arrays[i].p, arrays[i].v), []).append(i)
    cats = list(Category)
    n = len(strategies)
    step, slowest = np.full(n, np.nan), np.full(n, -1)
    bd = np.full((n, len(cats)), np.nan)
    for idx in groups.values():
        stacked = _stack([arrays[i] for i in idx])
        stacked.data = np.array([data_s(cluster, strategies[i], _world(cluster, strategies[i]))
                                 if strategies[i].input.bytes_per_sample else 0.0 for i in idx])
        out = evaluate(stacked, m[idx], np.array([SCHED_CODE[strategies[i].schedule] for i in idx]),
                       np.array([strategies[i].input.prefetch_batches for i in idx]))
        step[idx], slowest[idx] = out["step_time_s"], out["slowest"]
        bd[idx] = out["breakdown"][np.arange(len(idx)), out["slowest"]]
    return _frame(cluster, workload, strategies, step, slowest, bd, m, errors, cache, seq)


def _world(cluster: Cluster, s: Strategy) -> int:
    gpus = cluster.world_size
    if isinstance(s.dp_sync, ParamServerSync):
        gpus -= s.dp_sync.server_nodes * cluster.node.gpus_per_node
    return gpus


def _frame(cluster, workload, strategies, step, slowest, bd, m, errors, cache, seq) -> pd.DataFrame:
    gbs = np.array([s.global_batch for s in strategies], dtype=float)
    flops = [cache.memo(("flops", workload, s.recompute, s.attention),
                        lambda s=s: step_flops(workload, 1, 1, s.recompute, s.attention))
             if not errors[i] else (np.nan, np.nan) for i, s in enumerate(strategies)]
    model = np.array([f[0] for f in flops]) * gbs * seq
    hw = np.array([f[1] for f in flops]) * gbs * seq
    world = np.array([_world(cluster, s) for s in strategies], dtype=float)
    peak = cluster.device.peak_flops(workload.dtype.compute_dtype)
    frame = pd.DataFrame({"step_time_s": step, "tokens_per_s": gbs * seq / step,
                          "mfu": model / (step * world * peak), "hfu": hw / (step * world * peak),
                          "slowest_stage": slowest, "micro_batches": m})
    for k, c in enumerate(Category):
        frame[c.value] = bd[:, k]
    frame["error"] = errors
    return frame
