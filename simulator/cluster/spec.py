"""Cluster model: devices, links, nodes, host side, network and communication library.

Frozen, validated dataclasses; every number carries its unit in its name. Bandwidths are per
direction in decimal GB/s (1e9 bytes/s). Intra-node bandwidth is per GPU (its port into the
fabric); inter-node bandwidth is per NIC. The numbers of the embedded presets and their sources
live in ``presets/*.yaml``; this module holds no hardware constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from simulator.checks import non_negative_number, positive_int, positive_number
from simulator.cluster._crossfield import check_cluster, check_node
from simulator.cluster.kinds import Fabric, LinkKind  # noqa: F401 (re-exported)
from simulator.cluster.comm import (BusBwCap, CommLibrary, CommProfile, CpuVendor,  # noqa: F401 (re-exported)
                                   LinkClass, Protocol)
from simulator.cluster.facts import DegradedNic, NodeGroup, SlowGpu, check_facts, clipped
from simulator.dtypes import Dtype  # noqa: F401 (re-exported: the cluster's users name it here)
from simulator.errors import SpecError
from simulator.gemm_efficiency import MAMF_DTYPE, GemmCurve

if TYPE_CHECKING:
    from simulator.gemm_efficiency import GemmEfficiency


@dataclass(frozen=True, kw_only=True)
class Link:
    """One directional link type: its line rate, per-hop latency and achievable fraction."""

    kind: LinkKind
    """Physical kind; decides the latency class a communication library charges."""
    bw_GBps: float
    """Line bandwidth per direction, decimal GB/s (per GPU for intra-node, per NIC for network)."""
    latency_us: float
    """Latency of one hop over this link, microseconds."""
    efficiency: float = 1.0
    """Achievable fraction of ``bw_GBps`` (protocol and DMA overheads). 1.0 unless a source says."""

    def __post_init__(self) -> None:
        positive_number("bw_GBps", self.bw_GBps)
        non_negative_number("latency_us", self.latency_us)
        if not 0 < self.efficiency <= 1:
            raise SpecError("efficiency", f"must be in (0, 1], got {self.efficiency!r}")

    @property
    def bw_Bps(self) -> float:
        """Achievable bandwidth, bytes/s: ``bw_GBps × 1e9 × efficiency``."""
        return self.bw_GBps * 1e9 * self.efficiency

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6


@dataclass(frozen=True, kw_only=True)
class Device:
    """An accelerator (or a CPU process standing in for one)."""

    name: str
    peak_tflops: dict[Dtype, float]
    """Dense peak throughput per numeric format, TFLOP/s (1e12 FLOP/s)."""
    memory_bytes: int
    """Device memory capacity, bytes (datasheet GB × 1e9)."""
    hbm_bw_GBps: float
    """Device memory bandwidth, decimal GB/s (the datasheet figure)."""
    hbm_efficiency: float | None = None
    """Achievable fraction of ``hbm_bw_GBps`` for a streaming kernel: a published STREAM-like
    measurement on this GPU (BabelStream's Copy, one read and one write per element, as an elementwise
    layer norm, GELU, dropout or add kernel) over its datasheet figure [src: azure-ai-bench]. The
    roofline's memory term of every kernel runs at ``hbm_bw_GBps × hbm_efficiency``
    (:func:`simulator.compute.achievable_hbm_Bps`); a fraction, as a link's ``efficiency``, so a run on
    the same GPU with another memory (HBM2e H100, 40 GB A100) keeps it. None: the measured curve's
    ``gemm_efficiency.hbm_efficiency`` (1.0 unless measured: the datasheet)."""
    gemm_efficiency: "GemmEfficiency | None" = None
    """Achieved matmul efficiency against GEMM size (:mod:`simulator.gemm_efficiency`), measured;
    None: the default curve named by ``gemm_curve``."""
    gemm_curve: GemmCurve | None = None
    """Which published measurement the default curve comes from (its plateau over this device's BF16
    peak); None: the one the device's name suggests (a file written before the field)."""
    sm_count: int | None = None
    """Streaming multiprocessors (GPU compute units) that run a GEMM's thread blocks, for tile and
    wave quantisation (:mod:`simulator.gemm_shape`); None: GEMMs are timed by their FLOPs alone."""
    sustained_clock_ratio: float = 1.0
    """SM clock the device sustains in the run (its power limit, cooling) over the clock its matmul curve
    was measured at; it scales the compute term of every kernel, not HBM-bound time. 1.0: as measured —
    the MAMF plateaus were measured at each GPU's default power limit (the table notes e.g. GH200's 900 W
    [src: bekman-mle]); give less for a power-capped run."""
    kernel_launch_overhead_us: float = 0.0
    """Host time per kernel the compute model schedules that overlaps no kernel's execution, µs:
    framework dispatch, autograd bookkeeping and the launch itself. Every kernel of the workload's op
    list costs this on top of its roofline time (:func:`simulator.compute.kernel_time`). A CPU process
    runs its operators synchronously and pays it in full (``trainplan calibrate --compute`` measures
    it); a GPU's launches are asynchronous — control returns to the host before the kernel has run
    [src: nvidia-cuda-async] — so a host thread that runs ahead hides it: 0 in the GPU presets, whose
    GEMM curve's small-kernel fall-off carries what a short GEMM loses."""
    compute_capability: float | None = None
    """CUDA compute capability (7.0 V100, 8.0 A100, 8.9 L40S, 9.0 H100/H200, 10.0 B200) [src: nvidia-cuda-gpus]:
    the GPU generation NCCL's tuner keys its per-architecture tables by (``Protocol.bus_bw_cap``);
    None: not a CUDA GPU or not stated, no per-architecture figure applies."""

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("device.name", "must be a non-empty string")
        if self.sm_count is not None:
            positive_int("device.sm_count", self.sm_count)
        if self.compute_capability is not None:
            positive_number("device.compute_capability", self.compute_capability)
        if not 0 < self.sustained_clock_ratio <= 1:
            raise SpecError("device.sustained_clock_ratio", f"must be in (0, 1], got {self.sustained_clock_ratio!r}")
        non_negative_number("device.kernel_launch_overhead_us", self.kernel_launch_overhead_us)
        if not self.peak_tflops:
            raise SpecError("device.peak_tflops", "give at least one format, e.g. {bf16: 989}")
        for dtype, tflops in self.peak_tflops.items():
            positive_number(f"device.peak_tflops.{dtype.value}", tflops)
        positive_number("device.memory_GB", self.memory_bytes)
        positive_number("device.hbm_bw_GBps", self.hbm_bw_GBps)
        self._check_achievable_hbm()
        if self.gemm_curve is not None and not isinstance(self.gemm_curve, GemmCurve):
            raise SpecError("device.gemm_curve", f"must be a GemmCurve, got {self.gemm_curve!r}")
        if self.gemm_curve not in (None, GemmCurve.NONE) and MAMF_DTYPE not in self.peak_tflops:
            raise SpecError("device.peak_tflops", f"gemm_curve {self.gemm_curve.value!r} is relative to the "
                            f"{MAMF_DTYPE.value} peak; give peak_tflops.{MAMF_DTYPE.value}")

    def _check_achievable_hbm(self) -> None:
        if self.hbm_efficiency is None:
            return
        field = "device.hbm_efficiency"
        if not (isinstance(self.hbm_efficiency, (int, float)) and 0 < self.hbm_efficiency <= 1):
            raise SpecError(field, f"must be in (0, 1], got {self.hbm_efficiency!r}")
        if self.gemm_efficiency is not None and self.gemm_efficiency.hbm_efficiency != 1.0:
            raise SpecError(field, "the device also gives gemm_efficiency.hbm_efficiency; give one of the two")

    def peak_flops(self, dtype: Dtype) -> float:
        """Peak FLOP/s for ``dtype``; a format the device file does not list is an error."""
        if dtype not in self.peak_tflops:
            known = ", ".join(d.value for d in self.peak_tflops)
            raise SpecError("device.peak_tflops", f"no {dtype.value} figure for {self.name}; known: {known}")
        return self.peak_tflops[dtype] * 1e12


