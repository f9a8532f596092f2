"""The compiled work of one training step: what each distinct rank computes and communicates.

Both engines consume the same :class:`StepWork`, so they cannot disagree on *what* happens, only on
*how it overlaps*: the analytical engine (:mod:`simulator.analytical`) adds it up in closed form,
the discrete-event engine (:mod:`simulator.engine`) plays it out on streams and links.

Symmetry: ranks that differ only by their data-parallel or tensor-parallel index do the same work
at the same time (no stragglers, a homogeneous cluster), so the step is described once per
pipeline stage (:class:`StageWork`), for a *representative* rank: the stage's first tp rank of the
first dp replica. A communication call records its representative group and how many identical
groups run it at the same moment (``concurrent_groups``), so an engine can charge the contention
those replicas cause without simulating their compute.

Times here are uncontended estimates from the cost models (compute roofline, collective closed
forms); an engine may replace them (the DES replays collective schedules on shared links).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.collectives.base import Op
from simulator.collectives.registry import algorithm_names
from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.gather_reuse import GatherReuse
from simulator.schedules import PipelineSchedule
from simulator.strategy import ParallelLayout, Strategy

if TYPE_CHECKING:
    from simulator.memory import MemoryReport


class CommKind(Kind):
    """Why a communication call happens; the breakdown reports exposed time per kind."""

    TP = "tp"
    """Tensor-parallel activation collectives inside a layer (all-reduce, or reduce-scatter/all-gather with SP)."""
    EP = "ep"
    """Expert-parallel token all-to-alls of a MoE layer (dispatch and combine), blocking the compute."""
    PP = "pp"
    """Pipeline send/recv of activations (forward) and their gradients (backward) between stages."""
    DP = "dp"
    """Data-parallel gradient synchronisation (all-reduce, or reduce-scatter under ZeRO >= 2)."""
    ZERO = "zero"
    """ZeRO-3 parameter all-gathers (forward and backward) and ZeRO-1/2 parameter all-gather after the step."""
    PS = "ps"
    """Parameter-server push of gradients and pull of parameters."""
    OFFLOAD = "offload"
    """Host<->device copies of ZeRO-Offload / ZeRO-Infinity (gradients out, parameters in)."""
    DATA = "data"
    """Reading the next batch from storage (the input pipeline)."""
    CP = "cp"
    """Context-parallel attention traffic: ring KV blocks (their part not hidden behind the attention)
    or the all-to-alls of Ulysses; blocking inside the layer like TP, and reported with it."""


class Transport(Kind):
    """How a call moves its bytes; it decides how the discrete-event engine plays the call."""

    COLLECTIVE = "collective"
    """The registry algorithm ``CommCall.algorithm``'s point-to-point schedule, replayed on the links."""
    P2P = "p2p"
    """One send/recv: a single flow from ``group[0]`` to ``group[1]`` (pipeline activations)."""
    HOST = "host"
    """A host<->device copy over PCIe or an NVMe transfer (ZeRO-Offload): a timed delay, off the network."""
    HOST_THEN_COLLECTIVE = "host+collective"
    """Offloaded ZeRO-3 parameters read from host or NVMe, then gathered or broadcast by
    ``CommCall.algorithm`` (None when there was nothing to gather): a timed delay."""
    ASYNC_BATCH = "async-batch"
    """One call of a batch issued with ``async_op=True`` and waited at the end, at its measured cost per call of such
    a batch (torch ZeRO-1's broadcasts on a loopback node with ``comm.async_broadcast_us``,
    :func:`simulator.collectives.gloo.async_broadcast_time_s`; ``CommCall.algorithm`` the one the library runs): a
    timed delay, its bytes the node's CPU work on no modelled link."""
    OVERLAPPED = "overlapped"
    """The exposed remainder of transfers that run under compute (ring attention's KV blocks,
    :mod:`simulator.compile.cp_part`): ``nbytes`` records the traffic, ``time_s`` is only what the
    compute did not hide; a timed delay."""


CollectiveAlgorithm = Kind("CollectiveAlgorithm", [(name.upper(), name) for name in algorithm_names()],
                           module=__name__)
CollectiveAlgorithm.__doc__ = """A collective algorithm of :mod:`simulator.collectives.registry`; a member's value is
its registry name, and the members are the registry's names, so the two cannot drift apart."""


