"""How reproducible is a case's measured step time, and what makes it move? Reads results files only.

Two uses:

- ``--runs A B``: two suite runs' folders (``trainplan validate --suite --runs``): per case, the statistic
  of run A and run B (median, mean, 10 %-trimmed mean of the slowest rank's measured steps, as
  ``simulator.run_results`` takes them) and, for run A, the bootstrap p10..p90 of each statistic over
  400 resamples of its steps (the sampling spread that ``n`` steps leave, seed 0): a shift between the
  runs well beyond that spread is a change of the machine, not of the sample.
- ``--repeats GLOB ...``: results files of one case run several times (one glob per design): the
  median, mean and spread of the per-run medians (relative spread: (max − min) / median of the medians),
  and the steps each run measured; and within each run the bootstrap p10..p90 of its median (the
  median of the runs' figures), which depends less on how loaded the machine was than the spread across runs.

Usage: ``python benchmarks/step_spread.py --runs /work/runs16/q15r3 /work/runs16/q15r4`` or
``python benchmarks/step_spread.py --repeats 'out/base/ps-sync.*.json' 'out/budget/ps-sync.*.json'``.
Results: docs/validation.md (branch var16), [src: own-step-spread-2026-11-25].
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import numpy as np

BOOTSTRAP_RESAMPLES = 400
TRIM = 0.1


def slowest_measured_s(path: str | Path) -> np.ndarray:
    """The slowest rank's time of each measured step (after warm-up), seconds."""
    d = json.loads(Path(path).read_text())
    times = np.array([r["step_time_s"] for r in d["ranks"]])
    return times.max(axis=0)[d["run"]["warmup"]:]


def trimmed_mean(x: np.ndarray, share: float = TRIM) -> float:
    x, k = np.sort(x), int(len(x) * share)
    return float(x[k:len(x) - k].mean())


STATISTICS = {"median": lambda x: float(np.median(x)), "mean": lambda x: float(np.mean(x)), "trimmed": trimmed_mean}


def bootstrap_spread(x: np.ndarray, stat, rng) -> float:
    """(p90 − p10) / value of ``stat`` over resamples of ``x``: the sampling spread of ``len(x)`` steps."""
    values = [stat(rng.choice(x, len(x))) for _ in range(BOOTSTRAP_RESAMPLES)]
    return float((np.percentile(values, 90) - np.percentile(values, 10)) / stat(x))


def compare_runs(a: Path, b: Path) -> None:
    rng = np.random.default_rng(0)
    shifts: dict[str, list[float]] = {k: [] for k in STATISTICS}
    spreads: dict[str, list[float]] = {k: [] for k in STATISTICS}
    for path in sorted((a / "runs").glob("*.results.json")):
        other = b / "runs" / path.name
        if not other.exists():
            continue
        xa, xb = slowest_measured_s(path), slowest_measured_s(other)
        cells = []
        for name, stat in STATISTICS.items():
            va, vb = stat(xa), stat(xb)
            spread = bootstrap_spread(xa, stat, rng)
            shifts[name].append(abs(np.log(vb / va)))
            spreads[name].append(spread)
            cells.append(f"{name} {va * 1e3:7.2f} -> {vb * 1e3:7.2f} ms ({(vb / va - 1) * 100:+6.1f} %, "
                         f"bootstrap {spread * 100:4.1f} %)")
        print(f"{path.name.removesuffix('.results.json'):20s} n={len(xa):3d}  " + " | ".join(cells))
    for name in STATISTICS:
        s, p = np.array(shifts[name]) * 100, np.array(spreads[name]) * 100
        print(f"{name:8s} |log B/A| median {np.median(s):4.1f} %, max {s.max():4.1f} %; "
              f"bootstrap p10..p90 median {np.median(p):4.1f} %")


def compare_repeats(patterns: list[str]) -> None:
    for pattern in patterns:
        files = sorted(glob.glob(pattern))
        if not files:
            print(f"{pattern}: no files")
            continue
        runs = [slowest_measured_s(f) for f in files]
        medians = np.array([np.median(x) for x in runs]) * 1e3
        means = np.array([np.mean(x) for x in runs]) * 1e3
        steps = [len(x) for x in runs]
        rel = (medians.max() - medians.min()) / np.median(medians)
        rng = np.random.default_rng(0)
        boot = np.median([bootstrap_spread(x, STATISTICS["median"], rng) for x in runs])
        print(f"{pattern}: {len(files)} runs, measured steps {min(steps)}..{max(steps)}; per-run medians ms "
              + " ".join(f"{m:.2f}" for m in medians)
              + f"; median of them {np.median(medians):.2f}, (max-min)/median {rel * 100:.1f} %, "
              f"sd/mean {medians.std(ddof=1) / medians.mean() * 100:.1f} %; per-run means sd/mean "
              f"{means.std(ddof=1) / means.mean() * 100:.1f} %; within a run, the median's bootstrap p10..p90 "
              f"{boot * 100:.1f} % (median of runs)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", nargs=2, type=Path, metavar=("A", "B"))
    p.add_argument("--repeats", nargs="+", metavar="GLOB")
    args = p.parse_args()
    if args.runs:
        compare_runs(*args.runs)
    if args.repeats:
        compare_repeats(args.repeats)


if __name__ == "__main__":
    main()
