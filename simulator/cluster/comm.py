"""The communication library's per-message costs: latency classes, NCCL-style protocols, call overheads.

Kept apart from the hardware (:mod:`simulator.cluster.hardware`): the same links cost differently
under NCCL (protocols LL / LL128 / Simple, ``src/graph/tuning.cc``), gloo or MPI (a per-call
overhead, measured by ``trainplan calibrate``), or the IDEAL profile (the links exactly as given).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.checks import non_negative_number, positive_number
from simulator.cluster.core_wait import at_processes_s, call_wait_s, check_per_group, check_per_processes
from simulator.collectives.base import Op
from simulator.enum_kind import Kind
from simulator.errors import SpecError


class LinkClass(Kind):
    """Latency classes of NCCL's tuning model (per-hop latency differs by class)."""

    NVLINK = "nvlink"
    """NVLink or NVSwitch hop."""
    PCIE = "pcie"
    """PCIe (or host-memory) hop inside a node."""
    NET = "net"
    """Network hop between nodes."""


class CpuVendor(Kind):
    """Host CPU vendor, as NCCL's tuner tells hosts apart (``NCCL_TOPO_CPU_VENDOR_*``): across nodes its
    LL bandwidth cap is read from the AMD row on AMD hosts and from the other row on any other host."""

    INTEL = "intel"
    """Intel Xeon."""
    AMD = "amd"
    """AMD EPYC."""
    OTHER = "other"
    """Any other (Arm, POWER, ...): NCCL reads the same row as for Intel."""


