"""What the memory model needs to know about *how* a model is trained (kept apart from the cluster
and the workload): parallel degrees, ZeRO stage, offload, micro-batching, recomputation, schedule.

:class:`MemoryStrategy` is deliberately small; a later, full ``Strategy`` type can build one with
:meth:`MemoryStrategy` keyword arguments of the same names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from simulator.errors import SpecError
from simulator.workload.flops import Recompute


class ZeroStage(IntEnum):
    """Which model states are partitioned over the data-parallel ranks (Rajbhandari et al. SC'20)."""

    ZERO0 = 0
    """Plain data parallelism (DDP): every rank holds all parameters, gradients, optimizer states."""
    ZERO1 = 1
    """P_os: optimizer states partitioned."""
    ZERO2 = 2
    """P_os+g: optimizer states and gradients partitioned."""
    ZERO3 = 3
    """P_os+g+p: optimizer states, gradients and parameters partitioned (FSDP's full sharding)."""


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


class Offload(Enum):
    """Where model states live outside GPU memory (DeepSpeed ZeRO-Offload / ZeRO-Infinity)."""

    NONE = "none"
    """Everything on the GPU."""
    OPTIMIZER = "optimizer"
    """ZeRO-Offload (Ren et al. ATC'21): fp32 optimizer states and fp32 gradient partitions in host
    memory, the Adam step on the CPU; needs ZeRO >= 1."""
    PARAMS = "params"
    """ZeRO-3 offload: the optimizer offload plus the 16-bit parameter partitions in host memory;
    the GPU holds only the layers gathered for compute. Needs ZeRO 3."""
    NVME = "nvme"
    """ZeRO-Infinity (Rajbhandari et al. SC'21): parameter and optimizer partitions on NVMe, fp32
    gradient partitions and staging buffers in host memory. Needs ZeRO 3."""


class ScheduleKind(Enum):
    """Pipeline schedule: decides how many micro-batches' activations a stage holds at once."""

    GPIPE = "gpipe"
    """All forwards, then all backwards (Huang et al. 2019): every stage holds all m micro-batches."""
    ONE_F_ONE_B = "1f1b"
    """PipeDream-Flush (Narayanan et al. 2021): stage k holds at most min(p - k, m) micro-batches."""
    INTERLEAVED = "interleaved"
    """Interleaved 1F1B with v model chunks per rank (Narayanan et al. SC'21); the first stage holds
    (1 + (p - 1)/(p·v)) times the 1F1B activations (Korthikanti et al. 2022, §4.2.3)."""


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
    partitioning: Partitioning = Partitioning.FLAT

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "mbs", "seq", "microbatches", "virtual_stages"):
            _pos_int(name, getattr(self, name))
        for name, kind in (("zero", ZeroStage), ("offload", Offload), ("recompute", Recompute),
                           ("schedule", ScheduleKind), ("partitioning", Partitioning)):
            if not isinstance(getattr(self, name), kind):
                raise SpecError(name, f"must be a {kind.__name__}, got {getattr(self, name)!r}")
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