@dataclass(frozen=True, kw_only=True)
class CommCall:
    """One communication call issued by the representative rank."""

    kind: CommKind
    op: Op
    """Collective operation; ``SEND_RECV`` for pipeline p2p and host copies."""
    group: tuple[int, ...]
    """Global ranks of the representative group (for SEND_RECV: (src, dst))."""
    nbytes: int
    """Message size in nccl-tests' convention (see :mod:`simulator.collectives.base`)."""
    transport: Transport
    """How the bytes move (the engines match on it)."""
    time_s: float
    """Uncontended time from the cost model."""
    algorithm: CollectiveAlgorithm | None = None
    """The collective algorithm (``auto`` already resolved) of a COLLECTIVE or HOST_THEN_COLLECTIVE call."""
    concurrent_groups: int = 1
    """Identical groups (other dp/tp replicas) running the same call at the same moment."""
    receive_first_time_s: float | None = None
    """A p2p call's seconds when its receive was posted before its send (no wait for a core on a node with no more
    processes than cores, :mod:`simulator.receive_first`); None: ``time_s`` either way."""

    def __post_init__(self) -> None:
        if self.transport is Transport.COLLECTIVE and self.algorithm is None:
            raise SpecError("algorithm", "a collective call needs its algorithm")
        if self.transport in (Transport.P2P, Transport.HOST, Transport.OVERLAPPED) and self.algorithm is not None:
            raise SpecError("algorithm", f"a {self.transport.value} call runs no collective algorithm")


@dataclass(frozen=True, kw_only=True)
class ChunkWork:
    """One model chunk (a virtual pipeline stage) on the representative rank, per micro-batch."""

    chunk: int
    """Virtual stage index (0 .. pp·v − 1)."""
    layers: int
    """Transformer blocks in this chunk."""
    fwd_s: float
    """Forward compute of one micro-batch, seconds (embedding / head included on the edge chunks)."""
    bwd_s: float
    """Backward compute of one micro-batch, seconds."""
    recompute_s: float = 0.0
    """Forward work repeated before backward under activation recomputation, seconds."""
    tp_fwd: tuple[CommCall, ...] = ()
    """Tensor-parallel (and context-parallel, kind CP) calls of one micro-batch's forward, in issue
    order (blocking the compute); the expert-parallel all-to-alls (:attr:`CommKind.EP`) and activation
    offload's host copies (:attr:`CommKind.OFFLOAD`, :mod:`simulator.compile.act_offload_part`) are among them."""
    tp_bwd: tuple[CommCall, ...] = ()
    """Tensor-parallel calls of one micro-batch's backward, in issue order."""
    zero_fwd: tuple[CommCall, ...] = ()
    """ZeRO-3 all-gathers of this chunk's layers before forward (per block, or per tensor under DeepSpeed),
    prefetched ``zero_prefetch_calls`` ahead."""
    zero_bwd: tuple[CommCall, ...] = ()
    """ZeRO-3 all-gathers of this chunk's layers before backward."""
    zero_prefetch_calls: int = 1
    """Calls the ZeRO stream may run ahead of the compute: call i starts once slice i − k has started
    (1: one block ahead, FSDP2; DeepSpeed's prefetch bucket, :mod:`simulator.compile.ds_zero3`; 0: none ahead,
    each call blocks the compute before its block, FSDP2 on gloo, :func:`simulator.compile.grad_sync.fsdp2_blocking_prefetch`)."""
    zero_fwd_share: float = 1.0
    """Share of the step's forwards of this chunk that run ``zero_fwd``: below 1 where torch's pipelining runtime
    keeps the gathered parameters (:mod:`simulator.gather_reuse`, ``gather_reuse``); the closed form charges that
    share of each forward's exposed gathers, the DES runs them in exactly those forwards."""
    zero_bwd_share: float = 1.0
    """The same for the backwards and ``zero_bwd``."""
    gather_reuse: GatherReuse | None = None
    """Which actions run the gathers (:func:`simulator.gather_reuse.gathers`, the DES's rule); None: every one."""
    p2p_fwd: CommCall | None = None
    """Activations sent to the next chunk's rank after forward (None on the last chunk)."""
    p2p_bwd: CommCall | None = None
    """Activation gradients sent to the previous chunk's rank after backward (None on the first)."""
    runtime_outside_s: float = 0.0
    """Seconds of ``fwd_s`` (and again of ``bwd_s``) that are torch's pipeline runtime's per-action host time
    (:func:`simulator.pipeline_runtime.chunk_host_us`), which the executor's clock leaves outside every phase."""
    runtime_post_s: float = 0.0
    """Seconds of ``fwd_s`` (and again of ``bwd_s``) that are the runtime's p2p posts, which the executor's clock
    times as ``pp`` (:func:`simulator.validate_phases.loop_moves` compares both there)."""


