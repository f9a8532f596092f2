"""Is a multi-rank step's median the median of the per-step maximum over ranks, and how far above a rank's median?

The suite's measured step is, per step, the slowest rank's (``simulator.run_results.Results._slowest``), then the
median over steps; the calibration's probes give per-rank medians. If a part's per-step times jitter
independently across the n ranks with one rank's distribution F, the median of their per-step maximum is
F^-1(0.5^(1/n)) (order statistics: P(max <= x) = F(x)^n), above F's median by a margin that grows with n. Jitter the
ranks share (the whole VM slowed down, or synchronised by a collective) does not raise the maximum.

For each results file (``trainplan execute`` output) and each quantity (the step, each non-zero phase, and the
pre-sync work ``forward + backward``), it prints

- ``rank med``: the mean over ranks of each rank's median over the measured steps (what a per-rank probe reads);
- ``max med``: the median over steps of the per-step maximum over ranks (what the suite compares with);
- ``indep``: F^-1(0.5^(1/n)) of the ranks' pooled samples (the maximum's median if the ranks were independent);
- ``shared``: the share of the per-step variance the ranks share: var(per-step mean over ranks) minus the
  within-step part it carries (var_within / n), over the total per-rank variance (the intraclass correlation;
  1 = every rank moves together, 0 = independent);
- ``local``: the step less its communication phases (``dp``, ``tp``, ``pp``, ``bubble``): the rank's own work;
  for a communication phase, also the median of its per-step minimum over ranks (the last rank to arrive waits
  for no one);
- ``normal``: rank med + σ·z(0.5^(1/n)), σ the independent part's spread read from the ranks' paired per-step
  differences (``simulator.rank_max.independent_sd``): the maximum's median if only that part is independent;
- ``lift``: (max med / rank med − 1), (indep / rank med − 1) and (normal / rank med − 1), in % of the rank median.

Usage: ``PYTHONPATH=. python benchmarks/rank_max_statistics.py RUNS/*.results.json``. Results: docs/validation.md,
``### max23``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from simulator.rank_max import independent_sd, quantile, rank_max_margin, rank_max_quantile


COMM_PHASES = ("dp", "tp", "pp", "bubble")
"""Phases that hold a collective or a transfer, and so a rank's wait for its peers."""


def _measured(values: list[float], warmup: int, steps: int) -> list[float]:
    return values[warmup:steps]


def shared_share(per_rank: list[list[float]]) -> float | None:
    """Intraclass correlation of per-step samples (ranks x steps): the share of a rank's variance that is the steps'."""
    n, steps = len(per_rank), len(per_rank[0])
    if n < 2 or steps < 3:
        return None
    means = [statistics.fmean(r[k] for r in per_rank) for k in range(steps)]
    within = statistics.fmean(statistics.variance([r[k] for r in per_rank]) for k in range(steps))
    between = statistics.variance(means) - within / n
    total = between + within
    return None if total <= 0 else max(0.0, between) / total


def quantity_row(per_rank: list[list[float]]) -> dict:
    """The figures of the module docstring for one quantity (seconds, ranks x measured steps)."""
    n = len(per_rank)
    rank_med = statistics.fmean(statistics.median(r) for r in per_rank)
    max_med = statistics.median(max(r[k] for r in per_rank) for k in range(len(per_rank[0])))
    pooled = [x for r in per_rank for x in r]
    indep = quantile(pooled, rank_max_quantile(n))
    normal = rank_med + rank_max_margin(independent_sd(per_rank), n)
    return {"normal_s": normal, "normal_lift": normal / rank_med - 1 if rank_med else None, "ranks": n,
            "rank_median_s": rank_med, "max_median_s": max_med, "independent_s": indep,
            "shared": shared_share(per_rank), "lift": max_med / rank_med - 1 if rank_med else None,
            "independent_lift": indep / rank_med - 1 if rank_med else None}


def file_rows(path: str) -> dict[str, dict]:
    data = json.load(open(path))
    ranks, warmup = data["ranks"], data["run"]["warmup"]
    steps = min(len(r["step_time_s"]) for r in ranks)
    series = {"step": [_measured(r["step_time_s"], warmup, steps) for r in ranks]}
    names = sorted({p for r in ranks for p in r["phases_s"]})
    for name in names:
        if all(name in r["phases_s"] for r in ranks):
            per = [_measured(r["phases_s"][name], warmup, steps) for r in ranks]
            if any(x > 0 for r in per for x in r):
                series[name] = per
    if "forward" in series and "backward" in series:
        series["forward+backward"] = [[f + b for f, b in zip(fr, br)]
                                      for fr, br in zip(series["forward"], series["backward"])]
    comm = [n for n in COMM_PHASES if n in series]
    series["local"] = [[t - sum(series[n][r][k] for n in comm) for k, t in enumerate(st)]
                       for r, st in enumerate(series["step"])]
    rows = {name: quantity_row(per) for name, per in series.items()}
    for name in comm:  # the comm phase of the rank that arrived last, which waits for no one
        rows[name]["min_median_s"] = statistics.median(min(r[k] for r in series[name])
                                                       for k in range(len(series[name][0])))
    return rows