@dataclass(frozen=True, kw_only=True)
class HostSpec:
    """The host side of a node: what ZeRO-Offload/Infinity and the input pipeline need."""

    cpu_memory_bytes: int
    """Host DRAM per node, bytes."""
    h2d_bw_GBps: float
    """Host-to-device PCIe bandwidth per GPU, per direction, decimal GB/s."""
    h2d_latency_us: float
    """Latency of one host↔device PCIe hop, µs (also the staging hop without GPUDirect RDMA)."""
    nvme_bytes: int = 0
    """NVMe capacity per node for ZeRO-Infinity offload, bytes (0: none)."""
    nvme_read_GBps: float = 0.0
    """Aggregate NVMe read bandwidth per node, GB/s."""
    nvme_write_GBps: float = 0.0
    """Aggregate NVMe write bandwidth per node, GB/s."""
    cpu_adam_params_per_s: float = 0.0
    """CPU optimizer throughput per node, parameters updated per second (0: unknown)."""
    storage_read_GBps: float = 0.0
    """Read bandwidth from training-data storage per node, GB/s (0: unknown)."""
    cpu_vendor: CpuVendor | None = None
    """Host CPU vendor (NCCL's LL cap across nodes depends on it, ``Protocol.bus_bw_cap``); None: not
    stated, read as NCCL reads any host that is not AMD."""

    def __post_init__(self) -> None:
        positive_number("host.cpu_memory_GB", self.cpu_memory_bytes)
        positive_number("host.h2d_bw_GBps", self.h2d_bw_GBps)
        non_negative_number("host.h2d_latency_us", self.h2d_latency_us)
        for name in ("nvme_bytes", "nvme_read_GBps", "nvme_write_GBps", "cpu_adam_params_per_s",
                     "storage_read_GBps"):
            non_negative_number(f"host.{name}", getattr(self, name))


