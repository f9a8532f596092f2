"""Where a suite's signed step-time error sits, phase kind by phase kind (no run: recorded suites re-validated).

For each case of each ``--runs`` folder (a ``trainplan validate --suite`` folder: results files, ``suite.json``
and the cluster file it was estimated on), the estimate's breakdown (analytical engine, :mod:`simulator.validate`)
against the measured phases of the rank that set each step (the slowest), so that the measured kinds add up to the
measured step. Per kind k, over the timed steps,

    contribution_k = (estimate_k − median_k) / median step,
    not additive   = step error − Σ_k contribution_k  (= (Σ_k median_k − median step) / median step, as the
                     estimate's breakdown covers its step)

so the contributions and "not additive" add up to the case's signed step error; the table is their mean over the
case-runs, overall, by process count and per folder, beside each kind's own error (estimate_k / median_k − 1).
Below it, over the case-runs with phases (parameter servers left out), each measured phase's right skew
(mean − median) / median step, the step's own (mean − median) / median, and (median − Σ phase medians) / median.
Kinds: forward + backward (+ recompute), split by whether FSDP2's calls (the estimate's ``zero``) or TP's
DTensor host time run inside them; optimizer + the loop outside every phase (the estimate charges the loop with
the optimizer, :mod:`simulator.step_loop`); dp sync; tp collectives; pipeline p2p + bubble; a parameter server's
worker step (its forward and dp phases) against the estimate's forward + backward + ps + optimizer.

Results: docs/validation.md, ``### bias21``. Usage: ``PYTHONPATH=. python benchmarks/suite_bias_by_phase.py
--runs R1/runs R2/runs ...`` (a few seconds per folder).
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from simulator.results import Category

FSDP2 = {"zero2", "zero3", "zero3-offload"}
TP_INSIDE = {"tp", "tp-sp", "tp-dp", "3d"}
PS = {"ps-sync", "ps-async"}
NOT_ADDITIVE = "not additive (step median − Σ part medians)"


def kinds(case: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Kind → (measured phases, estimate categories) for ``case`` (module docstring)."""
    if case in PS:
        return {"parameter server (worker step)": (("forward", "dp"), ("forward", "backward", "ps", "optimizer"))}
    inside = ("fwd+bwd, FSDP2 calls inside" if case in FSDP2 else "fwd+bwd, TP host + DTensor" if case in TP_INSIDE
              else "fwd+bwd compute (+recompute)")
    opt = ("optimizer", "zero") if case == "zero1" else ("optimizer",) if case in FSDP2 else ("optimizer", "offload")
    return {inside: (("forward", "backward", "recompute"),
                     ("forward", "backward", "recompute") + (("zero", "offload") if case in FSDP2 else ())),
            "optimizer + step loop": (("optimizer", "outside"), opt), "dp sync": (("dp",), ("dp",)),
            "tp collectives": (("tp",), ("tp",)), "pipeline p2p + bubble": (("pp", "bubble"), ("pp", "bubble"))}


def _measured_kinds(results, case: str) -> tuple[float, dict[str, float]]:
    """The median step (slowest rank per step) and, per kind, the median of that rank's phases."""
    per, steps = defaultdict(list), []
    for k in range(results.run.warmup, results.completed_steps):
        rank = max(results.ranks, key=lambda r: r.step_time_s[k])
        if case in PS:  # the slowest worker's phases (the server has none of them)
            rank = max((r for r in results.ranks if "forward" in r.phases_s), key=lambda r: r.step_time_s[k])
        steps.append(max(r.step_time_s[k] for r in results.ranks))
        phases = {p: t[k] for p, t in rank.phases_s.items()}
        phases["outside"] = rank.step_time_s[k] - sum(phases.values())
        for kind, (measured, _) in kinds(case).items():
            per[kind].append(sum(phases.get(p, 0.0) for p in measured))
    return statistics.median(steps), {kind: statistics.median(t) for kind, t in per.items()}


def case_split(results, validation, case: str) -> dict:
    """One case-run's signed step error, its contributions per kind and each kind's own error."""
    step, measured = _measured_kinds(results, case)
    est = validation.analytical
    out = {"error": est.step_time_s / step - 1, "contribution": {}, "own": {}}
    for kind, (_, cats) in kinds(case).items():
        e, m = sum(est.breakdown.get(c, 0.0) for c in (Category(x) for x in cats)), measured[kind]
        if e == 0 and m < 1e-4 * step:
            continue  # a kind the case does not have
        out["contribution"][kind] = (e - m) / step
        if m > 0:
            out["own"][kind] = e / m - 1
    out["contribution"][NOT_ADDITIVE] = out["error"] - sum(out["contribution"].values())
    return out


