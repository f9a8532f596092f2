"""Staleness of a parameter-server run as the server ranks measured it, and its summary.

One value per push in step order, per worker: how many steps the pushing worker trailed the furthest
other worker (the DES's measure) and how many server updates the gradient's parameters missed.
:class:`Staleness` is the ``staleness`` section of the results file (:mod:`simulator.run_results`);
:func:`histogram` gives the shape the DES reports its own staleness in, so the two compare directly
(:mod:`simulator.validate_staleness`).
"""

from __future__ import annotations

from dataclasses import dataclass


def histogram(values) -> dict:
    """``{"histogram": {value: count}, "mean", "max"}`` of integer samples (the shape of the DES's
    ``extras["staleness"]``, ``simulator.engine.step_accounts.staleness_summary``)."""
    values = sorted(int(v) for v in values)
    hist: dict[str, int] = {}
    for v in values:
        hist[str(v)] = hist.get(str(v), 0) + 1
    return {"histogram": hist, "mean": sum(values) / len(values) if values else 0.0, "max": max(values, default=0)}


@dataclass(frozen=True, kw_only=True)
class Staleness:
    """Per-worker staleness of a parameter-server run, one value per push in step order (warm-up included),
    measured by the server ranks (``executor.strategies.param_server``).

    ``step_lag``: steps the pushing worker trailed the furthest other worker when its push arrived, the
    DES's definition (``simulator.engine.step._async_run``). ``updates``: server updates between the
    pull the gradient was computed on and its own update. With several server shards each push has one
    value per shard: the largest is kept (the stalest part of the parameters the gradient met)."""

    step_lag: dict[str, tuple[int, ...]]
    updates: dict[str, tuple[int, ...]]

    @classmethod
    def from_pushes(cls, per_server) -> "Staleness":
        """From each server's ``[(worker, step, updates, step lag), ...]``: per worker and step, the max
        over the servers."""
        worst: dict[tuple[int, int], tuple[int, int]] = {}
        for pushes in per_server:
            for worker, step, updates, lag in pushes:
                old = worst.get((worker, step), (0, 0))
                worst[(worker, step)] = (max(old[0], updates), max(old[1], lag))
        workers = sorted({w for w, _ in worst})
        keys = {w: sorted(s for v, s in worst if v == w) for w in workers}
        return cls(step_lag={str(w): tuple(worst[(w, s)][1] for s in keys[w]) for w in workers},
                   updates={str(w): tuple(worst[(w, s)][0] for s in keys[w]) for w in workers})

    def summary(self) -> dict:
        """Histogram, mean and max of each measure over every worker's pushes, and per worker."""
        out = {}
        for name in ("step_lag", "updates"):
            per = getattr(self, name)
            out[name] = histogram(v for values in per.values() for v in values) | {
                "per_worker": {w: histogram(values) for w, values in per.items()}}
        return out
