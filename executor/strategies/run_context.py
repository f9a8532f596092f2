"""The context one rank's step runner is built with (:class:`RunContext`): who this rank is, the plan as run,
its layout and device mesh, and the precision rules torch needs from the plan (autocast or bf16 parameters,
FSDP2's ``MixedPrecisionPolicy``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from executor.strategies.base import Backend, Precision
from simulator.plan_file import Plan
from simulator.strategy import ParallelLayout
from simulator.workload import TransformerSpec


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """Everything a family needs on one rank; built by the runner after ``init_process_group``."""

    rank: int
    world: int
    local_rank: int
    backend: Backend
    device: Any
    """``torch.device``: ``cpu`` under gloo, ``cuda:local_rank`` under NCCL."""
    seed: int
    """Seeds the weights (``build_gpt``) and the data (``executor.data``)."""
    plan: Plan
    """The plan as run (scaled: :func:`simulator.plan_scale.scale_plan`)."""
    spec: TransformerSpec
    """The model actually run (``plan.model``)."""
    layout: ParallelLayout
    """``plan.layout()``: dp, tp, pp, micro-batches, rank groups, schedule."""
    mesh: Any
    """``DeviceMesh`` over the world, dims named by the placement, outermost first (e.g.
    ``("dp", "pp", "tp")`` for placement tp-pp-dp); ``mesh["dp"]`` is this rank's dp sub-mesh."""
    precision: Precision

    @property
    def device_type(self) -> str:
        return self.device.type

    @property
    def bf16_params(self) -> bool:
        """Whether a bf16 run holds the forward's parameters in bf16 (the plan's mixed precision
        ``param-dtype``: FSDP2's ``MixedPrecisionPolicy``, :meth:`mp_policy`) instead of autocasting fp32 ones."""
        from simulator.strategy.kinds import MixedPrecision

        return (self.precision is not Precision.FP32
                and self.layout.strategy.resolved_mixed_precision is MixedPrecision.PARAM_DTYPE)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward's precision context: ``torch.autocast`` to bf16 under the plan's mixed precision
        ``autocast``; a no-op for fp32 and for bf16 parameters (:attr:`bf16_params`)."""
        if self.precision is Precision.FP32 or self.bf16_params:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def mp_policy(self):
        """FSDP2's ``MixedPrecisionPolicy``: bf16 parameters gathered for compute under :attr:`bf16_params`,
        their gradients reduced in the plan's ``grad_reduce_dtype`` (fp32 by default: torchtitan's
        ``mixed_precision_param`` / ``mixed_precision_reduce``); the default policy (the parameters' own
        dtype) otherwise."""
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy

        from simulator.strategy.kinds import GradReduceDtype
        from simulator.workload.kinds import DtypePolicy

        if self.bf16_params:
            reduce = self.layout.strategy.resolved_grad_reduce_dtype(DtypePolicy.BF16_MIXED)
            return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32
                                        if reduce is GradReduceDtype.FP32 else torch.bfloat16)
        return MixedPrecisionPolicy()

    def synchronize(self) -> None:
        """Wait for queued device work (CUDA), so a timer read after it is honest; no-op on CPU."""
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
