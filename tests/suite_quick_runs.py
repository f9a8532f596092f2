"""The quick suite's recorded runs (tests/data/suite_quick) compiled again on a cluster, for the host-overhead tests.

:func:`run_case` loads a recorded run's plan and workload, builds its layout on ``localhost-cpu`` (or a cluster
given) and compiles its step; :func:`device_with` is that cluster with some device fields replaced.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from simulator.compile import compile_step
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.validate import run_cluster, run_workload

RUNS = Path(__file__).parent / "data" / "suite_quick"


def device_with(cluster, **fields):
    return dataclasses.replace(cluster, device=dataclasses.replace(cluster.device, **fields))


def run_case(case: str, cluster="localhost-cpu"):
    results = load_results(RUNS / f"{case}.results.json")
    chosen = run_cluster(results, cluster) if isinstance(cluster, str) else cluster
    workload, plan = run_workload(results), results.run.plan
    layout = build_layout(plan.strategy, chosen, workload, gpus=plan._layout_gpus())
    return chosen, workload, layout, compile_step(chosen, workload, plan.strategy, layout=layout)
