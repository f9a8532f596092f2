"""How much slower is a rank's step after the run's results rewrite than after the loop's other bookkeeping?

Runs :func:`executor.step_save_bench.time_save_steps` (the plain tiny gpt3-125m model's step on 2 gloo processes as
``executor/step_bench.py`` runs it, rank 0 rewriting a suite-sized results file before every other step) ``--runs``
times and prints, per run, rank 0's rewrite (median, p10-p90), each rank's step after a rewrite and after none
(medians), and ``host.step_after_save_us`` (from lower quartiles) with its bootstrap spread; then the median and
range over the runs.

Usage: ``PYTHONPATH=. python benchmarks/step_save_probe.py --runs 3``. Results: docs/validation.md (ddp16, save16),
[src: own-step-save-probe], [src: own-step-save-repeats].
"""

from __future__ import annotations

import argparse
import statistics

from executor.compute_grid import executed, tiny_model
from executor.step_save_bench import time_save_steps
from simulator.workload import get_preset
from simulator.workload.kinds import DtypePolicy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=60, help="steps of each kind per run")
    args = p.parse_args()
    spec = executed(tiny_model(get_preset("gpt3-125m"), DtypePolicy.FP32))
    terms = []
    for run in range(args.runs):
        t = time_save_steps(spec, 2, repeats=args.repeats)
        ms = lambda ts: " / ".join(f"{x.median_s * 1e3:.3f}" for x in ts)  # noqa: E731
        terms.append(t.step_after_save_us)
        print(f"run {run + 1}: rewrite {t.save.median_s * 1e3:.1f} ms (p10-p90 {t.save.p10_s * 1e3:.1f}-"
              f"{t.save.p90_s * 1e3:.1f}); step after it {ms(t.after_save)} ms, after none {ms(t.plain)} ms "
              f"(rank 0 / 1); step_after_save_us {t.step_after_save_us:.0f} (lower quartiles; bootstrap p10..p90 "
              f"{t.spread_us[0]:.0f}..{t.spread_us[1]:.0f})", flush=True)
    print(f"step_after_save_us: median {statistics.median(terms):.0f}, range {min(terms):.0f}-{max(terms):.0f} "
          f"over {len(terms)} runs")


if __name__ == "__main__":
    main()
