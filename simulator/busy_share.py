"""How many of a measured run's processes were busy at once, against the time-sharing the estimate charges.

The estimate time-shares a node's cores by ``max(1, processes / cores)`` (:func:`simulator.host_overhead.core_share`)
in every compute stream and optimizer step. A rank that waits in a gloo collective or a pipeline receive sleeps and
leaves its core to the others, so the processes that compete for the cores are the busy ones only. From a results
file (val29, docs/validation.md):

    u         = median over ranks and measured steps of  Σ busy phases / step time     (busy: forward, backward,
                recompute, optimizer; the rest of the step is tp / dp / pp waits, the bubble and the loop)
    busy/core = processes · u / cores                                                    (processes per core)

e.g. 4 ranks, every step 100 ms with 30 + 20 ms forward + backward and 5 ms optimizer on 2 cores: u = 0.55,
busy/core = 4 · 0.55 / 2 = 1.10 against the modelled 4 / 2 = 2.0. It reads the measured run only: a figure to
compare the modelled share with, not an input of any estimate (a planner has no run to read).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from simulator.results import Category

BUSY_PHASES = (Category.FORWARD, Category.BACKWARD, Category.RECOMPUTE, Category.OPTIMIZER)
"""The executor's phases in which a rank computes (its other phases wait in a collective or a receive)."""


@dataclass(frozen=True)
class BusyShare:
    """A run's measured busy fraction and busy processes per core, beside the modelled share."""

    busy_fraction: float
    """u: the median rank-step's busy phases over its step time (dimensionless)."""
    processes: int
    cores: int

    @property
    def busy_per_core(self) -> float:
        """processes · u / cores: the busy processes per core (module docstring)."""
        return self.processes * self.busy_fraction / self.cores

    @property
    def modelled_share(self) -> float:
        """max(1, processes / cores): what the estimate charges (:func:`simulator.host_overhead.core_share`)."""
        return max(1.0, self.processes / self.cores)

    def note(self) -> str:
        """One line for the validation's notes."""
        return (f"busy phases (forward, backward, recompute, optimizer) took {self.busy_fraction:.0%} of a rank's "
                f"step: {self.busy_per_core:.2f} busy processes per core, where the estimate time-shares by "
                f"{self.processes} / {self.cores} = {self.modelled_share:.2f} (simulator.busy_share)")


def busy_share(results) -> BusyShare | None:
    """The :class:`BusyShare` of ``results`` (a :class:`simulator.run_results.Results`); None when the run states no
    cores, has no busy phases or no measured step, or runs no more processes than cores (nothing is time-shared)."""
    cores, processes = results.environment.get("cores"), len(results.ranks)
    if not isinstance(cores, int) or cores < 1 or processes <= cores:
        return None
    warmup, n = results.run.warmup, results.completed_steps
    names = [c.value for c in BUSY_PHASES]
    fractions = [sum(r.phases_s[p][k] for p in names if p in r.phases_s) / r.step_time_s[k]
                 for r in results.ranks if any(p in r.phases_s for p in names)
                 for k in range(warmup, n) if r.step_time_s[k] > 0]
    if not fractions:
        return None
    return BusyShare(busy_fraction=statistics.median(fractions), processes=processes, cores=cores)
