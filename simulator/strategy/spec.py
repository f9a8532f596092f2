"""The strategy: how a workload is spread over a cluster, as the user asked for it.

Only what the user said, checked field by field; everything that needs the cluster or the
workload (world size, micro-batch count, layer split, rank groups) is derived and checked in
:mod:`simulator.strategy.layout`, as torchtitan's ``ParallelDims`` separates requested from
derived values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum

from simulator.errors import SpecError
from simulator.schedules import ScheduleKind
from simulator.strategy.faults import FailureModel, StragglerModel
from simulator.strategy.sync import AllReduceSync, ParamServerSync
from simulator.workload import Recompute


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


class PlacementOrder(Enum):
    """Order in which the parallel dimensions fill consecutive ranks, innermost first.

    Ranks fill a node before the next (``Cluster.place``), so the innermost dimension's groups
    share a node when their size divides ``gpus_per_node``.
    """

    TP_PP_DP = "tp-pp-dp"
    """tp innermost (same node, fastest links), then pp, then dp outermost. Default."""
    TP_DP_PP = "tp-dp-pp"
    """tp innermost, then dp, pp outermost: Megatron-LM's default order ``tp-cp-ep-dp-pp``."""
    PP_TP_DP = "pp-tp-dp"
    """pp innermost, then tp, then dp."""
    PP_DP_TP = "pp-dp-tp"
    """pp innermost, then dp, then tp."""
    DP_TP_PP = "dp-tp-pp"
    """dp innermost, then tp, then pp."""
    DP_PP_TP = "dp-pp-tp"
    """dp innermost, then pp, tp outermost."""

    @property
    def dims(self) -> tuple[str, str, str]:
        """The three dimension names, innermost first."""
        return tuple(self.value.split("-"))  # type: ignore[return-value]

    @classmethod
    def parse(cls, text: str) -> "PlacementOrder":
        for order in cls:
            if text.lower().replace(",", "-") in (order.value, order.name.lower()):
                return order
        raise SpecError("placement", f"unknown order {text!r}; known: {', '.join(o.value for o in cls)}")


class AttentionKind(Enum):
    """How the attention core (scores QKᵀ, softmax, A·V) is computed, which sets both its time and
    the activations it keeps for backward."""

    FLASH = "flash"
    """FlashAttention / torch SDPA (Dao et al. 2022): one fused kernel; the s×s scores are never
    materialised in device memory, only a log-sum-exp per row is kept, and backward recomputes the
    scores inside its own kernel. Default (what current frameworks use)."""
    EAGER = "eager"
    """Scores and softmax materialised as separate kernels and kept for backward, as in Megatron-LM
    (Narayanan et al. SC'21) and Korthikanti et al. 2022's activation count (the 5as/h term)."""


class DataSource(Enum):
    """Where training samples are read from."""

    SYNTHETIC = "synthetic"
    """Generated in memory: no input cost (benchmarks)."""
    LOCAL = "local"
    """Node-local disk at the node's ``host.storage_read_GBps``."""
    SHARED = "shared"
    """A shared file system: each node at ``host.storage_read_GBps``, all nodes together capped at
    ``shared_storage_GBps`` when given."""


@dataclass(frozen=True, kw_only=True)
class InputPipeline:
    """Reading the next batch: bytes per sample from storage, prefetched behind compute."""

    bytes_per_sample: int = 0
    """Bytes read from storage per training sample (0: input cost ignored)."""
    source: DataSource = DataSource.LOCAL
    shared_storage_GBps: float | None = None
    """Aggregate read bandwidth of shared storage over all nodes, GB/s (SHARED only; None: no cap)."""
    prefetch_batches: int = 2
    """Batches read ahead while computing (PyTorch DataLoader's ``prefetch_factor`` default is 2
    per worker); 0: each step waits for its own read."""

    def __post_init__(self) -> None:
        if not isinstance(self.bytes_per_sample, int) or self.bytes_per_sample < 0:
            raise SpecError("bytes_per_sample", f"must be a non-negative integer, got {self.bytes_per_sample!r}")
        if not isinstance(self.source, DataSource):
            raise SpecError("data_source", f"must be a DataSource, got {self.source!r}")
        if self.shared_storage_GBps is not None and (self.source is not DataSource.SHARED
                                                     or self.shared_storage_GBps <= 0):
            raise SpecError("shared_storage_GBps", "must be positive and is only meaningful with data_source shared")
        if not isinstance(self.prefetch_batches, int) or self.prefetch_batches < 0:
            raise SpecError("prefetch_batches", f"must be a non-negative integer, got {self.prefetch_batches!r}")


