"""What taking the volatile probes at several moments costs a calibration (executor/calibrate_moments.py).

Times, interleaved, ``--pairs`` times: the 2-process points of the default network sweep
(:func:`executor.calibrate_run.measure_design`) with one moment against :data:`~executor.calibrate_moments.MOMENTS`,
and the step-after-save probe (:func:`executor.step_save_bench.time_save_steps`) as one take of 40 steps of each kind
against the calibration's takes of :data:`~executor.step_save_bench.CALIBRATE_REPEATS`; prints each wall time and
the load average.

Usage: ``PYTHONPATH=. python benchmarks/moments_cost.py --pairs 2``. Results: docs/calibration.md, "Volatile probes
at several moments".
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace


def _sweep_s(moments: int) -> float:
    from executor.calibrate_modes import without_waits
    from executor.calibrate_run import DEFAULT_ALGORITHMS, DEFAULT_SIZES, measure_design, probes_for, series_for
    from executor.collective_bench import local_cluster
    from simulator.collectives.base import Op

    series = series_for(Op.ALL_REDUCE, DEFAULT_ALGORITHMS) + list(probes_for(DEFAULT_ALGORITHMS, "gloo"))
    start = time.perf_counter()
    measure_design(without_waits(local_cluster(4, None)), series, (2,), list(DEFAULT_SIZES), backend="gloo",
                   repeats=20, warmup=3, progress=False, moments=moments)
    return time.perf_counter() - start


def _save_s(takes: int, repeats: int) -> float:
    from executor.compute_grid import default_grid, executed
    from executor.step_save_bench import time_save_steps
    from simulator.validation_suite import MODEL
    from simulator.workload import get_preset
    from simulator.workload.kinds import DtypePolicy

    grid = default_grid(get_preset(MODEL), DtypePolicy.FP32)
    spec = executed(replace(grid.block, dtype=DtypePolicy.FP32))
    start = time.perf_counter()
    for _ in range(takes):
        time_save_steps(spec, grid.micro_batch, repeats=repeats)
    return time.perf_counter() - start


def main() -> None:
    from executor.calibrate_moments import MOMENTS
    from executor.step_save_bench import CALIBRATE_REPEATS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=2)
    args = p.parse_args()
    for _ in range(args.pairs):
        load = os.getloadavg()[0]
        print(f"2-process sweep: 1 moment {_sweep_s(1):.1f} s, {MOMENTS} moments {_sweep_s(MOMENTS):.1f} s; save probe: "
              f"one take of 40 {_save_s(1, 40):.1f} s, {MOMENTS} takes of {CALIBRATE_REPEATS} "
              f"{_save_s(MOMENTS, CALIBRATE_REPEATS):.1f} s (load {load:.2f} at the start)", flush=True)


if __name__ == "__main__":
    main()