@dataclass(frozen=True, kw_only=True)
class PcieTree:
    """PCIe hierarchy inside a node (``Fabric.PCIE_TREE``, and the fallback path of a mesh)."""

    gpus_per_switch: int
    """GPUs under one PCIe switch (or directly under one root port when 1)."""
    switches_per_socket: int
    """PCIe switches under one CPU socket's root complex."""
    switch_uplink: Link
    """Link from a PCIe switch up to the root complex, per direction."""
    socket_link: Link
    """CPU socket-to-socket link (UPI/xGMI), per direction."""

    def __post_init__(self) -> None:
        positive_number("pcie_tree.gpus_per_switch", self.gpus_per_switch)
        positive_number("pcie_tree.switches_per_socket", self.switches_per_socket)

    def switch_of(self, local: int) -> int:
        return local // self.gpus_per_switch

    def socket_of(self, local: int) -> int:
        return self.switch_of(local) // self.switches_per_socket


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """One node: GPUs, how they are joined, NICs and the host side."""

    gpus_per_node: int
    fabric: Fabric
    intra_link: Link
    """Per-GPU link into the fabric (NVSwitch port, the GPU's PCIe x16, or one NVLink of a mesh)."""
    nics_per_node: int = 1
    pcie_tree: PcieTree | None = None
    """Required for ``PCIE_TREE``; for ``NVLINK_MESH`` it carries the pairs without NVLink."""
    nvlink_pairs: tuple[tuple[int, int, int], ...] = ()
    """For ``NVLINK_MESH``: (gpu a, gpu b, number of NVLinks) for each directly linked pair."""
    gpu_peer_to_peer: bool = True
    """GPU P2P over PCIe; off, PCIe-tree traffic is staged through host memory (through the root)."""
    host: HostSpec | None = None

    def __post_init__(self) -> None:
        positive_number("gpus_per_node", self.gpus_per_node)
        positive_number("inter_node.nics_per_node", self.nics_per_node)
        if self.fabric in (Fabric.PCIE_TREE, Fabric.NVLINK_MESH) and self.pcie_tree is None:
            raise SpecError("intra_node.pcie_tree", f"fabric {self.fabric.value} needs a pcie_tree section")
        for a, b, links in self.nvlink_pairs:
            if not (0 <= a < self.gpus_per_node and 0 <= b < self.gpus_per_node and a != b):
                raise SpecError("intra_node.nvlink_pairs", f"pair ({a}, {b}) is not two GPUs of the node")
            positive_number("intra_node.nvlink_pairs links", links)
        check_node(self)

    def nic_of(self, local: int) -> int:
        """NIC used by GPU ``local``: GPUs spread evenly over NICs (GPU i → NIC i·nics/gpus)."""
        return local * self.nics_per_node // self.gpus_per_node

    def nvlinks_between(self, a: int, b: int) -> int:
        for x, y, links in self.nvlink_pairs:
            if {x, y} == {a, b}:
                return links
        return 0


