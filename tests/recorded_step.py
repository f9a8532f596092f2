"""One recorded quick-suite case (``tests/data/suite_quick``) re-estimated on a changed cluster: the helper the tests
of the host terms share (step loop, FSDP2's loop, the rank-jitter term)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from simulator.analytical import estimate_work
from simulator.compile import compile_step
from simulator.engine.step import simulate
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.validate import run_workload

RUNS = Path(__file__).resolve().parent / "data" / "suite_quick"


def with_host(cluster, **fields):
    """``cluster`` with the named ``node.host`` fields replaced."""
    host = dataclasses.replace(cluster.node.host, **fields)
    return dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host))


def recorded_step(case: str, cluster):
    """(compiled work, layout, analytical step s, DES step s) of the recorded ``case`` on ``cluster``."""
    results = load_results(RUNS / f"{case}.results.json")
    workload, plan = run_workload(results), results.run.plan
    layout = build_layout(plan.strategy, cluster, workload, gpus=plan._layout_gpus())
    work = compile_step(cluster, workload, plan.strategy, layout=layout)
    return work, layout, estimate_work(work).step_time_s, simulate(work, cluster, trace=False).step_time_s
