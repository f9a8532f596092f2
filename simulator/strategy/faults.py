"""Per-rank speed, stragglers and failures: what makes real steps slower than the ideal one.

- :class:`StragglerModel`: a fixed speed factor per rank (a slow GPU, thermal throttling) and
  seeded random transient slowdowns. A factor multiplies compute time (1.0 nominal, 1.25 = 25%
  slower). The draw for (rank, step) depends only on (seed, rank, step), so runs are reproducible
  and independent of the order the engine asks in.
- :class:`FailureModel`: GPU failures as a Poisson process with a per-GPU mean time between
  failures; a job of N GPUs fails at rate N/MTBF. Work since the last checkpoint is lost and a
  restart costs ``restart_cost_s``. Young (CACM 1974) gives the checkpoint interval that minimises
  the expected overhead, ``√(2·δ·M)`` for checkpoint cost δ and job MTBF M.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from simulator.errors import SpecError


def _num(field: str, value, lo: float = 0.0, strict: bool = False) -> None:
    bad = not isinstance(value, (int, float)) or isinstance(value, bool) or value < lo or (strict and value == lo)
    if bad:
        raise SpecError(field, f"must be a number {'>' if strict else '>='} {lo:g}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class StragglerModel:
    """Fixed per-rank speed factors plus seeded random slowdowns."""

    speed_factors: tuple[float, ...] = ()
    """Compute-time multiplier per rank (len = world size); empty: every rank 1.0."""
    slowdown_prob: float = 0.0
    """Probability that a given rank is slowed in a given step (independent draws)."""
    slowdown_factor: float = 1.0
    """Compute-time multiplier of a slowed step (e.g. 1.5)."""
    seed: int = 0

    def __post_init__(self) -> None:
        for i, f in enumerate(self.speed_factors):
            _num(f"speed_factors[{i}]", f, 0.0, strict=True)
        _num("slowdown_prob", self.slowdown_prob)
        if self.slowdown_prob > 1:
            raise SpecError("slowdown_prob", f"is a probability, must be in [0, 1], got {self.slowdown_prob!r}")
        _num("slowdown_factor", self.slowdown_factor, 1.0)

    def factor(self, rank: int, step: int) -> float:
        """Compute-time multiplier of ``rank`` in ``step``: its speed factor, times the slowdown if drawn."""
        base = self.speed_factors[rank] if self.speed_factors else 1.0
        if self.slowdown_prob == 0:
            return base
        draw = random.Random(f"{self.seed}:{rank}:{step}").random()
        return base * (self.slowdown_factor if draw < self.slowdown_prob else 1.0)


@dataclass(frozen=True, kw_only=True)
class FailureModel:
    """GPU failures, checkpoints and restarts for multi-step horizons."""

    mtbf_gpu_hours: float
    """Mean time between failures of one GPU (with its share of host and network), hours."""
    checkpoint_interval_steps: int
    """Steps between checkpoints."""
    checkpoint_cost_s: float
    """Seconds training stalls to write one checkpoint."""
    restart_cost_s: float
    """Seconds from a failure to training again (detect, reschedule, load the checkpoint)."""

    def __post_init__(self) -> None:
        _num("mtbf_gpu_hours", self.mtbf_gpu_hours, 0.0, strict=True)
        if not isinstance(self.checkpoint_interval_steps, int) or self.checkpoint_interval_steps < 1:
            raise SpecError("checkpoint_interval_steps", f"must be a positive integer, got "
                            f"{self.checkpoint_interval_steps!r}")
        _num("checkpoint_cost_s", self.checkpoint_cost_s)
        _num("restart_cost_s", self.restart_cost_s)

    def job_mtbf_s(self, gpus: int) -> float:
        """Mean seconds between failures of a job on ``gpus`` GPUs: ``MTBF_gpu · 3600 / gpus``."""
        return self.mtbf_gpu_hours * 3600.0 / gpus

    def young_interval_s(self, gpus: int) -> float:
        """Young's (1974) optimal checkpoint interval, ``√(2 · checkpoint_cost · job MTBF)`` seconds."""
        return math.sqrt(2.0 * self.checkpoint_cost_s * self.job_mtbf_s(gpus))