def probe_rows(launches: int) -> list[dict]:
    """The calibration's rank-step probe (:func:`executor.step_bench._rank_steps`, 2 processes, as ``calibrate
    --compute`` runs it, plain model only), ``launches`` times: each launch's per-rank step totals as a quantity row,
    and the fraction it implies for ``host.rank_jitter_sd_fraction`` (which the calibration does not write)."""
    import os
    import tempfile
    from dataclasses import replace

    from executor.compute_grid import default_grid, executed
    from executor.launch import run, threads_per_rank
    from executor.step_bench import (STEP_PROBE_MICRO_BATCHES as M, STEP_PROBE_PROCESSES, _rank_steps,
                                     step_jitter_fraction)
    from simulator.validation_suite import MODEL
    from simulator.workload import DtypePolicy, get_preset

    grid = default_grid(get_preset(MODEL), DtypePolicy.FP32)
    model = executed(replace(grid.block, dtype=DtypePolicy.FP32))
    rows = []
    for _ in range(launches):
        load0 = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="rank-max-") as status:
            per_rank = run(_rank_steps, STEP_PROBE_PROCESSES,
                           args=(model, grid.micro_batch, M, 100, 5, 0, status, False),
                           num_threads=threads_per_rank(STEP_PROBE_PROCESSES))
        totals = [[(f + b) * M + o + a for f, b, o, a in zip(*r[:4])] for r in per_rank]
        row = quantity_row(totals)
        row.update(fraction=step_jitter_fraction(totals), load=(load0, os.getloadavg()[0]))
        rows.append(row)
    return rows


def print_probe(rows: list[dict]) -> None:
    print("calibration probe (2 processes, plain model, 100 steps after 5; per-rank step totals)")
    print(f"  {'load 1m':>11s} {'rank med ms':>11s} {'max med ms':>10s} {'shared':>6s} {'lift %':>7s} "
          f"{'indep lift %':>12s} {'normal lift %':>13s} {'fraction':>8s}  z·fraction at 4 / 8 ranks %")
    for r in rows:
        print(f"  {r['load'][0]:5.1f}-{r['load'][1]:<5.1f} {r['rank_median_s'] * 1e3:11.2f} "
              f"{r['max_median_s'] * 1e3:10.2f} "
              f"{r['shared'] or 0:6.2f} {r['lift'] * 100:7.1f} {r['independent_lift'] * 100:12.1f} "
              f"{r['normal_lift'] * 100:13.1f} {r['fraction']:8.4f}  {rank_max_margin(r['fraction'], 4) * 100:.1f} / "
              f"{rank_max_margin(r['fraction'], 8) * 100:.1f}")


def print_summary(out: dict[str, dict]) -> None:
    """Per case the lift of the step and of the rank's own work (``local``), then their medians per rank count."""
    by_ranks: dict[int, list[tuple[float, float]]] = {}
    for path, rows in out.items():
        step, local = rows["step"], rows["local"]
        print(f"  {path.rsplit('/', 1)[-1]:40s} {step['ranks']} ranks  step lift {step['lift'] * 100:6.1f} %  "
              f"own work lift {local['lift'] * 100:6.1f} %  shared: step {step['shared'] or 0:.2f}, "
              f"own work {local['shared'] or 0:.2f}")
        by_ranks.setdefault(step["ranks"], []).append((step["lift"], local["lift"]))
    for n, lifts in sorted(by_ranks.items()):
        print(f"  {n} ranks, {len(lifts)} case(s): "
              f"median step lift {statistics.median(a for a, _ in lifts) * 100:.1f} %, "
              f"median own work lift {statistics.median(b for _, b in lifts) * 100:.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="*", help="results files of trainplan execute")
    ap.add_argument("--probe", type=int, default=0, metavar="LAUNCHES",
                    help="also launch the calibration's rank-step probe this many times (~30 s each)")
    ap.add_argument("--summary", action="store_true",
                    help="one line per case (step and own-work lift) and their medians per rank count")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    missing = next((path for path in args.results if not os.path.isfile(path)), None)
    if missing is not None:  # checked before any probe launch (~30 s each)
        ap.exit(2, f"results: no such file {missing!r}; pass results files written by trainplan execute\n")
    if args.probe:
        rows = probe_rows(args.probe)
        if args.json:
            json.dump({"probe": rows}, sys.stdout, indent=1)
        else:
            print_probe(rows)
    out = {path: file_rows(path) for path in args.results}
    if args.summary:
        print_summary(out)
        return
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        return
    for path, rows in out.items():
        n = next(iter(rows.values()))["ranks"]
        print(f"{path}  ({n} ranks; rank max median at the {rank_max_quantile(n):.3f} quantile if independent)")
        print(f"  {'quantity':18s} {'rank med ms':>11s} {'max med ms':>10s} {'indep ms':>9s} {'shared':>6s} "
              f"{'lift %':>7s} {'indep lift %':>12s} {'normal lift %':>13s}")
        for name, r in rows.items():
            shared = "  -   " if r["shared"] is None else f"{r['shared']:6.2f}"
            print(f"  {name:18s} {r['rank_median_s'] * 1e3:11.2f} {r['max_median_s'] * 1e3:10.2f} "
                  f"{r['independent_s'] * 1e3:9.2f} {shared} {r['lift'] * 100:7.1f} "
                  f"{r['independent_lift'] * 100:12.1f} {r['normal_lift'] * 100:13.1f}"
                  + (f"  (per-step min {r['min_median_s'] * 1e3:.2f} ms)" if "min_median_s" in r else ""))


if __name__ == "__main__":
    main()
