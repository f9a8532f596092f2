"""Data-parallel gradient synchronisation: all-reduce with buckets, or a parameter server.

All-reduce follows PyTorch DDP (Li et al. VLDB 2020): gradients are packed into buckets in
reverse parameter order; a bucket's all-reduce starts when all its gradients are ready and,
with ``overlap_grad_reduce``, runs while backward continues. Horovod's tensor fusion is the same idea with
a timer: ready tensors are fused every ``fusion_cycle_s`` up to the buffer size.
A parameter server (Li et al. OSDI'14) holds the parameters in ``shards`` pieces; workers push
gradients and pull parameters, synchronously (every step waits for all workers) or
asynchronously (a worker may run up to ``staleness_steps`` steps ahead of the slowest;
stale-synchronous parallel, Ho et al. NIPS'13).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from simulator.errors import SpecError

MiB = 1024 * 1024


class AllReduceAlgorithm(Enum):
    """All-reduce algorithm; values are the names in the collectives registry."""

    AUTO = "auto"
    """Let the cost model pick, as NCCL's tuner does (fastest predicted per size)."""
    RING = "ring"
    """Ring reduce-scatter + all-gather: 2(p−1)/p of the buffer over each link (bandwidth-optimal)."""
    TREE = "tree"
    """NCCL double binary tree: log-depth latency, full bandwidth on large sizes."""
    RECURSIVE_DOUBLING = "recursive_doubling"
    """log2(p) exchange rounds of the whole buffer (latency-optimal, small messages)."""
    HALVING_DOUBLING = "halving_doubling"
    """Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather."""
    DIRECT = "direct"
    """Every rank sends each slice straight to its owner (one round, p−1 messages each)."""
    HIERARCHICAL = "hierarchical"
    """Reduce inside each node, all-reduce across nodes, broadcast inside (Horovod's hierarchical)."""
    NVLS = "nvls"
    """NVLink SHARP in-switch reduction (NVSwitch 3+); needs ``cluster.in_switch_reduction``."""

    @classmethod
    def parse(cls, text: str) -> "AllReduceAlgorithm":
        for algo in cls:
            if text.lower().replace("-", "_") in (algo.value, algo.name.lower()):
                return algo
        raise SpecError("allreduce_algorithm", f"unknown algorithm {text!r}; known: "
                        f"{', '.join(a.value for a in cls)}")


class DpSyncKind(Enum):
    """How data-parallel replicas agree on gradients."""

    ALL_REDUCE = "all-reduce"
    """Collective all-reduce (or reduce-scatter/all-gather under ZeRO) among the dp group."""
    PARAM_SERVER = "param-server"
    """Workers push gradients to and pull parameters from server shards."""


class ParamServerMode(Enum):
    """Parameter-server consistency."""

    SYNC = "sync"
    """Each step's update waits for every worker's gradients (bulk synchronous)."""
    ASYNC = "async"
    """Workers update independently, at most ``staleness_steps`` apart (stale-synchronous)."""


def _pos_int(field: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(field, f"must be a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class AllReduceSync:
    """Gradient all-reduce among the dp group, bucketed as DDP or fused as Horovod."""

    algorithm: AllReduceAlgorithm = AllReduceAlgorithm.AUTO
    bucket_bytes: int | None = 25 * MiB
    """Bucket (fusion buffer) capacity in bytes; PyTorch DDP's ``bucket_cap_mb=25`` (MiB).
    None with ``bucket_params`` None: one bucket holding every gradient (TF ``num_packs=1``)."""
    bucket_params: int | None = None
    """Bucket capacity in elements (DeepSpeed, Megatron count elements); set ``bucket_bytes`` None with it."""
    allgather_bucket_params: int | None = None
    """Elements per ZeRO parameter all-gather (DeepSpeed ``allgather_bucket_size``); None: as the
    reduce bucket."""
    overlap_grad_reduce: bool = True
    """Start a bucket's all-reduce during backward as soon as it is full; off, after backward."""
    fusion_cycle_s: float = 0.0
    """Horovod cycle time: ready tensors are fused and launched every this many seconds (0: at once)."""

    @property
    def kind(self) -> DpSyncKind:
        return DpSyncKind.ALL_REDUCE

    def __post_init__(self) -> None:
        if not isinstance(self.algorithm, AllReduceAlgorithm):
            raise SpecError("allreduce_algorithm", f"must be an AllReduceAlgorithm, got {self.algorithm!r}")
        for name in ("bucket_bytes", "bucket_params", "allgather_bucket_params"):
            if getattr(self, name) is not None:
                _pos_int(name, getattr(self, name))
        if self.bucket_params is not None and self.bucket_bytes is not None:
            raise SpecError("bucket_params", "give one bucket capacity: bucket_params with bucket_bytes None, "
                            "or bucket_bytes alone")
        if not isinstance(self.fusion_cycle_s, (int, float)) or self.fusion_cycle_s < 0:
            raise SpecError("fusion_cycle_s", f"must be a non-negative number, got {self.fusion_cycle_s!r}")

    def resolved_bucket_bytes(self, grad_bytes: int) -> int | None:
        """Bucket capacity in bytes for ``grad_bytes``-byte gradients; None: one bucket for all."""
        if self.bucket_params is not None:
            return self.bucket_params * grad_bytes
        return self.bucket_bytes


@dataclass(frozen=True, kw_only=True)
class ParamServerSync:
    """A sharded parameter server, on the workers' nodes or on nodes of its own."""

    mode: ParamServerMode = ParamServerMode.SYNC
    staleness_steps: int | None = None
    """Most steps a worker may run ahead of the slowest (ASYNC only); None: unbounded (pure
    asynchronous, as TensorFlow's ParameterServerStrategy)."""
    shards: int = 1
    """Server shards the parameters are split over (evenly, by bytes)."""
    server_nodes: int = 0
    """Dedicated server nodes, taken from the end of the cluster; 0: shards colocated with workers."""

    @property
    def kind(self) -> DpSyncKind:
        return DpSyncKind.PARAM_SERVER

    @property
    def colocated(self) -> bool:
        return self.server_nodes == 0

    def __post_init__(self) -> None:
        if not isinstance(self.mode, ParamServerMode):
            raise SpecError("ps_mode", f"must be a ParamServerMode, got {self.mode!r}")
        _pos_int("ps_shards", self.shards)
        if not isinstance(self.server_nodes, int) or self.server_nodes < 0:
            raise SpecError("ps_server_nodes", f"must be a non-negative integer, got {self.server_nodes!r}")
        if self.staleness_steps is not None and (not isinstance(self.staleness_steps, int)
                                                 or self.staleness_steps < 0):
            raise SpecError("staleness_steps", f"must be a non-negative integer, got {self.staleness_steps!r}")
        if self.mode is ParamServerMode.SYNC and self.staleness_steps:
            raise SpecError("staleness_steps", "a synchronous parameter server has no staleness; "
                            "use ps_mode async, or leave staleness_steps unset")
