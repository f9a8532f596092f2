"""What the memory model needs to know about *how* a model is trained (kept apart from the cluster
and the workload): parallel degrees, ZeRO stage, the framework and its partitioning, offload,
micro-batching, recomputation, schedule, attention implementation.

:class:`MemoryStrategy` is deliberately small; a later, full ``Strategy`` type can build one with
:meth:`MemoryStrategy` keyword arguments of the same names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from simulator.errors import SpecError
from simulator.schedules import ScheduleKind
from simulator.strategy.spec import Offload, ZeroStage
from simulator.workload.flops import Recompute


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
    """DeepSpeed ZeRO (flat partitioning; Megatron-LM's distributed optimizer has the same states):
    the optimizer runs on flat fp32 partitions, so no per-tensor ``step`` tensors; gradients go
    through DeepSpeed's reduce bucket."""

    @property
    def partitioning(self) -> Partitioning:
        """How this framework splits partitioned states."""
        return {Framework.TORCH_DDP: Partitioning.WHOLE_TENSOR, Framework.FSDP2: Partitioning.DIM0_PADDED,
                Framework.DEEPSPEED: Partitioning.FLAT}[self]

    @property
    def zero_stages(self) -> tuple[ZeroStage, ...]:
        """The ZeRO stages the framework implements."""
        return {Framework.TORCH_DDP: (ZeroStage.ZERO0, ZeroStage.ZERO1),
                Framework.FSDP2: (ZeroStage.ZERO2, ZeroStage.ZERO3),
                Framework.DEEPSPEED: tuple(ZeroStage)}[self]


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


def _pos_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(name, f"must be a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class MemoryStrategy:
    """How one training job is laid out, as far as per-rank memory is concerned."""

    dp: int = 1
    """Data-parallel degree (ranks that hold replicas or ZeRO partitions)."""
    tp: int = 1
    """Tensor-parallel degree (Megatron column/row splits of each layer)."""
    pp: int = 1
    """Pipeline-parallel stages; layers split evenly (see :func:`simulator.memory.shapes.stage_layers`)."""
    zero: ZeroStage = ZeroStage.ZERO0
    offload: Offload = Offload.NONE
    offload_activations: bool = False
    """Move activation checkpoints (the layer inputs of full recompute) to host memory (DeepSpeed
    activation checkpointing with ``cpu_checkpointing``)."""
    mbs: int = 1
    """Micro-batch size, sequences."""
    seq: int = 2048
    """Sequence length, tokens."""
    recompute: Recompute = Recompute.NONE
    sp: bool = False
    """Sequence parallelism with tensor parallelism (Korthikanti et al. 2022): activations outside
    the tensor-parallel regions are split over tp as well."""
    schedule: ScheduleKind = ScheduleKind.ONE_F_ONE_B
    microbatches: int = 1
    """Micro-batches per step per pipeline (m); gradient accumulation steps when pp = 1."""
    virtual_stages: int = 1
    """Model chunks per rank (v) for the interleaved schedule; 1 otherwise."""
    partitioning: Partitioning | None = None
    """How ZeRO splits states; None: the framework's (flat when no framework is given either)."""
    framework: Framework | None = None
    """Who implements the ZeRO stage; None: implied by the partitioning (:func:`resolve_framework`)."""
    gradient_as_bucket_view: bool = False
    """torch DDP's option (default False, which keeps a bucket copy of the gradients); torch DDP only."""
    flash_attention: bool = True
    """FlashAttention / SDPA: the s×s attention scores are never stored (a log-sum-exp per row is);
    False: eager attention, Korthikanti et al.'s count. The compute model defaults to flash too
    (``simulator.compute.layer_times(..., flash_attention=True)``)."""

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "mbs", "seq", "microbatches", "virtual_stages"):
            _pos_int(name, getattr(self, name))
        for name, kind in (("zero", ZeroStage), ("offload", Offload), ("recompute", Recompute),
                           ("schedule", ScheduleKind)):
            if not isinstance(getattr(self, name), kind):
                raise SpecError(name, f"must be a {kind.__name__}, got {getattr(self, name)!r}")
        if self.partitioning is not None and not isinstance(self.partitioning, Partitioning):
            raise SpecError("partitioning", f"must be a Partitioning, got {self.partitioning!r}")
        part, framework = resolve_framework(self.zero, self.partitioning, self.framework)
        if self.gradient_as_bucket_view and framework is not Framework.TORCH_DDP:
            raise SpecError("gradient_as_bucket_view", f"is a torch DDP option; {framework.value} has no DDP "
                            "buckets (use --framework torch with --zero 0 or 1)")
        if self.sp and self.tp == 1:
            raise SpecError("sp", "sequence parallelism splits activations over tensor-parallel ranks; "
                            "give --tp > 1 or drop --sp")
        if self.offload in (Offload.PARAMS, Offload.NVME) and self.zero is not ZeroStage.ZERO3:
            raise SpecError("offload", f"{self.offload.value} offload partitions parameters: it needs --zero 3")
        if self.offload is Offload.OPTIMIZER and self.zero is ZeroStage.ZERO0:
            raise SpecError("offload", "optimizer offload (ZeRO-Offload) works on the partitioned optimizer: "
                            "give --zero 1, 2 or 3")
        if self.offload_activations and self.recompute is not Recompute.FULL:
            raise SpecError("offload_activations", "only activation checkpoints (the layer inputs kept by "
                            "full recomputation) go to the CPU; add --recompute full")
        if self.virtual_stages > 1 and self.schedule is not ScheduleKind.INTERLEAVED:
            raise SpecError("virtual_stages", "model chunks per rank need --schedule interleaved")

    @property
    def resolved_partitioning(self) -> Partitioning:
        """The partitioning in effect (given, or the framework's)."""
        return resolve_framework(self.zero, self.partitioning, self.framework)[0]

    @property
    def resolved_framework(self) -> Framework:
        """The framework in effect (given, or implied by the partitioning and ZeRO stage)."""
        return resolve_framework(self.zero, self.partitioning, self.framework)[1]

    @property
    def world_size(self) -> int:
        """GPUs the layout uses: dp · tp · pp."""
        return self.dp * self.tp * self.pp


def resolve_degrees(gpus: int, dp: int | None = None, tp: int | None = None,
                    pp: int | None = None) -> tuple[int, int, int]:
    """(dp, tp, pp) for ``gpus`` GPUs: tp and pp default to 1, dp to gpus / (tp·pp); the product
    must equal ``gpus``."""
    _pos_int("gpus", gpus)
    tp = 1 if tp is None else tp
    pp = 1 if pp is None else pp
    _pos_int("tp", tp)
    _pos_int("pp", pp)
    if dp is None:
        if gpus % (tp * pp):
            raise SpecError("gpus", f"{gpus} GPUs are not a multiple of tp·pp = {tp}·{pp} = {tp * pp}")
        dp = gpus // (tp * pp)
    _pos_int("dp", dp)
    if dp * tp * pp != gpus:
        raise SpecError("gpus", f"dp·tp·pp = {dp}·{tp}·{pp} = {dp * tp * pp} is not --gpus {gpus}; "
                        "make the product equal the GPU count (or leave --dp out)")
    return dp, tp, pp
