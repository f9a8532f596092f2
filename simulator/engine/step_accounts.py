"""What the step engine reports once a run has played: the slowest rank's breakdown and per-rank means
(:func:`accounts`), an asynchronous parameter server's staleness (:func:`staleness_summary`) and the folded
calls' counts (:func:`call_folds`); split from :mod:`simulator.engine.step`, which calls them."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from simulator.engine.callfold import CallFolder
from simulator.results import Category, slowest_index


def call_folds(folder: CallFolder | None) -> dict:
    return {"call_folds": folder.folds if folder else 0, "call_unfolds": folder.unfolds if folder else 0,
            "call_refolds": folder.refolds if folder else 0}


def accounts(ctx, tails: dict, step_time: float, steps_together: bool) -> tuple[dict[Category, float],
                                                                                      pd.DataFrame, dict]:
    """Breakdown of the slowest rank (:func:`~simulator.results.slowest_index`), per-rank means over
    complete steps, and the slowest rank's ids. A step is complete once its rank finished it (it has
    a tail): an asynchronous run stops with other workers mid-step, and those steps are left out.

    Ranks that step together (synchronous): each step's slowest rank, its categories averaged over the
    steps. Asynchronous workers' step k happen at different times, so there the slowest rank is the
    slowest of the per-rank means, and the breakdown is its mean step scaled to ``step_time``."""
    cats = list(Category)
    rank_of = {(key, r): ctx.layout.rank_of(dp=key.dp, pp=r, tp=0) for (_, key, r) in ctx.rec.accounts}
    complete = {kr: [cat_s.get(c, 0.0) for c in cats] for kr, cat_s in ctx.rec.accounts.items() if kr in tails}
    by_rank: dict[tuple, list] = defaultdict(list)
    by_step: dict[int, list] = defaultdict(list)
    for (k, key, r), row in complete.items():
        by_rank[(key, r)].append(row)
        by_step[k].append((rank_of[(key, r)], (key, r), row))
    means = sorted((rank_of[kr], kr, np.mean(rows, axis=0)) for kr, rows in by_rank.items())
    if steps_together:
        chosen = []
        for k in sorted(by_step):
            step_rows = sorted(by_step[k], key=lambda x: x[0])
            chosen.append(step_rows[int(slowest_index(np.array([row for _, _, row in step_rows])))])
        values = np.mean([row for _, _, row in chosen], axis=0)
        counts = defaultdict(int)
        for rank, kr, _ in chosen:
            counts[(rank, kr)] += 1
        rank, (key, stage) = min(counts, key=lambda rk: (-counts[rk], rk[0]))
    else:
        rank, (key, stage), values = means[int(slowest_index(np.array([row for _, _, row in means])))]
    breakdown = {c: float(values[i]) for i, c in enumerate(cats)}
    total = sum(breakdown.values())
    if total > 0 and abs(total - step_time) > 1e-12 * step_time:  # async: that rank's shares of the step time
        breakdown = {c: v * step_time / total for c, v in breakdown.items()}
    records = [{"rank": rank_, "stage": r, "replica": str(key_), **{c.value: float(v[i]) for i, c in enumerate(cats)}}
               for rank_, (key_, r), v in means]
    return breakdown, pd.DataFrame(records), {"slowest_rank": rank, "slowest_stage": stage}


def staleness_summary(staleness: dict[int, list[int]]) -> dict:
    values = [s for v in staleness.values() for s in v]
    hist: dict[str, int] = {}
    for s in sorted(values):
        hist[str(s)] = hist.get(str(s), 0) + 1
    return {"per_worker": {str(w): v for w, v in staleness.items()}, "histogram": hist,
            "mean": sum(values) / len(values) if values else 0.0, "max": max(values, default=0)}
