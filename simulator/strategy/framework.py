"""Which software implements the data-parallel partitioning, and how it splits the states.

The framework decides what is allocated besides the ZeRO paper's states (Adam ``step`` tensors,
gradient buckets, FSDP2's padding) and how a partitioned state is split over the dp ranks, hence
which rank is the most loaded. A strategy may name the framework, the partitioning, both or
neither; :func:`resolve_framework` is the one rule that completes them.
"""

from __future__ import annotations

from enum import Enum

from simulator.attention_efficiency import AttentionBackend
from simulator.errors import SpecError
from simulator.strategy.kinds import ZeroStage


HOPPER_CC = 9.0
MEGATRON_VOCAB_DIVISIBLE_BY = 128
"""Megatron-LM's ``--make-vocab-size-divisible-by`` default [src: megatron-vocab-pad]."""
"""CUDA compute capability of Hopper (H100/H200) [src: nvidia-cuda-gpus], from which Transformer Engine
prefers cuDNN attention [src: nemo-te-attention]."""


class Partitioning(Enum):
    """How a framework splits a partitioned state over the dp ranks (decides the most loaded rank)."""

    FLAT = "flat"
    """One flat buffer of all tensors split evenly, padded to a multiple of dp (DeepSpeed ZeRO,
    Megatron's distributed optimizer): every rank holds ceil(N/dp) elements."""
    WHOLE_TENSOR = "whole-tensor"
    """Whole tensors assigned greedily, largest first, each to the rank with the fewest elements so
    far (torch ``ZeroRedundancyOptimizer._partition_parameters``); ranks can be uneven."""
    DIM0_PADDED = "dim0-padded"
    """Every tensor split on dim 0 into ceil(dim0/dp) rows per rank, padded (FSDP2 ``fully_shard``,
    ``_fsdp_param.py``: ``torch.chunk`` then pad every shard to chunk 0's size)."""


