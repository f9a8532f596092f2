"""How much of a tp × dp run's dp phase is the gradient all-reduce, and how much the wait for the other tp group?

In a run with tp > 1 and dp > 1 (the suite's tp-dp: tp 2, dp 2) each dp all-reduce pairs ranks of different tp groups,
so the group that finishes its forward, backward and tp work first waits inside the all-reduce for the other. The
results' dp phase (the median of the per-step maximum over ranks) then holds the call plus that wait. Per results
file it prints, ms:

- ``dp max``: the summary's figure (median over steps of the per-step maximum over ranks);
- ``dp own``: the median of the per-step minimum over ranks: the last rank to arrive waits for no one, so this is the
  call itself;
- ``|T_A - T_B|``: the mean over steps of the difference between the tp groups' work before the sync (each group's
  slower rank's forward + backward + tp), the expected wait of the early group;
- ``half %``: half of it as a share of the measured step (what the wait adds to a step that ends when the later group
  is done, against the mean of the two groups).

Usage: ``PYTHONPATH=. python benchmarks/dp_group_wait.py RUNS/tp-dp.results.json ...``. Results: docs/validation.md,
``### val31``.
"""

from __future__ import annotations

import argparse
import json
import statistics

PRE_SYNC = ("forward", "backward", "tp")
"""The phases a rank runs before the dp all-reduce (no pipeline: pp = 1)."""


def groups(plan: dict) -> list[list[int]]:
    """The tp groups of a pp = 1 layout by the plan's placement (``simulator.strategy.kinds.PlacementOrder``, innermost
    first): tp inside dp (``tp-pp-dp``, the default, ``tp-dp-pp``, ``pp-tp-dp``) puts rank r in group r // tp, dp
    inside tp in group r % dp."""
    s = plan["strategy"]
    tp, dp = s["tp"], s["dp"]
    order = s.get("placement", "tp-pp-dp").split("-")
    if order.index("tp") < order.index("dp"):
        return [list(range(g * tp, (g + 1) * tp)) for g in range(dp)]
    return [list(range(g, tp * dp, dp)) for g in range(dp)]


def dp_wait(results: dict) -> dict[str, float]:
    """The module docstring's figures (seconds; ``half`` a fraction) of one results file."""
    ranks, warmup = results["ranks"], results["run"]["warmup"]
    steps = len(ranks[0]["step_time_s"]) - warmup

    def phase(k: int, name: str, i: int) -> float:
        return ranks[k]["phases_s"].get(name, [0.0] * (warmup + steps))[warmup + i]

    dp = [[phase(k, "dp", i) for k in range(len(ranks))] for i in range(steps)]
    work = [[max(sum(phase(k, p, i) for p in PRE_SYNC) for k in g) for g in groups(results["plan"])]
            for i in range(steps)]
    skew = statistics.fmean(max(w) - min(w) for w in work)
    step = results["summary"]["step_time_s"]["median_s"]
    return {"dp_max": statistics.median(max(d) for d in dp), "dp_own": statistics.median(min(d) for d in dp),
            "skew": skew, "half": skew / 2 / step}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    args = parser.parse_args(argv)
    print(f"{'results':60s} {'dp max':>8s} {'dp own':>8s} {'|T_A-T_B|':>10s} {'half %':>7s}")
    for path in args.results:
        with open(path) as f:
            r = dp_wait(json.load(f))
        print(f"{path[-60:]:60s} {r['dp_max'] * 1e3:8.2f} {r['dp_own'] * 1e3:8.2f} {r['skew'] * 1e3:10.2f} "
              f"{r['half'] * 100:7.1f}")


if __name__ == "__main__":
    main()