def _pos_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(name, f"must be a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """A parallelisation strategy as requested. :func:`simulator.strategy.build_layout` checks it
    against a cluster and a workload and derives the rest."""

    global_batch: int
    """Samples (sequences) per optimizer step, over all replicas."""
    micro_batch: int = 1
    """Samples per micro-batch on one pipeline (one dp replica)."""
    dp: int | None = None
    """Data-parallel degree; None: whatever the GPUs leave, world ÷ (tp·pp)."""
    tp: int = 1
    """Tensor-parallel degree (Megatron-style, attention heads split)."""
    pp: int = 1
    """Pipeline-parallel degree (ranks per pipeline)."""
    placement: PlacementOrder = PlacementOrder.TP_PP_DP
    schedule: ScheduleKind = ScheduleKind.ONE_F_ONE_B
    virtual_stages: int = 1
    """Model chunks per pipeline rank, v (INTERLEAVED only)."""
    layer_split: tuple[int, ...] | None = None
    """Layers per (virtual) stage in model order, pp·v entries; None: as even as possible."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism on the tp group (Korthikanti et al. 2022); no-op at tp = 1."""
    zero: ZeroStage = ZeroStage.ZERO0
    offload: Offload = Offload.NONE
    recompute: Recompute = Recompute.NONE
    attention: AttentionKind = AttentionKind.FLASH
    """Attention implementation; with EAGER, selective recomputation recomputes the attention core
    (and does not keep its scores); with FLASH there is nothing stored for it to drop, so selective
    recomputes nothing (FlashAttention already recomputes the scores in its backward)."""
    dp_sync: AllReduceSync | ParamServerSync = field(default_factory=AllReduceSync)
    input: InputPipeline = field(default_factory=InputPipeline)
    stragglers: StragglerModel = field(default_factory=StragglerModel)
    failures: FailureModel | None = None
    """None: no failures (single-step questions)."""
    profile: str = ""
    """Name of the framework profile the defaults came from ('' for none); informational."""

    def __post_init__(self) -> None:
        _pos_int("global_batch", self.global_batch)
        _pos_int("micro_batch", self.micro_batch)
        if self.dp is not None:
            _pos_int("dp", self.dp)
        _pos_int("tp", self.tp)
        _pos_int("pp", self.pp)
        _pos_int("virtual_stages", self.virtual_stages)
        for name, kind in (("placement", PlacementOrder), ("schedule", ScheduleKind), ("offload", Offload),
                           ("recompute", Recompute), ("attention", AttentionKind)):
            if not isinstance(getattr(self, name), kind):
                raise SpecError(name, f"must be a {kind.__name__}, got {getattr(self, name)!r}")
        if not isinstance(self.zero, ZeroStage):
            raise SpecError("zero", f"must be a ZeroStage 0-3, got {self.zero!r}")
        if not isinstance(self.dp_sync, (AllReduceSync, ParamServerSync)):
            raise SpecError("dp_sync", f"must be AllReduceSync or ParamServerSync, got {self.dp_sync!r}")
        self._check_combinations()

    def _check_combinations(self) -> None:
        if self.virtual_stages > 1 and self.schedule is not ScheduleKind.INTERLEAVED:
            raise SpecError("virtual_stages", f"{self.virtual_stages} chunks per rank need schedule interleaved, "
                            f"not {self.schedule.value}; or use virtual_stages 1")
        if self.offload is Offload.OPTIMIZER and self.zero < ZeroStage.ZERO1:
            raise SpecError("offload", "optimizer offload partitions the optimizer state: use zero 1, 2 or 3")
        if self.offload in (Offload.PARAMS, Offload.NVME) and self.zero is not ZeroStage.ZERO3:
            raise SpecError("offload", f"{self.offload.value} offload needs zero 3 (DeepSpeed offload_param is "
                            "stage-3 only)")
        if isinstance(self.dp_sync, ParamServerSync) and self.zero is not ZeroStage.ZERO0:
            raise SpecError("zero", "ZeRO partitions state over an all-reduce group; with a parameter server "
                            "use zero 0")
        if self.layer_split is not None:
            if not isinstance(self.layer_split, tuple) or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.layer_split):
                raise SpecError("layer_split", f"must be a tuple of positive integers, got {self.layer_split!r}")
            if len(self.layer_split) != self.pp * self.virtual_stages:
                raise SpecError("layer_split", f"has {len(self.layer_split)} entries; give pp·virtual_stages = "
                                f"{self.pp * self.virtual_stages}")
