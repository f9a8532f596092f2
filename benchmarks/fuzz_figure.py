"""The figure and table of a long fuzz run (issue 15 §4) from the per-case logs the fuzz suites write
with ``TRAINPLAN_FUZZ_LOG`` (tests/fuzz_budget.py): one JSON line per case.

    python benchmarks/fuzz_figure.py LOG.jsonl [LOG.jsonl ...] --png docs/fuzz_long_run.png [--md]

Left: cases per command (CLI) or entry point (API, loaders) by outcome: exit 0 / 1 / 2 for the CLI,
returned / SpecError for the API; anything else (a traceback, a hang, a non-finite output, a second
stderr line) is a finding and drawn in red. Right: the distribution of CPU seconds per case, per suite
(empirical CDF, log scale). ``--md`` prints the per-command table for docs/quality.md.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

OK_OUTCOMES = {"ok", "SpecError"}
FLOOR_S = 1e-5
"""Cases cheaper than this (most API calls that refuse at once) are drawn at it: the log axis needs a floor."""


def load(paths: list[str]) -> list[dict]:
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            rows += [json.loads(line) for line in lines if line.strip()]
    return rows


def label(row: dict) -> str:
    """CLI: the command group; API and loaders: the entry point the test drives."""
    if row["suite"] == "cli":
        return f"cli: {row['command']}"
    name = row["test"].removeprefix("test_").split("[")[0]
    for long, short in (("_raises_only_spec_errors", ""), ("_are_spec_errors_or_sane", ""),
                        ("_with_one_field_of_any_value", ": one field, any value"), ("_of_random_", ": random "),
                        ("layouts_and_estimates", "build_layout + estimate"), ("collective_estimates", "collective estimate"),
                        ("_", " ")):
        name = name.replace(long, short)
    return f"{row['suite']}: {name}"


def outcome(row: dict) -> str:
    if row["outcome"] not in OK_OUTCOMES:
        return "finding"
    if row["suite"] == "cli":
        return f"exit {row['exit']}"
    return "returned" if row["outcome"] == "ok" else "SpecError"


COLOURS = {"exit 0": "#4c72b0", "exit 1": "#8172b3", "exit 2": "#55a868", "returned": "#4c72b0",
           "SpecError": "#55a868", "finding": "#c44e52"}


def figure(rows: list[dict]) -> Figure:
    counts: dict[str, Counter] = defaultdict(Counter)
    for row in rows:
        counts[label(row)][outcome(row)] += 1
    labels = sorted(counts)
    fig = Figure(figsize=(13, 6.5), layout="constrained")
    bars, times = fig.subplots(1, 2, width_ratios=[1.25, 1])
    left = np.zeros(len(labels))
    for kind in COLOURS:
        values = np.array([counts[name][kind] for name in labels], dtype=float)
        if values.any():
            bars.barh(labels, values, left=left, color=COLOURS[kind], label=kind)
            left += values
    for y, total in enumerate(left):
        bars.text(total, y, f" {int(total):,}", va="center", fontsize=8)
    bars.invert_yaxis()
    bars.set_xlabel("cases")
    bars.set_title("outcome per command / entry point")
    bars.legend(loc="lower right", fontsize=8)
    for suite in ("cli", "api", "loaders"):
        cpu = np.sort([max(r["cpu_s"], FLOOR_S) for r in rows if r["suite"] == suite])
        if len(cpu):
            times.step(cpu, np.arange(1, len(cpu) + 1) / len(cpu), where="post",
                       label=f"{suite} ({len(cpu):,} cases, median {np.median(cpu) * 1e3:.1f} ms, "
                             f"max {cpu[-1]:.2f} s)")
    times.set_xscale("log")
    times.set_xlabel(f"CPU seconds per case (log; under {FLOOR_S * 1e6:.0f} µs drawn at {FLOOR_S * 1e6:.0f} µs)")
    times.set_ylabel("fraction of cases at or below")
    times.set_title("time per case")
    times.grid(True, which="both", alpha=0.3)
    times.legend(loc="lower right", fontsize=8)
    return fig


def table(rows: list[dict]) -> str:
    counts: dict[str, Counter] = defaultdict(Counter)
    cpu: dict[str, list] = defaultdict(list)
    for row in rows:
        counts[label(row)][outcome(row)] += 1
        cpu[label(row)].append(row["cpu_s"])
    kinds = [k for k in COLOURS if any(c[k] for c in counts.values())]
    out = ["| command / entry point | cases | " + " | ".join(kinds) + " | median CPU ms | max CPU s |",
           "|---|---:|" + "---:|" * len(kinds) + "---:|---:|"]
    for name in sorted(counts):
        c = counts[name]
        out.append(f"| {name} | {sum(c.values()):,} | " + " | ".join(f"{c[k]:,}" for k in kinds)
                   + f" | {np.median(cpu[name]) * 1e3:.1f} | {max(cpu[name]):.2f} |")
    for suite in ("cli", "api", "loaders"):
        n = sum(1 for r in rows if r["suite"] == suite)
        if n:
            out.append(f"| **{suite} total** | **{n:,}** |" + " |" * len(kinds) + " | |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", help="per-case JSON-lines logs (TRAINPLAN_FUZZ_LOG)")
    parser.add_argument("--png", help="write the figure here")
    parser.add_argument("--md", action="store_true", help="print the per-command table (Markdown)")
    args = parser.parse_args(argv)
    rows = load(args.logs)
    if args.png:
        figure(rows).savefig(Path(args.png), dpi=110)
    if args.md:
        print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
