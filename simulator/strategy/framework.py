"""Which software implements the data-parallel partitioning, and how it splits the states.

The framework decides what is allocated besides the ZeRO paper's states (Adam ``step`` tensors,
gradient buckets, FSDP2's padding) and how a partitioned state is split over the dp ranks, hence
which rank is the most loaded. A strategy may name the framework, the partitioning, both or
neither; :func:`resolve_framework` is the one rule that completes them.
"""

from __future__ import annotations

from functools import lru_cache

from simulator.attention_efficiency import AttentionBackend
from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.strategy.kinds import GradReduceDtype, MixedPrecision, OptimizerImpl, ZeroStage
from simulator.workload.kinds import DtypePolicy, LossImpl


HOPPER_CC = 9.0
MEGATRON_VOCAB_DIVISIBLE_BY = 128
"""Megatron-LM's ``--make-vocab-size-divisible-by`` default [src: megatron-vocab-pad]."""
"""CUDA compute capability of Hopper (H100/H200) [src: nvidia-cuda-gpus], from which Transformer Engine
prefers cuDNN attention [src: nemo-te-attention]."""


class Partitioning(Kind):
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


class Framework(Kind):
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
    def loss_impl(self) -> LossImpl:
        """How the framework computes the cross-entropy (:mod:`simulator.workload.loss`): torch DDP, FSDP2 and
        DeepSpeed models call ``F.cross_entropy`` on fp32 logits (the rule the memory model's loss working set
        follows, :func:`simulator.memory.activations.loss_working_bytes`); Megatron-LM its vocab-parallel
        cross-entropy on fp32 logits, pass by pass [src: megatron-cross-entropy, megatron-2021-cross-entropy]."""
        return LossImpl.MEGATRON_VOCAB_PARALLEL if self is Framework.MEGATRON else LossImpl.TORCH_FP32

    def optimizer_impl(self, foreach_device: bool) -> OptimizerImpl:
        """The Adam(W) implementation the framework runs by default on a device with (``foreach_device``) or
        without foreach kernels. torch DDP and FSDP2 train with ``torch.optim.AdamW`` at its defaults, which pick
        foreach where every parameter is on a foreach device (CUDA) and the for-loop elsewhere (the CPU);
        ``fused`` is never picked by default (``_default_to_fused_or_foreach``) [src: torch-adam-impl].
        Megatron-LM steps with Transformer Engine's (or apex's) ``FusedAdam`` [src: megatron-fused-adam] and DeepSpeed
        with its ``FusedAdam`` [src: deepspeed-fused-adam] on the GPU. A recipe that sets it otherwise (torchtitan's
        ``fused``) gives the strategy's ``optimizer_impl``."""
        if self in (Framework.MEGATRON, Framework.DEEPSPEED):
            return OptimizerImpl.FUSED
        return OptimizerImpl.FOREACH if foreach_device else OptimizerImpl.FOR_LOOP

    @property
    def mixed_precision(self) -> MixedPrecision:
        """How the framework runs a bf16/fp16 model by default: torch DDP under ``torch.autocast`` over fp32
        parameters (DDP has no parameter-dtype option; PyTorch's AMP recipe) [src: torch-amp-autocast]; FSDP2
        with ``MixedPrecisionPolicy(param_dtype=bfloat16)``, as torchtitan sets it (``mixed_precision_param``)
        [src: torchtitan]; Megatron-LM and DeepSpeed with bf16/fp16 parameters and fp32 masters in the
        optimizer [src: megatron-distopt] [src: deepspeed-config]."""
        return MixedPrecision.AUTOCAST if self is Framework.TORCH_DDP else MixedPrecision.PARAM_DTYPE

    def grad_reduce_dtype(self, dtype: DtypePolicy) -> GradReduceDtype:
        """The format the framework reduces a ``dtype`` model's gradients in by default. Megatron-LM forces
        fp32 gradient accumulation and all-reduce for bf16 models (``arguments.py``: "bfloat16 requires
        gradient accumulation and all-reduce to be done in fp32", unless ``--grad-reduce-in-bf16``) but not
        for fp16 ones [src: megatron-grad-reduce-fp32]; torchtitan's FSDP2 reduces in fp32
        (``mixed_precision_reduce = "float32"``, its ``MixedPrecisionPolicy(reduce_dtype=float32)``)
        [src: torchtitan-mp-reduce]; DeepSpeed communicates in the model's bf16/fp16
        (``communication_data_type``'s default) [src: deepspeed-comm-dtype]; torch DDP all-reduces the
        gradients in their own dtype (fp32 under autocast) [src: torch-ddp]. A recipe that sets it otherwise
        (NVIDIA's performance recipes reduce in bf16) gives the strategy's ``grad_reduce_dtype``."""
        if self is Framework.FSDP2 or self is Framework.MEGATRON and dtype is DtypePolicy.BF16_MIXED:
            return GradReduceDtype.FP32
        return GradReduceDtype.PARAM_DTYPE

    @property
    def partitions_gradients_with_pipeline(self) -> bool:
        """Whether the framework runs ZeRO-2/3 (partitioned gradients) together with pipeline
        parallelism. DeepSpeed's pipeline engine refuses it (``deepspeed/runtime/pipe/engine.py``
        asserts ``zero_optimization_stage() < ZeroStageEnum.gradients``: "ZeRO-2 and ZeRO-3 are
        incompatible with pipeline parallelism") [src: deepspeed-pipe]; Megatron-LM's distributed
        optimizer (:attr:`MEGATRON`) and torch DDP stop at ZeRO-1.
        FSDP2 composes with ``torch.distributed.pipelining`` (torchtitan's FSDP + PP) [src: torchtitan]."""
        return self is Framework.FSDP2


@lru_cache(maxsize=256)  # a search asks it ~100k times of a few combinations; a refusal raises (not cached)
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
