"""What an engine returns for one training step: time, throughput, utilisation, and where the time went.

Both engines fill the same :class:`StepResult`; the breakdown of a rank adds up to the step time,
so a user can read "compute 61 %, exposed DP 9 %, bubble 22 % ..." for the slowest rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.enum_kind import Kind


class Engine(Kind):
    """Which engine produced a result."""

    ANALYTICAL = "analytical"
    """Closed form: compute + exposed communication + pipeline bubble, no contention."""
    DES = "des"
    """SimPy discrete-event simulation: streams, dependencies, flows sharing links."""


class Category(Kind):
    """Where a rank's step time goes. Busy categories, exposed communication, and waiting."""

    FORWARD = "forward"
    """Forward compute."""
    BACKWARD = "backward"
    """Backward compute."""
    RECOMPUTE = "recompute"
    """Forward work repeated by activation recomputation."""
    OPTIMIZER = "optimizer"
    """The optimizer step (GPU, or the CPU under ZeRO-Offload when it is on the critical path)."""
    TP = "tp"
    """Exposed tensor-parallel communication (compute waiting on it)."""
    EP = "ep"
    """Exposed expert-parallel all-to-all (MoE token dispatch and combine; compute waiting on it)."""
    PP = "pp"
    """Exposed pipeline send/recv time (the transfer itself, not the bubble)."""
    DP = "dp"
    """Exposed data-parallel gradient synchronisation (what backward did not hide)."""
    ZERO = "zero"
    """Exposed ZeRO communication: parameter all-gathers and, under ZeRO-2/3, the gradient
    reduce-scatters of every micro-batch."""
    PS = "ps"
    """Exposed parameter-server push/pull."""
    OFFLOAD = "offload"
    """Exposed host<->device offload copies."""
    DATA = "data"
    """Input-pipeline stall: compute waiting for the next batch from storage."""
    BUBBLE = "bubble"
    """Pipeline bubble: idle waiting for another stage's forward or backward."""
    STRAGGLER = "straggler"
    """Idle waiting for a slower rank at a synchronisation point."""

    @property
    def is_comm(self) -> bool:
        return self in (Category.TP, Category.EP, Category.PP, Category.DP, Category.ZERO, Category.PS,
                        Category.OFFLOAD)


WAITING = (Category.BUBBLE, Category.STRAGGLER)
"""Categories in which a rank waits for others; every other category is its own (busy) time."""
SLOWEST_TIE_REL = 1e-9
"""Busy times within this relative distance of the most count as equal (float noise between engines)."""


def slowest_index(breakdown: np.ndarray) -> np.ndarray:
    """The slowest rank among the rows of ``breakdown`` (shape ``(..., ranks, len(Category))``,
    seconds in :class:`Category` order, rows in rank order): the rank with the most *busy* seconds,
    its row's sum without :data:`WAITING` (its compute, exposed communication, optimizer and data
    stall, not the bubble or the wait for stragglers). Ties (within :data:`SLOWEST_TIE_REL`): the
    lowest rank. The one definition both engines use: the analytical engine over its stages, the DES
    over each step's simulated ranks (or over per-rank means when the ranks do not step together)."""
    busy_columns = [k for k, c in enumerate(Category) if c not in WAITING]
    busy = np.asarray(breakdown, dtype=float)[..., busy_columns].sum(axis=-1)
    top = busy.max(axis=-1, keepdims=True)
    return np.argmax(busy >= top * (1 - SLOWEST_TIE_REL), axis=-1)


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """One step's estimate."""

    engine: Engine
    step_time_s: float
    tokens_per_step: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    world_size: int
    peak_flops_per_gpu: float
    breakdown: dict[Category, float]
    """Seconds per category for the slowest rank (:func:`slowest_index`); sums to ``step_time_s``."""
    per_rank: Any = None
    """pandas DataFrame: one row per simulated (distinct) rank — rank, stage, then seconds per category."""
    memory: Any = None
    """:class:`simulator.memory.MemoryReport`, or None when the workload has no memory model."""
    timeline: Any = None
    """pandas DataFrame of timed tasks (DES only): rank, stream, name, category, start_s, end_s, microbatch, stage."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Engine-specific outputs: ``staleness`` (async PS), ``goodput`` and ``time_to_train_s`` (failures)."""

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: model FLOPs / (step time × GPUs × peak) (Chowdhery et al. 2022, PaLM App. B)."""
        return self.model_flops_per_step / (self.step_time_s * self.world_size * self.peak_flops_per_gpu)

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: executed FLOPs (recompute included) / (step time × GPUs × peak)."""
        return self.hardware_flops_per_step / (self.step_time_s * self.world_size * self.peak_flops_per_gpu)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form: at least step_time_s, tokens_per_s, mfu, engine, breakdown, memory."""
        out = {"engine": self.engine.value, "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
               "mfu": self.mfu, "hfu": self.hfu, "tokens_per_step": self.tokens_per_step,
               "world_size": self.world_size,
               "breakdown": {c.value: s for c, s in self.breakdown.items()},
               "memory": self.memory.to_dict() if self.memory is not None else None}
        out.update({k: v for k, v in self.extras.items() if _jsonable(v)})
        return out


def _jsonable(value: Any) -> bool:
    return isinstance(value, (int, float, str, bool, list, dict, type(None)))
