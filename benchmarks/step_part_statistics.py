"""Is a step's median the sum of its parts' medians? The calibration's rank-step probe, parts kept per step.

``trainplan calibrate --compute`` times the tiny model's step on 2 gloo processes (:mod:`executor.step_bench`) and
writes each part's *median* over the timed steps (forward and backward per micro-batch, the AdamW step, the loop
outside them) into the per-call and loop fields the estimate adds up; the suite compares the estimate with the
measured step's median. This probe runs the same function (:func:`executor.step_bench._rank_steps`, 2 processes,
1 thread each, 2 micro-batches, 100 timed steps after 5) and, per rank, prints

- ``sum of part medians / step median − 1``: what an estimate whose every part equals its median misses;
- ``(mean − median) / step median`` per part: each part's right skew, in the step's units;
- ``mid-step parts``: each part's mean over the steps whose total lies between the 40th and 60th percentile (the
  parts of the median steps, which add up to about the median step) against the part's median.

Results: docs/validation.md, ``### bias21``. Usage: ``PYTHONPATH=. python benchmarks/step_part_statistics.py
--launches 4`` (~30 s a launch on the 2-core VM; note the load, which it prints).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from dataclasses import replace

MICRO_BATCHES = 2
"""As :data:`executor.step_bench.STEP_PROBE_MICRO_BATCHES`."""
MID_BAND = (0.4, 0.6)
"""The percentile band of the step totals whose parts are averaged for the mid-step parts."""


def _launch():
    from executor.compute_grid import default_grid, executed
    from executor.launch import run
    from executor.step_bench import STEP_PROBE_PROCESSES, _rank_steps
    from simulator.validation_suite import MODEL
    from simulator.workload import DtypePolicy, get_preset

    grid = default_grid(get_preset(MODEL), DtypePolicy.FP32)
    model = executed(replace(grid.block, dtype=DtypePolicy.FP32))
    with tempfile.TemporaryDirectory(prefix="step-part-statistics-") as status:
        return run(_rank_steps, STEP_PROBE_PROCESSES, args=(model, grid.micro_batch, MICRO_BATCHES, 100, 5, 0,
                                                           status, False), num_threads=1)


def part_statistics(parts: dict[str, list[float]]) -> dict:
    """The figures of the module docstring for one rank's parts (seconds per step, the same steps in each)."""
    steps = [sum(p[k] for p in parts.values()) for k in range(len(next(iter(parts.values()))))]
    median = statistics.median(steps)
    ordered = sorted(steps)
    low, high = (ordered[int(q * (len(ordered) - 1))] for q in MID_BAND)
    mid = [k for k, t in enumerate(steps) if low <= t <= high]
    return {"step_median_s": median, "step_mean_s": statistics.fmean(steps),
            "sum_of_medians": sum(statistics.median(p) for p in parts.values()) / median - 1,
            "skew": {n: (statistics.fmean(p) - statistics.median(p)) / median for n, p in parts.items()},
            "mid_parts": {n: statistics.fmean(p[k] for k in mid) / statistics.median(p) - 1 for n, p in parts.items()},
            "sum_of_mid_parts": sum(statistics.fmean(p[k] for k in mid) for p in parts.values()) / median - 1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=4)
    args = ap.parse_args()
    for i in range(args.launches):
        load = os.getloadavg()[0]
        for rank, (fwd, bwd, outside, opt, _cold, _last, *_) in enumerate(_launch()):
            s = part_statistics({"forward": [t * MICRO_BATCHES for t in fwd], "backward": [t * MICRO_BATCHES
                                 for t in bwd], "optimizer": opt, "outside": outside})
            skew = ", ".join(f"{n} {v:+.1%}" for n, v in s["skew"].items())
            mid = ", ".join(f"{n} {v:+.1%}" for n, v in s["mid_parts"].items())
            print(f"launch {i} rank {rank} (load {load:.1f}): step median {s['step_median_s'] * 1e3:.2f} ms, mean "
                  f"{s['step_mean_s'] * 1e3:.2f}; sum of part medians {s['sum_of_medians']:+.1%}; (mean − median) "
                  f"/ step: {skew}; mid-step parts / part median − 1: {mid} (their sum {s['sum_of_mid_parts']:+.1%} "
                  "of the step median)", flush=True)


if __name__ == "__main__":
    main()