class Framework(Enum):
    """The software that implements a ZeRO stage; decides what torch (or DeepSpeed) allocates
    besides the ZeRO paper's states: Adam ``step`` tensors, gradient buckets, FSDP2's padding."""

    TORCH_DDP = "torch"
    """torch ``DistributedDataParallel`` + ``torch.optim.Adam(W)`` (ZeRO 0), with
    ``ZeroRedundancyOptimizer`` for ZeRO 1 (whole-tensor partitioning). One ``step`` tensor per
    parameter tensor with Adam state; DDP's bucket copy of the gradients."""
    FSDP2 = "fsdp2"
    """torch ``fully_shard`` (dim-0 padded shards) + ``torch.optim.Adam(W)``: ZeRO 3 with
    ``reshard_after_forward=True``, ZeRO 2 with ``False`` (the unsharded parameters stay from forward
    to backward). Adam state is built from the unpadded local shard; no DDP buckets."""
    DEEPSPEED = "deepspeed"
    """DeepSpeed ZeRO (flat partitioning): the optimizer runs on flat fp32 partitions, so no
    per-tensor ``step`` tensors; gradients go through DeepSpeed's reduce buffers."""
    MEGATRON = "megatron"
    """Megatron-LM / Megatron-Core: its DistributedDataParallel (ZeRO 0) and distributed optimizer
    (ZeRO 1, flat). Gradients accumulate in a contiguous ``main_grad`` buffer, in fp32 for bf16
    models (``accumulate_allreduce_grads_in_fp32``, forced for bf16), and the buckets are views into
    it: bytes per parameter 18 / 6 + 12/d in bf16 (Megatron-LM's distributed-optimizer table)."""

    @property
    def partitioning(self) -> Partitioning:
        """How this framework splits partitioned states."""
        return {Framework.TORCH_DDP: Partitioning.WHOLE_TENSOR, Framework.FSDP2: Partitioning.DIM0_PADDED,
                Framework.DEEPSPEED: Partitioning.FLAT, Framework.MEGATRON: Partitioning.FLAT}[self]

    @property
    def zero_stages(self) -> tuple[ZeroStage, ...]:
        """The ZeRO stages the framework implements."""
        return {Framework.TORCH_DDP: (ZeroStage.ZERO0, ZeroStage.ZERO1),
                Framework.FSDP2: (ZeroStage.ZERO2, ZeroStage.ZERO3),
                Framework.DEEPSPEED: tuple(ZeroStage),
                Framework.MEGATRON: (ZeroStage.ZERO0, ZeroStage.ZERO1)}[self]

    def attention_backend(self, compute_capability: float | None) -> AttentionBackend:
        """The fused-attention kernel the framework runs on a GPU of ``compute_capability``
        (:mod:`simulator.attention_efficiency`). Megatron-LM/Megatron-Core call Transformer Engine's
        ``DotProductAttention``, which, when both are eligible, prefers cuDNN attention on Hopper and later
        (compute capability ≥ 9.0) and Dao's FlashAttention-2 on Ampere [src: nemo-te-attention]. torch DDP
        and FSDP2 models call PyTorch SDPA, whose default is its FlashAttention-2 backend: cuDNN attention was
        made opt-in after torch 2.5.0 and is preferred again only with a bundled cuDNN above 9.15
        [src: pytorch-sdpa-cudnn-optin] (the validation's torchtitan runs, late 2024, predate it). DeepSpeed
        models: the model code decides; FA2 assumed (``flash_attn`` or SDPA)."""
        if self is Framework.MEGATRON and compute_capability is not None and compute_capability >= HOPPER_CC:
            return AttentionBackend.CUDNN
        return AttentionBackend.FLASH_ATTENTION_2

    def vocab_multiple(self, tp: int) -> int:
        """The multiple the framework pads the vocabulary to, so that the embedding and logits split evenly
        and aligned over ``tp`` ranks: Megatron-LM pads to ``make_vocab_size_divisible_by · tp``, the flag's
        default 128 (``_vocab_size_with_padding``) [src: megatron-vocab-pad]; torch models, FSDP2 and
        DeepSpeed models use the vocabulary as the model defines it (1), padded or not by its author (GPT-2's
        50,257 is not; :mod:`simulator.gemm_alignment` says what that costs)."""
        return MEGATRON_VOCAB_DIVISIBLE_BY * tp if self is Framework.MEGATRON else 1

    @property
    def autocast_mixed_precision(self) -> bool:
        """Whether a 16-bit (mixed-precision) model is trained the torch AMP way: ``torch.autocast`` over
        fp32 parameters, so the parameters, their gradients and DDP's buckets stay fp32 (the weights are
        their own master copy) and each matmul reads a 16-bit cast of its weight [src: torch-autocast-cache].
        torch DDP has no other mixed-precision mechanism (the executor's ``RunContext.autocast``); FSDP2
        (torchtitan) casts in its all-gather (``MixedPrecisionPolicy``), DeepSpeed and Megatron keep 16-bit
        parameters next to an fp32 master. What it allocates: :mod:`simulator.memory.autocast`."""
        return self is Framework.TORCH_DDP

    @property
    def foreach_adam(self) -> bool:
        """Whether the optimizer is ``torch.optim.AdamW`` with its default implementation, which is
        ``foreach`` for CUDA tensors (``torch/optim/adam.py`` ``_default_to_fused_or_foreach``) and
        allocates a temporary the size of the moments (:func:`simulator.memory.autocast.optimizer_step_bytes`)
        [src: torch-adam-foreach]. torchtitan (FSDP2) asks for ``fused`` Adam; DeepSpeed and Megatron
        step with fused multi-tensor Adam kernels in place."""
        return self is Framework.TORCH_DDP

    @property
    def partitions_gradients_with_pipeline(self) -> bool:
        """Whether the framework runs ZeRO-2/3 (partitioned gradients) together with pipeline
        parallelism. DeepSpeed's pipeline engine refuses it (``deepspeed/runtime/pipe/engine.py``
        asserts ``zero_optimization_stage() < ZeroStageEnum.gradients``: "ZeRO-2 and ZeRO-3 are
        incompatible with pipeline parallelism") [src: deepspeed-pipe]; Megatron-LM's distributed
        optimizer (:attr:`MEGATRON`) and torch DDP stop at ZeRO-1.
        FSDP2 composes with ``torch.distributed.pipelining`` (torchtitan's FSDP + PP) [src: torchtitan]."""
        return self is Framework.FSDP2


def resolve_framework(zero: ZeroStage, partitioning: Partitioning | None = None,
                      framework: Framework | None = None) -> tuple[Partitioning, Framework]:
    """(partitioning, framework) from what was given.

    Neither: flat partitioning; torch DDP at ZeRO 0, DeepSpeed at ZeRO >= 1 (the defaults the
    memory model always had). Only a partitioning: the framework that splits that way (flat at
    ZeRO 0 is torch DDP, whose states are not partitioned). Only a framework: its partitioning.
    Both, or a framework with a ZeRO stage it does not implement: checked, a SpecError names the fix.
    """
    zero = ZeroStage(zero)
    if framework is None:
        if partitioning is Partitioning.DIM0_PADDED:
            framework = Framework.FSDP2
        elif partitioning is Partitioning.WHOLE_TENSOR or zero is ZeroStage.ZERO0:
            framework = Framework.TORCH_DDP
        else:
            framework = Framework.DEEPSPEED
        return partitioning or Partitioning.FLAT, framework
    if not isinstance(framework, Framework):
        raise SpecError("framework", f"must be a Framework, got {framework!r}; known: "
                        f"{', '.join(f.value for f in Framework)}")
    if zero not in framework.zero_stages:
        raise SpecError("framework", f"{framework.value} does not implement ZeRO-{int(zero)}; it does ZeRO "
                        f"{'/'.join(str(int(z)) for z in framework.zero_stages)}")
    if partitioning is not None and zero is not ZeroStage.ZERO0 and partitioning is not framework.partitioning:
        raise SpecError("partitioning", f"{framework.value} partitions {framework.partitioning.value}, not "
                        f"{partitioning.value}; leave the partitioning out or give "
                        f"{framework.partitioning.value}")
    return partitioning or framework.partitioning, framework
