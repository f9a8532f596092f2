"""What taking the volatile probes at several moments costs a calibration (executor/calibrate_moments.py).

Times, interleaved, ``--pairs`` times: the 2-process points of the default network sweep
(:func:`executor.calibrate_run.measure_design`) with one moment against :data:`~executor.calibrate_moments.MOMENTS`;
prints each wall time and the load average. (The step-after-save probe it also timed was retired on 2026-11-26 with
the executor's between-step results rewrite: docs/validation.md, cal19.)

Usage: ``PYTHONPATH=. python benchmarks/moments_cost.py --pairs 2``. Results: docs/calibration.md, "Volatile probes
at several moments".
"""

from __future__ import annotations

import argparse
import os
import time


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


def main() -> None:
    from executor.calibrate_moments import MOMENTS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=2)
    args = p.parse_args()
    for _ in range(args.pairs):
        load = os.getloadavg()[0]
        print(f"2-process sweep: 1 moment {_sweep_s(1):.1f} s, {MOMENTS} moments {_sweep_s(MOMENTS):.1f} s "
              f"(load {load:.2f} at the start)", flush=True)


if __name__ == "__main__":
    main()