@dataclass(frozen=True, kw_only=True)
class BusBwCap:
    """The most bus bandwidth a protocol reaches, whatever the links: NCCL's ``llMaxBws`` for LL.

    NCCL's tuner (``src/graph/tuning.cc``, ``ncclTopoTuneModel``) sets LL's bus bandwidth to
    ``min(llMaxBw, busBw × ratio)`` for the ring and the tree [src: nccl-llmaxbw]. ``llMaxBw`` is read
    from a row chosen by the GPU generation on one node (compute capability ≥ 10, ≥ 9, ≥ 8, else the
    Volta row) and by the host CPU vendor across nodes ("for multi-node, we look at CPU type"), in a
    column for 1 node, 2 nodes or more. The caps below are that table as data; the collectives apply
    them in :meth:`simulator.collectives.cost.Env.bw_ratio`.
    """

    one_node_GBps: tuple[tuple[float, float], ...]
    """``(minimum compute capability, cap GB/s)`` pairs in increasing capability: a group on one node
    is capped by the last pair whose capability the device reaches."""
    two_nodes_GBps: dict[CpuVendor, float]
    """Cap for a group on two nodes, by host CPU vendor (a vendor not listed: the ``OTHER`` figure)."""
    more_nodes_GBps: dict[CpuVendor, float]
    """Cap for a group on three or more nodes, by host CPU vendor (not listed: ``OTHER``)."""

    def __post_init__(self) -> None:
        capabilities = [cc for cc, _ in self.one_node_GBps]
        if capabilities != sorted(capabilities):
            raise SpecError("comm.protocols.bus_bw_cap_GBps.one_node", "list compute capabilities in increasing order")
        for cc, cap in self.one_node_GBps:
            non_negative_number("comm.protocols.bus_bw_cap_GBps.one_node", cc)
            positive_number("comm.protocols.bus_bw_cap_GBps.one_node", cap)
        for name in ("two_nodes_GBps", "more_nodes_GBps"):
            table = getattr(self, name)
            if CpuVendor.OTHER not in table:
                raise SpecError(f"comm.protocols.bus_bw_cap_GBps.{name[:-5]}", "give the 'other' vendor's figure")
            for cap in table.values():
                positive_number(f"comm.protocols.bus_bw_cap_GBps.{name[:-5]}", cap)

    def cap_GBps(self, nodes: int, compute_capability: float | None, cpu_vendor: CpuVendor | None) -> float | None:
        """The cap for a group spread over ``nodes`` nodes; None where the table has no row for the
        device (one node, compute capability unknown or below every listed one)."""
        if nodes >= 2:
            table = self.two_nodes_GBps if nodes == 2 else self.more_nodes_GBps
            return table.get(cpu_vendor, table[CpuVendor.OTHER])
        if compute_capability is None:
            return None
        reached = [cap for cc, cap in self.one_node_GBps if compute_capability >= cc]
        return reached[-1] if reached else None


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
class Protocol:
    """One NCCL protocol: its latencies and achievable fraction of bus bandwidth."""

    name: str
    base_latency_us: dict[str, float]
    """Fixed cost per collective call by algorithm family (``ring``, ``tree``, ``nvls``), µs."""
    hop_latency_us: dict[LinkClass, float]
    """Latency per hop by link class, µs; replaces the links' own latency_us."""
    bw_factor: float
    """Fraction of the link bandwidth this protocol achieves (LL 0.5, LL128 ≈ 0.92, Simple 1)."""
    algo_hop_latency_us: dict[str, dict[LinkClass, float]] = field(default_factory=dict)
    """Per-algorithm overrides of ``hop_latency_us`` (NCCL's tree and NVLS hop latencies differ
    from the ring's, ``tuning.cc`` hwLat); a class not listed falls back to ``hop_latency_us``."""

    algo_bw_factor: dict[str, float] = field(default_factory=dict)
    """Per-algorithm ratio applied on top of ``bw_factor`` (NCCL's tuner models tree all-reduce at
    half the bus bandwidth: ``tuning.cc``, "ratio = .5" for non-ring algorithms); absent means 1."""

    algo_efficiency: dict[str, float] = field(default_factory=dict)
    """Per-algorithm replacement of ``bw_factor``: the fraction of the bus bandwidth this protocol
    reaches under that algorithm, before ``algo_bw_factor`` converts bus to algorithm bandwidth; absent
    means ``bw_factor``. NCCL's tree all-reduce (``ncclTopoTuneModel``: ``busBw × .92`` for every
    protocol, then LL ``× 1/3.8``, LL128 ``× 120/128`` across nodes): Simple 0.92, LL 0.242, LL128
    0.8625 [src: nccl-tree-bw]. The bus-bandwidth cap applies to this fraction (:meth:`efficiency`)."""

    step_bytes: int | None = None
    """Largest pipeline chunk of payload, bytes: one step of the protocol's FIFO buffer (NCCL:
    ``buffSize / NCCL_STEPS``, :mod:`simulator.cluster.nccl`); None: no bound (a chunk may be any size)."""

    fifo_steps: int = 1
    """Chunks a sender may have in flight on one connection before the receiver frees a slot (NCCL:
    ``NCCL_STEPS`` = 8); a pipeline's per-chunk latency overlaps across them, so each chunk after
    the first pays ``α / fifo_steps`` (cost.py ``Env.best_pipeline``). 1: store-and-forward."""

    bus_bw_cap: BusBwCap | None = None
    """The most bus bandwidth this protocol reaches on a group (NCCL: ``llMaxBws`` for LL); None: no cap."""
    net_post_overhead_us: dict[CpuVendor, float] = field(default_factory=dict)
    """Host time to post one network message, µs, by host CPU vendor (a vendor not listed: ``OTHER``;
    empty: none). A rank that sends or receives ``k`` network messages in one step posts them one after
    another, so that step's network edges wait ``(k − 1)`` of these (cost.py ``Env.edges``). NCCL:
    ``getNetOverhead`` in ``tuning.cc``, 1 µs on Intel, 2 µs on AMD, × 3 under Simple [src: nccl-net-overhead]."""

    def net_post_overhead_s(self, cpu_vendor: CpuVendor | None) -> float:
        """Seconds to post one network message on a host of ``cpu_vendor`` (None: ``OTHER``)."""
        table = self.net_post_overhead_us
        if not table:
            return 0.0
        return table.get(cpu_vendor, table.get(CpuVendor.OTHER, 0.0)) * 1e-6

    @property
    def chunk_latency_share(self) -> float:
        """Fraction of a hop's latency each further pipeline chunk pays: ``1 / fifo_steps``."""
        return 1.0 / self.fifo_steps

    def __post_init__(self) -> None:
        if not isinstance(self.fifo_steps, int) or isinstance(self.fifo_steps, bool) or self.fifo_steps < 1:
            raise SpecError("comm.protocols.fifo_steps", f"must be a positive integer, got {self.fifo_steps!r}")
        for algorithm, fraction in self.algo_efficiency.items():
            if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction <= 1:
                raise SpecError(f"comm.protocols.algo_efficiency.{algorithm}", f"must be in (0, 1], got {fraction!r}")
        for vendor, us in self.net_post_overhead_us.items():
            non_negative_number(f"comm.protocols.net_post_overhead_us.{vendor.value}", us)
        if self.step_bytes is not None and (not isinstance(self.step_bytes, int) or self.step_bytes < 1):
            raise SpecError("comm.protocols.step_bytes", f"must be a positive integer or absent, got {self.step_bytes!r}")

    def efficiency(self, algorithm: str | None) -> float:
        """Fraction of the bus bandwidth ``algorithm`` reaches under this protocol (``algo_efficiency``,
        else ``bw_factor``): what the protocol's bus-bandwidth cap is compared with."""
        return self.algo_efficiency.get(algorithm, self.bw_factor) if algorithm else self.bw_factor

    def bw_ratio(self, algorithm: str | None) -> float:
        """Fraction of link bandwidth ``algorithm`` achieves under this protocol:
        ``efficiency × algo_bw_factor`` (bus to algorithm bandwidth)."""
        return self.efficiency(algorithm) * self.algo_bw_factor.get(algorithm, 1.0) if algorithm else self.bw_factor

    def hop_latency(self, algorithm: str, link_class: LinkClass) -> float:
        """Per-hop latency in µs for ``algorithm`` (``ring``, ``tree``, ``nvls``) over ``link_class``."""
        return self.algo_hop_latency_us.get(algorithm, {}).get(link_class, self.hop_latency_us[link_class])


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

