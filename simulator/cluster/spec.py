"""Cluster model: the whole cluster, its nodes, network and communication library, and rank placement.

Frozen, validated dataclasses; every number carries its unit in its name. Bandwidths are per
direction in decimal GB/s (1e9 bytes/s). Intra-node bandwidth is per GPU (its port into the
fabric); inter-node bandwidth is per NIC. The numbers of the embedded presets and their sources
live in ``presets/*.yaml``; this module holds no hardware constants.

:class:`Cluster` lives here; its parts live in :mod:`simulator.cluster.hardware` (``Link``,
``Device``, ``HostSpec``), :mod:`simulator.cluster.interconnect` (``NodeSpec``, ``PcieTree``,
``NetworkSpec``, ``LeafUplinks``) and :mod:`simulator.cluster.comm` (protocols, libraries), and are
re-exported here, the import path the rest of the code uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.checks import positive_int
from simulator.cluster._crossfield import check_cluster
from simulator.cluster.kinds import Fabric, LinkKind  # noqa: F401 (re-exported)
from simulator.cluster.comm import (BusBwCap, CommLibrary, CommProfile, CpuVendor,  # noqa: F401 (re-exported)
                                   LinkClass, Protocol)
from simulator.cluster.facts import DegradedNic, NodeGroup, SlowGpu, check_facts, clipped
from simulator.cluster.hardware import Device, HostSpec, KernelDispatch, Link  # noqa: F401 (re-exported)
from simulator.cluster.interconnect import (LeafUplinks, NetworkSpec, NodeSpec,  # noqa: F401 (re-exported)
                                           PcieTree)
from simulator.dtypes import Dtype  # noqa: F401 (re-exported: the cluster's users name it here)
from simulator.errors import SpecError


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