def skew_lines(folders) -> list[str]:
    """The skew figures of the module docstring (phases of the rank that set each step)."""
    from simulator.run_results import load_results

    per_phase, step_skew, gap = defaultdict(list), [], []
    for folder in folders:
        for path in sorted(Path(folder).glob("*.results.json")):
            case = path.name.split(".")[0]
            results = load_results(path)
            if case in PS or not results.ranks or results.completed_steps <= results.run.warmup:
                continue
            phases, steps = defaultdict(list), []
            for k in range(results.run.warmup, results.completed_steps):
                rank = max(results.ranks, key=lambda r: r.step_time_s[k])
                steps.append(rank.step_time_s[k])
                values = {p: t[k] for p, t in rank.phases_s.items()}
                values["outside"] = rank.step_time_s[k] - sum(values.values())
                for p, t in values.items():
                    phases[p].append(t)
            median = statistics.median(steps)
            for p, t in phases.items():
                per_phase[p].append((statistics.fmean(t) - statistics.median(t)) / median)
            step_skew.append(statistics.fmean(steps) / median - 1)
            gap.append(1 - sum(statistics.median(t) for t in phases.values()) / median)
    n = len(step_skew)
    ordered = sorted(gap)
    parts = ", ".join(f"{p} {_fmt(sum(v) / n)}" for p, v in sorted(per_phase.items(), key=lambda kv: -sum(kv[1]))
                      if any(v))
    return [f"{n} case-runs with phases: (mean − median) / step median per phase, %: {parts} "
            f"(sum {_fmt(sum(sum(v) for v in per_phase.values()) / n)}); step (mean − median) / median "
            f"{_fmt(statistics.fmean(step_skew))} %; (median − Σ phase medians) / median "
            f"{_fmt(statistics.fmean(gap))} % (p10..p90 {_fmt(ordered[n // 10])}..{_fmt(ordered[9 * n // 10])})"]


def _fmt(x: float) -> str:
    return f"{100 * x:+.1f}"


def table(splits: dict[str, list[tuple[int, dict]]]) -> str:
    """Markdown: the mean contribution per kind over all case-runs, 2 / 3-8 processes and per folder."""
    groups = {"all": [s for v in splits.values() for s in v]}
    groups["2 processes"] = [s for s in groups["all"] if s[0] == 2]
    groups["3-8 processes"] = [s for s in groups["all"] if s[0] > 2]
    groups |= {name: v for name, v in splits.items()}
    kinds_seen = sorted({k for _, s in groups["all"] for k in s["contribution"]})
    lines = ["| phase kind (case-runs) | kind's own error, mean (median) | "
             + " | ".join(f"{g} ({len(v)})" for g, v in groups.items()) + " |", "|---|---|" + "---|" * len(groups)]
    for kind in kinds_seen:
        own = [s["own"][kind] for _, s in groups["all"] if kind in s["own"]]
        seen = sum(kind in s["contribution"] for _, s in groups["all"])
        lines.append(f"| {kind} ({seen}) | " + (f"{_fmt(statistics.fmean(own))} ({_fmt(statistics.median(own))})"
                                                if own else "") + " | "
                     + " | ".join(_fmt(sum(s["contribution"].get(kind, 0.0) for _, s in v) / len(v))
                                  for v in groups.values()) + " |")
    lines.append("| **mean signed step error** | | " + " | ".join(
        f"**{_fmt(statistics.fmean(s['error'] for _, s in v))}**" for v in groups.values()) + " |")
    lines.append("| MAPE | | " + " | ".join(f"{100 * statistics.fmean(abs(s['error']) for _, s in v):.1f}"
                                          for v in groups.values()) + " |")
    return "\n".join(lines)


def main() -> None:
    from simulator.run_results import load_results
    from simulator.suite_runs import load_manifest, suite_cluster
    from simulator.validate import run_cluster, validate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", required=True, help="suite folders (trainplan validate --suite --runs)")
    ap.add_argument("--cluster", help="estimate every folder on this file (default: each folder's own)")
    args = ap.parse_args()
    splits = {}
    for folder in args.runs:
        manifest = load_manifest(folder)
        cluster = suite_cluster(Path(folder), manifest, args.cluster)
        splits[folder] = []
        for rec in manifest.cases:
            path = Path(folder) / f"{rec.name}.results.json"
            if rec.skipped or not path.exists():
                continue
            results = load_results(path)
            v = validate(results, run_cluster(results, cluster))
            splits[folder].append((rec.processes, case_split(results, v, rec.name)))
    print(table(splits))
    print("\n".join([""] + skew_lines(args.runs)))


if __name__ == "__main__":
    main()
