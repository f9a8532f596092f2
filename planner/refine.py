"""Re-simulate the best candidates with the discrete-event engine, in parallel over processes.

The closed form ranks thousands of candidates; the DES plays the few best with contention on
shared links, so the final ranking is by the DES step time. ``jobs`` worker processes run the
candidates (each its own compile and simulation); the results come back in the input order, so
the ranking does not depend on which process finished first. In one process the candidates share
their communication calls' plans (one :class:`~simulator.engine.call_plan.CallPlanner` for the
cluster: a plan depends on the call and the cluster only), which the DES would otherwise build again
per candidate (at 1,024 GPUs, a fifth of a refinement). While it runs, the cyclic garbage collector walks
the whole heap ten times less often
(:data:`simulator.engine.gc_passes.FULL_COLLECTION_EVERY`).
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from simulator.compile import compile_step
from simulator.engine.call_plan import CallPlanner
from simulator.engine.gc_passes import rarer_full_collections, rarer_full_passes
from simulator.engine.step import simulate
from simulator.strategy import build_layout


def des_step(cluster, workload, strategy, gpus: int | None = None, plans: CallPlanner | None = None):
    """The DES :class:`StepResult` of one strategy on the first ``gpus`` workers (None: the whole
    cluster), no timeline kept; ``plans``: call plans shared with other candidates on ``cluster``."""
    layout = build_layout(strategy, cluster, workload, gpus=gpus)
    work = compile_step(cluster, workload, strategy, layout=layout)
    return simulate(work, cluster, trace=False, plans=plans)


def _one(args):
    return des_step(*args)


def refine(cluster, workload, strategies, jobs: int = 1, gpus: int | None = None, tick=None,
           share_plans: bool = True) -> list:
    """DES results of ``strategies`` on ``gpus`` workers, in order; ``jobs`` > 1 runs them in that many
    processes; ``tick(done, total)`` after each result. In one process the candidates share one
    :class:`CallPlanner` (``share_plans``; False: each its own, the reference it is tested against)."""
    if jobs <= 1 or len(strategies) <= 1:  # one process: the candidates share their call plans
        plans = CallPlanner(cluster) if share_plans else None
        with rarer_full_collections():
            return _collect((des_step(cluster, workload, s, gpus, plans) for s in strategies), len(strategies), tick)
    tasks = [(cluster, workload, s, gpus) for s in strategies]
    with ProcessPoolExecutor(max_workers=jobs, initializer=rarer_full_passes) as pool:
        return _collect(pool.map(_one, tasks), len(tasks), tick)


def _collect(results, total: int, tick) -> list:
    out = []
    for r in results:
        out.append(r)
        if tick is not None:
            tick(len(out), total)
    return out
