"""What ``validate --suite --retries`` re-measures, read from suite folders only (no run of its own).

Two uses:

- ``--attempts RUNS``: a folder run with ``--retries``: every attempt of every case re-validated on the folder's
  cluster: measured step, analytical error, speed drift, other work's CPU share; ``*`` marks the attempt used.
- ``--drift-vs-step RUNS ...``: several suite folders of the same suite: per case, the step's distance from its own
  median over the folders, for runs whose speed drift is over ``SPEED_DRIFT_MAX`` against the others, and the
  Pearson correlation of the probe reading (max and mean of a case's two, over the median of every reading) with
  step / the case's median: does the probe's drift predict a moved step? Also, per folder, how many drift-flagged
  cases had the reading one case later back within the threshold (what a retry right after could clear).

Usage: ``python benchmarks/suite_attempts.py --attempts /tmp/val28/q1`` or
``python benchmarks/suite_attempts.py --drift-vs-step /work/runs23/r{1,2,3,4,5}/runs``.
Results: docs/validation.md, ``### val28``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from simulator.run_results import load_results
from simulator.suite_report import SPEED_DRIFT_MAX, run_drift
from simulator.suite_runs import load_manifest, results_file, suite_cluster
from simulator.validate import run_cluster, validate
from simulator.validation_suite import CASES


def _step(path: Path, cluster: str | None):
    results = load_results(path)
    return validate(results, run_cluster(results, cluster)).row("step_time_s")


def attempts(runs: Path) -> None:
    m = load_manifest(runs)
    cluster = suite_cluster(runs, m, None)
    for c in m.cases:
        cells = []
        for k, a in enumerate(c.attempts, 1):
            row = _step(runs / a.results, cluster)
            cells.append(f"{'*' if k == c.attempt else ' '}{row.measured * 1e3:.2f} ms {row.error_analytical:+.1%} "
                         f"(drift {run_drift(a, m.speed_reference_s):.1%}, other {a.foreign_cpu_fraction:.0%})")
        print(f"{c.name:16s}", " | ".join(cells))


def drift_vs_step(folders: list[Path]) -> None:
    manifests = {f: load_manifest(f) for f in folders}
    cases = [c for c in CASES if all(m.record(c.name) and not m.record(c.name).skipped for m in manifests.values())]
    read = statistics.median(t for m in manifests.values() for c in m.cases if not c.skipped
                             for t in (c.speed_before_s, c.speed_after_s))
    flagged, other, xs_max, xs_mean, ys = [], [], [], [], []
    for case in cases:
        steps = {f: load_results(results_file(f, case)).summary()["step_time_s"]["median_s"] for f in folders}
        median = statistics.median(steps.values())
        for f, m in manifests.items():
            rec = m.record(case.name)
            (flagged if run_drift(rec, m.speed_reference_s) > SPEED_DRIFT_MAX else other).append(
                abs(steps[f] / median - 1))
            xs_max.append(max(rec.speed_before_s, rec.speed_after_s) / read)
            xs_mean.append((rec.speed_before_s + rec.speed_after_s) / 2 / read)
            ys.append(steps[f] / median)
    print(f"|step / case median - 1|: drift > {SPEED_DRIFT_MAX:.0%} median {statistics.median(flagged):.1%} "
          f"(n = {len(flagged)}), others {statistics.median(other):.1%} (n = {len(other)})")
    print("Pearson r (probe / median reading, step / case median): "
          f"max of two {statistics.correlation(xs_max, ys):.2f}, mean of two {statistics.correlation(xs_mean, ys):.2f}")
    for f, m in manifests.items():
        ran = [c for c in m.cases if not c.skipped]
        drifted = [i for i, c in enumerate(ran) if run_drift(c, m.speed_reference_s) > SPEED_DRIFT_MAX]
        clear = sum(i + 1 < len(ran) and abs(ran[i + 1].speed_after_s / m.speed_reference_s - 1) <= SPEED_DRIFT_MAX
                    for i in drifted)
        print(f"{f}: {len(drifted)} of {len(ran)} cases drifted; reading one case later within the threshold: {clear}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attempts", type=Path, metavar="RUNS", help="a suite folder run with --retries")
    ap.add_argument("--drift-vs-step", type=Path, nargs="+", metavar="RUNS", help="suite folders of one suite")
    args = ap.parse_args()
    if args.attempts:
        attempts(args.attempts)
    if args.drift_vs_step:
        drift_vs_step(args.drift_vs_step)


if __name__ == "__main__":
    main()
