"""What the rank-step probe measured (:func:`executor.step_bench.time_rank_steps`), per rank, and the host terms
derived from it; the formulas are in :mod:`executor.step_bench`'s docstring. Kept apart from the probe's runners so
each module has one job."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from executor.compute_bench import Timing


@dataclass(frozen=True, kw_only=True)
class RankStepTiming:
    """What :func:`time_rank_steps` measured, per rank (median, p10, p90 over the timed steps)."""

    processes: int
    micro_batches: int
    forward: tuple[Timing, ...]
    """Each rank's forward with the loss, per micro-batch (the step's sum / micro_batches)."""
    backward: tuple[Timing, ...]
    """Each rank's backward, per micro-batch."""
    outside: tuple[Timing, ...]
    """Each rank's seconds per step outside the forward, backward and optimizer."""
    optimizer: tuple[Timing, ...] = ()
    """Each rank's AdamW step."""
    first_cold: tuple[Timing, ...] = ()
    """Each rank's first micro-batch forward less the mean of its later ones, per step (0 with one micro-batch)."""
    last_backward: tuple[Timing, ...] = ()
    """Each rank's backward of the step's last micro-batch (plain model)."""
    ddp_forward: tuple[Timing, ...] = ()
    """Under DDP (``ddp``): each rank's forward per micro-batch; empty where not run."""
    ddp_last_backward: tuple[Timing, ...] = ()
    """Under DDP: each rank's synchronising backward (the last micro-batch's)."""
    step_independent_sd_fraction: float = 0.0
    """How far the slower of the ranks' steps (plain model, forward + backward + optimizer + outside; each step starts
    at a barrier) sits above a rank's median, as the spread of a normal part that would put it there, a fraction of
    the step: :func:`executor.step_bench.step_jitter_fraction` [src: own-rank-jitter-probe]."""
    fsdp2_optimizer: tuple[Timing, ...] = ()
    """Under FSDP2 ZeRO-3 on the probe's own gloo group (``fsdp2``): each rank's AdamW step over its DTensor shards,
    after the step's backward; empty where not run."""
    fsdp2_outside: tuple[Timing, ...] = ()
    """Under FSDP2: each rank's seconds per step outside the forward, backward and optimizer (the switch calls in)."""
    fsdp2_switch: tuple[Timing, ...] = ()
    """Under FSDP2: each rank's seconds per step in ``set_requires_gradient_sync`` (one call per micro-batch)."""
    fsdp2_zero_grad: tuple[Timing, ...] = ()
    """Under FSDP2: each rank's ``zero_grad(set_to_none=False)`` over the shards, per step."""
    zero_grad: tuple[Timing, ...] = ()
    """The plain model's ``zero_grad(set_to_none=False)`` per step (kept where FSDP2 was run)."""
    optimizer_tensors: int = 0
    """Parameter tensors each AdamW step steps (the plain model's; FSDP2 shards every one of them); 0: not counted."""

    @property
    def forward_s(self) -> float:
        """Mean over ranks of the median forward per micro-batch."""
        return statistics.fmean(t.median_s for t in self.forward)

    @property
    def warm_forward_s(self) -> float:
        """:attr:`forward_s` without the first micro-batch's excess: a later micro-batch's forward."""
        return self.forward_s - self.first_cold_s / self.micro_batches

    @property
    def backward_s(self) -> float:
        return statistics.fmean(t.median_s for t in self.backward)

    @property
    def outside_s(self) -> float:
        return statistics.fmean(t.median_s for t in self.outside)

    @property
    def first_cold_s(self) -> float:
        """Mean over ranks of the median first-micro-batch excess; 0 where not measured."""
        return statistics.fmean(t.median_s for t in self.first_cold) if self.first_cold else 0.0

    @property
    def ddp_forward_call_us(self) -> float | None:
        """µs DDP adds per forward call in the step (module docstring), at least 0; None where DDP was not run."""
        if not self.ddp_forward:
            return None
        return max(0.0, statistics.fmean(t.median_s for t in self.ddp_forward) - self.forward_s) * 1e6

    @property
    def ddp_sync_extra_s(self) -> float | None:
        """Seconds DDP adds to the synchronising backward in the step (module docstring; the bucket passes
        included), at least 0; None where DDP was not run."""
        if not self.ddp_last_backward:
            return None
        ddp = statistics.fmean(t.median_s for t in self.ddp_last_backward)
        return max(0.0, ddp - statistics.fmean(t.median_s for t in self.last_backward))

    @property
    def dtensor_call_us(self) -> float | None:
        """µs an AdamW operator call on FSDP2's DTensor shards costs beyond the plain model's, in the step (module
        docstring), at least 0; None where FSDP2 was not run."""
        if not self.fsdp2_optimizer or not self.optimizer or self.optimizer_tensors <= 0:
            return None
        from simulator.host_overhead import ADAMW_PER_TENSOR_CALLS

        fsdp2 = statistics.fmean(t.median_s for t in self.fsdp2_optimizer)
        plain = statistics.fmean(t.median_s for t in self.optimizer)
        return max(0.0, fsdp2 - plain) / (ADAMW_PER_TENSOR_CALLS * self.optimizer_tensors) * 1e6

    @property
    def fsdp2_sync_switch_us(self) -> float | None:
        """µs per ``set_requires_gradient_sync`` call in the FSDP2 steps (mean over ranks of the median per step,
        / micro_batches); None where FSDP2 was not run [src: own-fsdp2-loop-probe]."""
        if not self.fsdp2_switch:
            return None
        return statistics.fmean(t.median_s for t in self.fsdp2_switch) / self.micro_batches * 1e6

    @property
    def fsdp2_zero_grad_us(self) -> float | None:
        """µs per step FSDP2's ``zero_grad`` over the shards costs beyond the plain model's (module docstring), at
        least 0; None where FSDP2 was not run [src: own-fsdp2-loop-probe]."""
        if not self.fsdp2_zero_grad or not self.zero_grad:
            return None
        fsdp2 = statistics.fmean(t.median_s for t in self.fsdp2_zero_grad)
        return max(0.0, fsdp2 - statistics.fmean(t.median_s for t in self.zero_grad)) * 1e6

    @property
    def optimizer_timing(self) -> Timing:
        """The AdamW step, each statistic the mean over ranks."""
        return Timing(median_s=statistics.fmean(t.median_s for t in self.optimizer),
                      p10_s=statistics.fmean(t.p10_s for t in self.optimizer),
                      p90_s=statistics.fmean(t.p90_s for t in self.optimizer))
