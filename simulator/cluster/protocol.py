"""NCCL-style protocol tables and the enums they are keyed by: latency classes of a hop, host CPU vendors.

:class:`Protocol` is one NCCL protocol (LL / LL128 / Simple, ``src/graph/tuning.cc``): its base and per-hop
latencies, its achievable fraction of the bus bandwidth per algorithm, its pipeline step and FIFO depth;
:class:`BusBwCap` is NCCL's ``llMaxBws`` table of LL's bus-bandwidth cap. The library profile that holds a
protocol table, :class:`simulator.cluster.comm.CommProfile`, lives in :mod:`simulator.cluster.comm`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.checks import non_negative_number, positive_number
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
