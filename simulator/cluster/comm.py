"""The communication library's per-message costs: call overheads, waits for a core, the protocol table it holds.

Kept apart from the hardware (:mod:`simulator.cluster.hardware`): the same links cost differently
under NCCL (protocols LL / LL128 / Simple, ``src/graph/tuning.cc``), gloo or MPI (a per-call
overhead, measured by ``trainplan calibrate``), or the IDEAL profile (the links exactly as given). The
protocols themselves and the latency classes and CPU vendors they are keyed by: :mod:`simulator.cluster.protocol`.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.checks import non_negative_number
from simulator.cluster.core_wait import at_processes_s, call_wait_s, check_per_group, check_per_processes
from simulator.cluster.protocol import BusBwCap, CpuVendor, LinkClass, Protocol
from simulator.collectives.base import Op
from simulator.enum_kind import Kind
from simulator.errors import SpecError

# CommLibrary and CommProfile are this module's; the protocol's names are re-exported (spec.py imports them here)
__all__ = ["BusBwCap", "CommLibrary", "CommProfile", "CpuVendor", "LinkClass", "Protocol"]


class CommLibrary(Kind):
    """Communication library whose per-message costs a cluster is modelled with."""

    IDEAL = "ideal"
    """No library overhead: pure α-β on the links as given (a user's own file by default)."""
    NCCL = "nccl"
    """NVIDIA NCCL with its LL / LL128 / Simple protocols (``src/graph/tuning.cc``)."""
    GLOO = "gloo"
    """PyTorch's Gloo (CPU, TCP); per-call overhead measured by ``trainplan calibrate``."""
    MPI = "mpi"
    """An MPI library; a per-call overhead, no protocol switching."""

    @property
    def fuses_reduction(self) -> bool:
        """True when reductions run inside the copy kernels while data streams over the link.

        NCCL reduces in its reduce-copy primitives (``src/device/prims_*.h``, ``reduce_kernel.h``):
        the sum of an incoming chunk is computed as it arrives, so the γ term overlaps the transfer.
        Gloo and MPI reduce on the host after receiving, so their γ adds to the transfer time.
        """
        return self is CommLibrary.NCCL

    def overlaps_reduction(self, pipelined: bool) -> bool:
        """True when only the reduction's excess over the link shows (:meth:`Env.gamma_s`).

        NCCL: always (:attr:`fuses_reduction`). IDEAL (pure α-β, a user's own file): in pipelined
        algorithms (ring, tree, chain): the reduction of one chunk runs while the next chunk
        crosses the link, as NCCL's reduce-copy primitives do [src: nccl-prims], so a ring
        all-reduce follows the α-β closed form exactly unless the device reduces slower than the
        link moves bytes. Gloo and MPI reduce on the host after receiving: never.
        """
        return self.fuses_reduction or (pipelined and self is CommLibrary.IDEAL)


@dataclass(frozen=True, kw_only=True)
class CommProfile:
    """Per-message overheads of the communication library."""

    library: CommLibrary = CommLibrary.IDEAL
    call_latency_us: float = 0.0
    """Fixed cost per collective call when the library has no protocol table, µs."""
    replay_step_us: float = 0.0
    """Host time of one step of a collective replayed as its schedule's point-to-point sends and receives by a
    host loop (the executor's replay, ``executor/p2p.py``: post the step's ``isend``/``irecv``, wait for them,
    apply the received bytes), beyond the step's hop latency and bytes, µs; what a replayed call costs more
    than the library's own call of the same algorithm (:mod:`simulator.collectives.replayed`). Measured by
    ``trainplan calibrate`` (ring all-reduce replays beside the native calls); 0: not measured, no extra cost."""
    blocking_wait_us: tuple[tuple[int, float], ...] = ()
    """Expected wait for a core per blocking library call, µs, by the node's process count: ``((processes, µs),
    ...)`` in increasing process count (file form: a mapping ``{2: 760.0, 3: 2120.0}``). A call on a node whose
    processes outnumber or crowd its cores sometimes waits a scheduler tick before it runs (gloo over loopback on
    the 2-core VM: 20 % of small calls at 2 processes, 78 % at 4, each ~4 ms [src: own-gloo-blocking-wait-2026-11-25]),
    so a call costs its α-β time plus this expectation (:meth:`blocking_wait_s`; read only for a loopback node
    without a protocol, gloo on one host: a library with a protocol table, NCCL, never pays it;
    :attr:`simulator.collectives.cost.Env.blocking_wait_s`). Measured by ``trainplan calibrate`` as the mean
    excess of the calls over the fast-mode fit (:mod:`executor.calibrate_modes`); empty on every preset: no wait."""
    op_wait_us: tuple[tuple[Op, tuple[tuple[int, float], ...]], ...] = ()
    """The expected wait for a core of one blocking call of a given op, µs, by the node's process count, for the ops
    measured on their own: ``((op, ((processes, µs), ...)), ...)`` (file form: ``{all-reduce: {2: 1330.0}, broadcast:
    {2: 90.0}}``); such an op pays its own table instead of :attr:`blocking_wait_us` (:meth:`blocking_wait_s`). The
    waits differ by op: on the quiet 2-core VM (six sets of calls up to 256 KiB) at 2 / 3 / 4 processes a native
    all-reduce waited 0.7-1.5 / 1.5-2.2 / 3.6-4.8 ms per call on average, an all-gather 0.4-1.0 / 1.7-2.1 / 3.0-4.0 ms,
    a broadcast 0.0-0.4 / 0.4-0.8 / 0.8-1.2 ms [src: own-gloo-op-waits-2026-11-25]. Measured by ``trainplan calibrate`` for its fitted series and its broadcast
    probe (:mod:`executor.calibrate_modes`); empty on every preset."""
    group_wait_us: tuple[tuple[int, tuple[tuple[int, float], ...]], ...] = ()
    """The expected wait for a core of one blocking call by a group smaller than the node's processes, µs, by group
    size and the node's process count: ``((group size, ((processes, µs), ...)), ...)`` (file form: ``{2: {4: 650.0}}``,
    every process count above its group size). A pair on a 4-process node waits about what it waits at 2 processes,
    not the 4-process group's :attr:`blocking_wait_us` [src: own-gloo-pair-wait-2026-11-25]; how a call reads it, and
    what a size not measured pays: :mod:`simulator.cluster.core_wait`. Measured by ``trainplan calibrate`` for pairs
    (:mod:`executor.calibrate_groups`); empty on every preset."""
    async_broadcast_us: tuple[tuple[int, float], ...] = ()
    """Mean time per call of a batch of small broadcasts issued with ``async_op=True`` by their owners and then all
    waited, µs, by the node's process count (file form as ``blocking_wait_us``): torch ``ZeroRedundancyOptimizer``'s
    parameter sync after its step (``_sync_params``, ``torch/distributed/optim/zero_redundancy_optimizer.py``, torch
    2.13, lines 760-827 [src: torch-zero1-broadcasts]). It replaces such a call's fixed cost (library call, hops and
    waits for a core together), which differs from a blocking call's: the batch's calls queue on gloo's worker
    threads, on the 2-core VM 0.28-0.53 ms per call at 2 processes against 1.1 ms for a blocking call's fast time
    plus ``W(2)`` [src: own-gloo-async-broadcast-2026-11-25] (:meth:`async_broadcast_s`,
    :func:`simulator.compile.comm_part.torch_zero1_broadcasts`). Empty on every preset: such a batch costs its calls'
    blocking estimates."""
    dtensor_wait_us: tuple[tuple[int, float], ...] = ()
    """The expected wait for a core of one collective that torch tensor parallelism's DTensor issues inside the tp
    model's forward, backward or optimizer step (a functional collective waited at its result's first use), µs, by
    the node's process count, every tp group a pair (file form as :attr:`blocking_wait_us`). It replaces the op's
    sweep wait (:meth:`blocking_wait_s`) for those calls at the counts it covers: the sweep's small calls share
    rounds with 1-4 MiB calls, after which they wait longer than calls between the tp model's compute do
    (:mod:`simulator.cluster.dtensor_wait`) [src: own-dtensor-wait-2026-11-25]. Measured by ``trainplan calibrate``
    in the executor's tp model (:mod:`executor.calibrate_dtensor`); empty on every preset."""
    dtensor_sp_wait_us: tuple[tuple[int, float], ...] = ()
    """:attr:`dtensor_wait_us` of the tp model with sequence parallelism, whose forward and backward calls wait less
    (read for them instead where given; the optimizer's all-reduces of the norms' gradients read
    :attr:`dtensor_wait_us`) [src: own-dtensor-wait-2026-11-25]; empty on every preset."""
    fsdp2_wait_us: tuple[tuple[int, float], ...] = ()
    """The expected wait of one of FSDP2's blocking collectives (its parameter all-gathers and gradient
    reduce-scatters) inside the FSDP2 model's micro-batches, µs, by the node's process count, the FSDP2 group a pair
    (file form as :attr:`blocking_wait_us`). It replaces the op's sweep wait for those calls at the counts it covers:
    each call follows a module's compute and waits for the slower rank, which back-to-back calls do not
    (:mod:`simulator.cluster.fsdp2_wait`) [src: own-fsdp2-wait-2026-11-26]. Measured by ``trainplan calibrate`` in
    the executor's FSDP2 models (:mod:`executor.calibrate_fsdp2`); empty on every preset."""
    protocols: tuple[Protocol, ...] = ()
    """NCCL-style protocols; empty means one protocol with the links' own latency and bandwidth."""
    collective_sms: int = 0
    """SMs a collective kernel occupies while it runs, taken from the compute it overlaps: NCCL runs
    one CUDA block per channel ("reducing the number of channels also reduces the number of CUDA
    blocks used for communication, hence the impact on GPU computing resources", NCCL_MAX_NCHANNELS
    [src: nccl-env]), so the channel count NCCL picks on the node. 0: overlapped communication
    is free (:mod:`simulator.interference`)."""

    def __post_init__(self) -> None:
        non_negative_number("comm.call_latency_us", self.call_latency_us)
        non_negative_number("comm.replay_step_us", self.replay_step_us)
        for name in ("blocking_wait_us", "async_broadcast_us", "dtensor_wait_us",
                     "dtensor_sp_wait_us", "fsdp2_wait_us"):
            check_per_processes(f"comm.{name}", getattr(self, name))
        ops = [op for op, _ in self.op_wait_us]
        if len(set(ops)) != len(ops) or not all(isinstance(op, Op) for op in ops):
            raise SpecError("comm.op_wait_us", "give each collective op once, e.g. {all-reduce: {2: 1330.0}}")
        for op, table in self.op_wait_us:
            check_per_processes(f"comm.op_wait_us.{op.value}", table)
        check_per_group("comm.group_wait_us", self.group_wait_us)
        if not isinstance(self.collective_sms, int) or isinstance(self.collective_sms, bool) \
                or self.collective_sms < 0:
            raise SpecError("comm.collective_sms", f"must be a whole number >= 0, got {self.collective_sms!r}")

    def blocking_wait_s(self, processes: int, op: Op | None = None, group_size: int | None = None) -> float:
        """Expected wait of one blocking call of ``op`` by a ``group_size``-rank group (None: all the node's) on a node
        of ``processes`` processes, seconds: the op's own :attr:`op_wait_us` table where it has one, else
        :attr:`blocking_wait_us`, read at that count; a smaller group of a measured size reads :attr:`group_wait_us`
        (:func:`simulator.cluster.core_wait.call_wait_s`, the rule's one home). Between two measured counts the
        straight line through them; outside them the nearest measured count's (a count above the largest measured is
        not extrapolated: measure it with ``trainplan calibrate --nproc``); 0 where nothing is measured. E.g.
        ``((2, 760), (4, 3700))``: 3 processes wait 2230 µs, 8 processes 3700 µs."""
        own = dict(self.op_wait_us).get(op) if op is not None else None
        return call_wait_s(self.blocking_wait_us if own is None else own, self.group_wait_us, processes, group_size)

    def async_broadcast_s(self, processes: int) -> float | None:
        """Fixed cost of one broadcast of an asynchronous batch on a node of ``processes`` processes, seconds
        (:attr:`async_broadcast_us`, read between and beyond measured counts as :meth:`blocking_wait_s`); None where
        nothing is measured."""
        return at_processes_s(self.async_broadcast_us, processes) if self.async_broadcast_us else None