class LeafUplinks(Enum):
    """How traffic between leaf switches shares the leaf-to-spine uplinks (``inter_node.leaf_uplinks``)."""

    PER_NIC = "per_nic"
    """Each NIC has its own share of its leaf's uplinks, ``bw / oversubscription``, whatever the other
    NICs do: a static cap, so traffic of other nodes (other jobs) under the leaf never slows it."""
    SHARED = "shared"
    """A leaf's uplinks are one resource per direction of ``ports × bw / oversubscription`` (ports: the
    NIC ports under the leaf), shared max-min fairly by every flow leaving (entering) the leaf: a flow
    alone runs at its NIC's rate, flows of several nodes or jobs crossing the spine together share it."""


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    """The inter-node network."""

    link: Link
    """One NIC port, per direction."""
    rail_optimized: bool = True
    """NIC i of every node on leaf switch i: same-rail traffic crosses one switch."""
    oversubscription: float = 1.0
    """Leaf-to-spine oversubscription ratio; traffic between leaf groups gets ``bw / ratio``."""
    nodes_per_leaf: int = 0
    """Nodes under one leaf group (0: all nodes under one leaf tier, no spine crossing)."""
    gpudirect_rdma: bool = True
    """NIC reads/writes GPU memory directly; off, traffic is staged through host memory."""
    leaf_uplinks: LeafUplinks = LeafUplinks.PER_NIC
    """Whether traffic between leaves has a per-NIC share of the uplinks or shares them as one resource."""

    def __post_init__(self) -> None:
        if self.oversubscription < 1:
            raise SpecError("inter_node.oversubscription", f"must be >= 1, got {self.oversubscription!r}")
        non_negative_number("inter_node.nodes_per_leaf", self.nodes_per_leaf)
        if not isinstance(self.leaf_uplinks, LeafUplinks):
            raise SpecError("inter_node.leaf_uplinks", f"must be a LeafUplinks, got {self.leaf_uplinks!r}")
        if self.leaf_uplinks is LeafUplinks.SHARED and not self.nodes_per_leaf:
            raise SpecError("inter_node.leaf_uplinks", "shared uplinks need the leaves: give nodes_per_leaf > 0")


