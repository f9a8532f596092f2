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

from simulator.checks import enum_member, non_negative_number
from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.strategy.fields import (Flag, FlagKind, Role, boolean, choices_of, declare, enum_parser, float_parser,
                                       int_parser, is_a, nonneg_int, opt_nonneg_int, opt_pos_int, pos_int, validate)
from simulator.strategy.framework import Framework
from simulator.units import MiB

DDP_BUCKET_CAP_BYTES = 25 * MiB
"""PyTorch DDP's ``bucket_cap_mb=25`` (torch.nn.parallel.DistributedDataParallel docs; MB means MiB
there: ``bucket_cap_mb * 1024 * 1024``) [src: torch-ddp], the default bucket of every all-reduce strategy."""


class AllReduceAlgorithm(Kind):
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
    NVLS_TREE = "nvls_tree"
    """NVLink SHARP inside each node plus a tree across nodes (NCCL's NVLSTree); needs
    ``cluster.in_switch_reduction`` and 2+ nodes."""

    @classmethod
    def parse(cls, text: str) -> "AllReduceAlgorithm":
        return enum_member(cls, text, "allreduce_algorithm", "algorithm", lambda t: t.lower().replace("-", "_"))


class DpSyncKind(Kind):
    """How data-parallel replicas agree on gradients."""

    ALL_REDUCE = "all-reduce"
    """Collective all-reduce (or reduce-scatter/all-gather under ZeRO) among the dp group."""
    PARAM_SERVER = "param-server"
    """Workers push gradients to and pull parameters from server shards."""


class ParamServerMode(Kind):
    """Parameter-server consistency."""

    SYNC = "sync"
    """Each step's update waits for every worker's gradients (bulk synchronous)."""
    ASYNC = "async"
    """Workers update independently, at most ``staleness_steps`` apart (stale-synchronous)."""


def _bucket_bytes(value):
    from simulator.units import parse_size

    return value if value is None or isinstance(value, int) else parse_size(value, "bucket_bytes")


def _mib_to_bytes(text) -> int:
    """``--bucket-mb 25`` → 25 MiB in bytes (torch's ``bucket_cap_mb`` counts MiB)."""
    try:
        mib = float(text)
    except (TypeError, ValueError):
        raise SpecError("bucket_bytes", f"must be a number of MiB, got {text!r}") from None
    if not 0 < mib < float("inf"):
        raise SpecError("bucket_bytes", f"must be positive, got {text}")
    return round(mib * MiB)


_non_negative_number = non_negative_number





_STRUCT = Role.STRUCTURE


@dataclass(frozen=True, kw_only=True)
class AllReduceSync:
    """Gradient all-reduce among the dp group, bucketed as DDP or fused as Horovod."""

    algorithm: AllReduceAlgorithm = declare(
        AllReduceAlgorithm.AUTO, key="allreduce_algorithm", role=_STRUCT, doc="all-reduce algorithm",
        parse=enum_parser(AllReduceAlgorithm, "allreduce_algorithm"), check=is_a(AllReduceAlgorithm),
        flag=Flag("--dp-algorithm", "all-reduce algorithm of the gradient sync",
                  choices=choices_of(AllReduceAlgorithm)))
    bucket_bytes: int | None = declare(
        DDP_BUCKET_CAP_BYTES, key="bucket_bytes", role=_STRUCT, parse=_bucket_bytes, check=opt_pos_int,
        doc="Bucket (fusion buffer) capacity in bytes; None with bucket_params None: one bucket holding "
            "every gradient (TF num_packs=1)",
        flag=Flag("--bucket-mb", "gradient bucket in MiB", metavar="X", from_flag=_mib_to_bytes,
                  default_help="25, PyTorch DDP's bucket_cap_mb"))
    bucket_params: int | None = declare(
        None, key="bucket_params", role=_STRUCT, parse=int_parser("bucket_params"), check=opt_pos_int,
        doc="Bucket capacity in elements (DeepSpeed, Megatron count elements); set bucket_bytes None with it")
    allgather_bucket_params: int | None = declare(
        None, key="allgather_bucket_params", role=_STRUCT, parse=int_parser("allgather_bucket_params"),
        check=opt_pos_int, doc="Elements per ZeRO parameter all-gather (DeepSpeed allgather_bucket_size); "
                               "None: as the reduce bucket")
    overlap_grad_reduce: bool = declare(
        True, key="overlap_grad_reduce", role=_STRUCT, check=boolean,
        doc="Start a bucket's all-reduce during backward as soon as it is full; off: after backward",
        flag=Flag("--overlap", "overlap the gradient reduce with backward (--no-overlap: after backward)",
                  kind=FlagKind.SWITCH))
    fusion_cycle_s: float = declare(
        0.0, key="fusion_cycle_s", role=_STRUCT, parse=float_parser("fusion_cycle_s"), check=_non_negative_number,
        doc="Horovod cycle time: ready tensors are fused and launched every this many seconds (0: at once)")

    @property
    def kind(self) -> DpSyncKind:
        return DpSyncKind.ALL_REDUCE

    def __post_init__(self) -> None:
        validate(self)
        if self.bucket_params is not None and self.bucket_bytes is not None:
            raise SpecError("bucket_params", "give one bucket capacity: bucket_params with bucket_bytes None, "
                            "or bucket_bytes alone")

    def resolved_bucket_bytes(self, grad_bytes: int) -> int | None:
        """Bucket capacity in bytes for ``grad_bytes``-byte gradients; None: one bucket for all."""
        if self.bucket_params is not None:
            return self.bucket_params * grad_bytes
        return self.bucket_bytes