@dataclass(frozen=True, kw_only=True)
class StageWork:
    """Everything the representative rank of one pipeline stage does in one step."""

    stage: int
    rank: int
    """Global rank of the representative."""
    chunks: tuple[ChunkWork, ...]
    """The chunks this rank holds (v of them), in virtual-stage order."""
    grad_sync: tuple[CommCall, ...] = ()
    """Gradient buckets (DP or PS) in the order the last backward produces them."""
    grad_ready_fraction: tuple[float, ...] = ()
    """For each bucket, the fraction of the last micro-batch's backward after which it is ready
    (DDP's reverse-order bucketing, Li et al. VLDB 2020); all 1.0 without overlap."""
    after_step: tuple[CommCall, ...] = ()
    """Calls after the optimizer step (ZeRO-1/2 parameter all-gather, PS pull, offload copies back)."""
    optimizer_s: float = 0.0
    """Optimizer step on this rank (GPU, or CPU Adam under offload), seconds, with the per-step host terms charged
    beside it (the loop's, :mod:`simulator.step_loop`; torch's pipeline runtime's, :mod:`simulator.pipeline_runtime`)."""
    loop_outside_s: float = 0.0
    """Seconds of ``optimizer_s`` that the executor's phase clocks leave outside every phase: the loop's own work
    (``step_loop_us``, FSDP2's loop terms) and the pipeline runtime's per-step actions
    (:func:`simulator.validate_phases.loop_moves` compares them there, not with the optimizer)."""
    loop_forward_s: float = 0.0
    """Seconds of ``optimizer_s`` that the executor times inside its forward phase: the first micro-batch's cold
    forward (``first_microbatch_cold_us``, :func:`simulator.step_loop.first_cold_s`)."""
    data_s: float = 0.0
    """Time to read one step's samples from storage, seconds; prefetched behind compute."""


@dataclass(frozen=True, kw_only=True)
class StepWork:
    """The compiled step: per-stage work plus what the outputs need (tokens, FLOPs, memory)."""

    stages: tuple[StageWork, ...]
    strategy: Strategy
    """What the user asked for (stragglers, failures and PS mode are read from it by the DES)."""
    layout: ParallelLayout
    """The checked, derived layout: degrees, rank groups, micro-batches."""
    schedule: PipelineSchedule
    """The per-rank action lists every stage follows (the executor runs the same object)."""
    micro_batches: int
    tokens_per_step: int
    model_flops_per_step: float
    """Model FLOPs of the whole step, all GPUs (6·N·tokens + attention; no recompute)."""
    hardware_flops_per_step: float
    """FLOPs actually executed, recompute included."""
    world_size: int
    peak_flops_per_gpu: float
    """Peak FLOP/s of one device in the workload's compute dtype (for MFU/HFU)."""
    memory: "MemoryReport | None" = None
    """The memory report of this strategy, when the workload allows one."""
    host_bound: tuple[str, ...] = ()
    """Compute phases where some chunk's host time per kernel exceeds its device time
    (:mod:`simulator.host_overhead`): a small model on a fast device, or any model on a CPU process."""
    rank_factors: tuple[tuple[int, float], ...] = ()
    """(rank, compute-time multiplier) for every rank whose compute differs from the representative's
    on the cluster's device: another GPU generation, a slow GPU (:mod:`simulator.compile.device_factors`).
    Empty on a uniform cluster."""

    overlap_sm_fraction: float = 0.0
    """Fraction of the SMs an overlapped collective takes from the compute under it
    (:mod:`simulator.interference`: ``comm.collective_sms / device.sm_count``); 0: overlap is free."""

    def compute_factor(self, rank: int) -> float:
        """Compute-time multiplier of ``rank`` from the cluster's facts (1.0 unless listed)."""
        if not self.rank_factors:
            return 1.0
        table = self.__dict__.get("_factor_table")
        if table is None:
            table = dict(self.rank_factors)
            object.__setattr__(self, "_factor_table", table)
        return table.get(rank, 1.0)
