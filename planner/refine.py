"""Re-simulate the best candidates with the discrete-event engine, in parallel over processes.

The closed form ranks thousands of candidates; the DES plays the few best with contention on
shared links, so the final ranking is by the DES step time. ``jobs`` worker processes run the
candidates (each its own compile and simulation); the results come back in the input order, so
the ranking does not depend on which process finished first. The candidates one process simulates
share their communication calls' plans (one :class:`~simulator.engine.call_plan.CallPlanner` for the
cluster per process: a plan depends on the call and the cluster only), which the DES would otherwise
build again per candidate (at 1,024 GPUs, a fifth of a refinement): in one process all of them, and
each worker keeps its planner from one candidate to the next it is given. While it runs, the cyclic
garbage collector walks the whole heap ten times less often
(:data:`simulator.engine.gc_passes.FULL_COLLECTION_EVERY`).

:func:`default_jobs` (the CLI's ``--jobs`` default) is one process per core this process may run on (here at
most one per candidate): the DES runs are independent, so on an otherwise idle machine of ``n`` cores the
refinement's wait shrinks towards ``1/n`` (the CPU seconds stay about the same: each worker builds its own
call plans). The rank phase uses them too (:func:`planner.score.score`).
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

from simulator.compile import compile_step
from simulator.engine.call_plan import CallPlanner
from simulator.engine.gc_passes import frozen_heap, rarer_full_collections, rarer_full_passes
from simulator.engine.step import simulate
from simulator.strategy import build_layout


def des_step(cluster, workload, strategy, gpus: int | None = None, plans: CallPlanner | None = None):
    """The DES :class:`StepResult` of one strategy on the first ``gpus`` workers (None: the whole
    cluster), no timeline kept; ``plans``: call plans shared with other candidates on ``cluster``."""
    layout = build_layout(strategy, cluster, workload, gpus=gpus)
    work = compile_step(cluster, workload, strategy, layout=layout)
    return simulate(work, cluster, trace=False, plans=plans)


def default_jobs() -> int:
    """Processes for a search (at least 1): the cores this process may run on (``os.sched_getaffinity`` where the
    platform has it, else ``os.cpu_count``). :func:`refine` uses at most one per candidate."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores)


_WORKER: dict = {}
"""A worker process's refinement context, set by :func:`_start_worker`: the cluster, workload, GPU count and
the call planner its candidates share."""


def _start_worker(cluster, workload, gpus, share_plans: bool) -> None:
    rarer_full_passes()
    _WORKER.update(cluster=cluster, workload=workload, gpus=gpus,
                   plans=CallPlanner(cluster) if share_plans else None)


def _worker_step(strategy):
    w = _WORKER
    return des_step(w["cluster"], w["workload"], strategy, w["gpus"], w["plans"])


def refine(cluster, workload, strategies, jobs: int = 1, gpus: int | None = None, tick=None,
           share_plans: bool = True) -> list:
    """DES results of ``strategies`` on ``gpus`` workers, in order; ``jobs`` > 1 runs them in that many
    processes (each given the next candidate when it is free); ``tick(done, total)`` after each result.
    The candidates one process simulates share one :class:`CallPlanner` (``share_plans``; False: each its own,
    the reference it is tested against)."""
    jobs = min(jobs, len(strategies))
    if jobs <= 1:  # one process: the candidates share their call plans
        plans = CallPlanner(cluster) if share_plans else None
        with rarer_full_collections():
            return _collect((des_step(cluster, workload, s, gpus, plans) for s in strategies), len(strategies), tick)
    with frozen_heap(), ProcessPoolExecutor(max_workers=jobs, initializer=_start_worker,
                                            initargs=(cluster, workload, gpus, share_plans)) as pool:
        return _collect(pool.map(_worker_step, strategies), len(strategies), tick)


def _collect(results, total: int, tick) -> list:
    out = []
    for r in results:
        out.append(r)
        if tick is not None:
            tick(len(out), total)
    return out