@dataclass(frozen=True, kw_only=True)
class ParamServerSync:
    """A sharded parameter server, on the workers' nodes or on nodes of its own."""

    mode: ParamServerMode = declare(
        ParamServerMode.SYNC, key="ps_mode", role=_STRUCT, doc="parameter-server consistency",
        parse=enum_parser(ParamServerMode, "ps_mode"), check=is_a(ParamServerMode),
        flag=Flag("--param-server", "a parameter server instead of all-reduce", choices=choices_of(ParamServerMode)))
    staleness_steps: int | None = declare(
        None, key="staleness_steps", role=_STRUCT, parse=int_parser("staleness_steps"), check=opt_nonneg_int,
        doc="Most steps a worker may run ahead of the slowest (async only); None: unbounded (pure asynchronous, "
            "as TensorFlow's ParameterServerStrategy)",
        flag=Flag("--staleness", "async parameter-server staleness bound, steps", metavar="S"))
    shards: int = declare(
        1, key="ps_shards", role=_STRUCT, parse=int_parser("ps_shards"), check=pos_int,
        doc="Server shards the parameters are split over (evenly, by bytes)",
        flag=Flag("--servers", "parameter-server shards", metavar="K"))
    server_nodes: int = declare(
        0, key="ps_server_nodes", role=_STRUCT, parse=int_parser("ps_server_nodes"), check=nonneg_int,
        doc="Dedicated server nodes, taken from the end of the cluster; 0: shards colocated with workers",
        flag=Flag("--server-nodes", "dedicated parameter-server nodes (0: colocated with workers)", metavar="N"))

    @property
    def kind(self) -> DpSyncKind:
        return DpSyncKind.PARAM_SERVER

    @property
    def colocated(self) -> bool:
        return self.server_nodes == 0

    def __post_init__(self) -> None:
        validate(self)
        if self.mode is ParamServerMode.SYNC and self.staleness_steps:
            raise SpecError("staleness_steps", "a synchronous parameter server has no staleness; "
                            "use ps_mode async, or leave staleness_steps unset")


def partitions_gradients(strategy) -> bool:
    """ZeRO-2/3 under an all-reduce sync: each rank keeps only its shard of the gradients, which a reduce-scatter
    over the dp group produces (a parameter server pushes whole gradients instead)."""
    return not isinstance(strategy.dp_sync, ParamServerSync) and strategy.zero >= 2


def pipeline_defers_grad_sync(strategy) -> bool:
    """Whether torch's pipelining runtime holds a ZeRO-2/3 stage's gradients unsharded over the step and
    reduce-scatters them once, after the stage's last backward: FSDP2 (the only framework that runs ZeRO-2/3 with
    pp > 1, :attr:`Framework.partitions_gradients_with_pipeline`) with pp > 1. ``PipelineStage`` turns FSDP2's
    gradient sync off before **every** micro-batch's backward, the last one included
    (``backward_maybe_with_nosync``: ``set_requires_gradient_sync(False)``, ``set_reshard_after_backward(False)``),
    so FSDP2's ``post_backward`` keeps each unsharded gradient (cast to ``reduce_dtype``, then accumulated into,
    ``to_accumulated_grad_if_needed`` / ``accumulate_unsharded_grad_if_needed``); the schedule then calls
    ``perform_reduce_grad`` once per stage (after its loop in ``PipelineScheduleSingle``; as the ``REDUCE_GRAD``
    action ``_add_reduce_grad`` puts after the stage's m-th backward in ``_PipelineScheduleRuntime``), which turns
    sync on and runs every parameter group's ``post_backward``: one reduce-scatter per ``fully_shard`` module per
    step [src: torch-pipelining-fsdp-sync]. NeMo AutoModel's MoE models patch the same method to the same effect
    (sync off in every backward, the post-backward after the last) [src: automodel-fsdp-pp-sync]."""
    return partitions_gradients(strategy) and strategy.pp > 1 and strategy.resolved_framework is Framework.FSDP2


def reduces_every_micro_batch(strategy) -> bool:
    """Whether a step's data-parallel gradient sync runs in every micro-batch's backward: ZeRO-2/3 keep only their
    gradient shard, so each backward reduce-scatters it (FSDP2's default without pipelining, as torchtitan runs it,
    and DeepSpeed's) — except under torch's pipelining runtime (:func:`pipeline_defers_grad_sync`: FSDP2 with
    pp > 1), which reduce-scatters once per step after the stage's last backward; ZeRO-0/1 (DDP's ``no_sync`` until
    the last micro-batch) and a parameter server synchronise once per step. The one rule both sides read: the
    simulator places the reduce-scatters by it (:mod:`simulator.compile.grad_sync`) and the executor's FSDP2
    accumulation follows it (``executor/strategies/data_parallel.py`` at pp = 1; at pp > 1 torch's runtime does,
    ``tests/test_pipeline_fsdp2_sync.py``)."""
    return partitions_gradients(strategy) and not pipeline_defers_grad_sync(strategy)