MAX_WORLD_SIZE = 100_000
"""The most GPUs a cluster may have (12,500 eight-GPU nodes): a guard against typos, not a physical
limit. Estimates cost time and memory that grow faster than the GPU count (measured 2026-11-23 on the
2-core CI VM: ``trainplan collective --cluster dgx-h100 --nodes 512 --bytes 1GiB``, 4,096 ranks, took
23–28 s), so ``--nodes 1000000000`` (8 billion GPUs) is refused at once rather than run out of memory."""


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """A whole cluster: ``nodes`` identical nodes on a network, and how ranks are placed."""

    name: str
    nodes: int
    device: Device
    node: NodeSpec
    network: NetworkSpec | None = None
    """Required when ``nodes > 1``."""
    comm: CommProfile = field(default_factory=CommProfile)
    in_switch_reduction: bool = False
    """NVLS / SHARP available (NVSwitch 3+ multicast, or SHARP-capable IB switches)."""
    source: str = ""
    """Where the numbers come from (datasheets, measurements)."""
    description: str = ""
    """One line saying what the cluster is (``trainplan cluster list`` shows it)."""
    node_groups: tuple[NodeGroup, ...] = ()
    """Nodes that carry another device than ``device`` (:mod:`simulator.cluster.facts`)."""
    degraded_nics: tuple[DegradedNic, ...] = ()
    """NICs that run at a fraction of the network link's bandwidth."""
    slow_gpus: tuple[SlowGpu, ...] = ()
    """GPUs that deliver a fraction of their device's throughput."""

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("name", "must be a non-empty string")
        positive_int("nodes", self.nodes)
        if self.world_size > MAX_WORLD_SIZE:
            raise SpecError("nodes", f"{self.nodes} nodes × {self.node.gpus_per_node} GPUs = {self.world_size:,} GPUs, "
                                     f"more than the limit of {MAX_WORLD_SIZE:,}")
        if self.nodes > 1 and self.network is None:
            raise SpecError("inter_node", f"a cluster of {self.nodes} nodes needs an inter_node section")
        check_cluster(self)
        if self.varies:
            check_facts(self.node_groups, self.degraded_nics, self.slow_gpus, self.fabric_nodes,
                        self.node.gpus_per_node, self.node.nics_per_node)

    @property
    def varies(self) -> bool:
        """Whether any node differs from the others (another device, a degraded NIC, a slow GPU)."""
        return bool(self.node_groups or self.degraded_nics or self.slow_gpus)

    @property
    def fabric_nodes(self) -> int:
        """Nodes of the whole cluster, which node indices in the facts refer to (a job's view has fewer)."""
        return self.nodes

    def device_of_node(self, node: int) -> Device:
        """The device of cluster node ``node``: its group's, else the cluster's."""
        for g in self.node_groups:
            if g.holds(node):
                return g.device
        return self.device

    def gpu_speed(self, node: int, gpu: int) -> float:
        """Fraction of its device's throughput GPU ``gpu`` of node ``node`` delivers (1.0 unless slow)."""
        return next((f.speed_fraction for f in self.slow_gpus if (f.node, f.gpu) == (node, gpu)), 1.0)

    def nic_fraction(self, node: int, nic: int) -> float:
        """Fraction of the network link's bandwidth NIC ``nic`` of node ``node`` runs at (1.0 unless degraded)."""
        return next((f.bw_fraction for f in self.degraded_nics if (f.node, f.nic) == (node, nic)), 1.0)

    @property
    def world_size(self) -> int:
        return self.nodes * self.node.gpus_per_node

    def place(self, rank: int) -> tuple[int, int]:
        """Rank → (node, local GPU index). Ranks fill a node before the next (torchrun's order)."""
        if not 0 <= rank < self.world_size:
            raise SpecError("ranks", f"rank {rank} is outside the cluster's {self.world_size} GPUs")
        return divmod(rank, self.node.gpus_per_node)

    def with_nodes(self, nodes: int) -> "Cluster":
        """The same cluster with ``nodes`` nodes (the facts about nodes it no longer has dropped)."""
        from dataclasses import replace

        if not self.varies:
            return replace(self, nodes=nodes)
        groups, nics, gpus = clipped(self.node_groups, self.degraded_nics, self.slow_gpus, nodes)
        return replace(self, nodes=nodes, node_groups=groups, degraded_nics=nics, slow_gpus=gpus)
