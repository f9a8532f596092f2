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
from simulator.strategy.fields import (Flag, FlagKind, Role, declare, float_parser, int_parser, pos_int,
                                       validate)


def _num(field: str, value, lo: float = 0.0, strict: bool = False) -> None:
    bad = (not isinstance(value, (int, float)) or isinstance(value, bool) or not lo <= value < math.inf
           or (strict and value == lo))
    if bad:
        raise SpecError(field, f"must be a number {'>' if strict else '>='} {lo:g}, got {value!r}")


def _factors(key: str, value) -> None:
    if not isinstance(value, tuple):
        raise SpecError(key, f"must be a tuple of numbers, got {value!r}")
    for i, f in enumerate(value):
        _num(f"{key}[{i}]", f, 0.0, strict=True)


def _probability(key: str, value) -> None:
    _num(key, value)
    if value > 1:
        raise SpecError(key, f"is a probability, must be in [0, 1], got {value!r}")


def _seed(key: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(key, f"must be an integer, got {value!r}")


_STRAGGLER = Flag("--straggler", "rank=R,factor=F: rank R computes F× slower; prob=P,factor=F: each rank is "
                  "slowed F× in a step with probability P (repeatable)", kind=FlagKind.CUSTOM, metavar="SPEC")
_SCENARIO = Role.SCENARIO


@dataclass(frozen=True, kw_only=True)
class StragglerModel:
    """Fixed per-rank speed factors plus seeded random slowdowns."""

    speed_factors: tuple[float, ...] = declare(
        (), key="speed_factors", role=_SCENARIO, flag=_STRAGGLER, check=_factors,
        parse=lambda v: tuple(v) if isinstance(v, list) else v,
        doc="Compute-time multiplier per rank (len = world size); empty: every rank 1.0")
    slowdown_prob: float = declare(
        0.0, key="slowdown_prob", role=_SCENARIO, flag=_STRAGGLER, parse=float_parser("slowdown_prob"),
        check=_probability, doc="Probability that a given rank is slowed in a given step (independent draws)")
    slowdown_factor: float = declare(
        1.0, key="slowdown_factor", role=_SCENARIO, flag=_STRAGGLER, parse=float_parser("slowdown_factor"),
        check=lambda k, v: _num(k, v, 1.0), doc="Compute-time multiplier of a slowed step (e.g. 1.5)")
    seed: int = declare(
        0, key="seed", role=_SCENARIO, parse=int_parser("seed"), check=_seed,
        doc="Seed of the random slowdowns", flag=Flag("--seed", "seed of random slowdowns and the DES", metavar="N"))

    def __post_init__(self) -> None:
        validate(self)

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

    mtbf_gpu_hours: float = declare(
        key="mtbf_gpu_hours", role=_SCENARIO, parse=float_parser("mtbf_gpu_hours"),
        check=lambda k, v: _num(k, v, 0.0, strict=True),
        doc="Mean time between failures of one GPU (with its share of host and network), hours",
        flag=Flag("--mtbf-hours", "mean time between failures per GPU, hours", metavar="H"))
    checkpoint_interval_steps: int = declare(
        key="checkpoint_interval_steps", role=_SCENARIO, parse=int_parser("checkpoint_interval_steps"),
        check=pos_int, doc="Steps between checkpoints",
        flag=Flag("--checkpoint-every", "steps between checkpoints", metavar="STEPS"))
    checkpoint_cost_s: float = declare(
        key="checkpoint_cost_s", role=_SCENARIO, parse=float_parser("checkpoint_cost_s"), check=_num,
        doc="Seconds training stalls to write one checkpoint",
        flag=Flag("--checkpoint-cost", "seconds to write a checkpoint", metavar="SECONDS"))
    restart_cost_s: float = declare(
        key="restart_cost_s", role=_SCENARIO, parse=float_parser("restart_cost_s"), check=_num,
        doc="Seconds from a failure to training again (detect, reschedule, load the checkpoint)",
        flag=Flag("--restart-cost", "seconds from a failure to training again", metavar="SECONDS"))

    def __post_init__(self) -> None:
        validate(self)

    def job_mtbf_s(self, gpus: int) -> float:
        """Mean seconds between failures of a job on ``gpus`` GPUs: ``MTBF_gpu · 3600 / gpus``."""
        return self.mtbf_gpu_hours * 3600.0 / gpus

    def young_interval_s(self, gpus: int) -> float:
        """Young's (1974) optimal checkpoint interval, ``√(2 · checkpoint_cost · job MTBF)`` seconds."""
        return math.sqrt(2.0 * self.checkpoint_cost_s * self.job_mtbf_s(gpus))
