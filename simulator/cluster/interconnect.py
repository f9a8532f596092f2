"""How a cluster's GPUs are joined: inside a node (NVSwitch, NVLink mesh, PCIe tree) and between nodes.

:class:`NodeSpec` is one node (its GPUs' fabric, NICs, host side); :class:`PcieTree` its PCIe
hierarchy; :class:`NetworkSpec` the inter-node network (rails, leaf/spine oversubscription, how leaf
uplinks are shared). Intra-node bandwidth is per GPU (its port into the fabric); inter-node bandwidth
is per NIC. The links themselves are :class:`simulator.cluster.hardware.Link`.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.checks import non_negative_number, positive_number
from simulator.cluster._crossfield import check_node
from simulator.cluster.hardware import HostSpec, Link
from simulator.cluster.kinds import Fabric
from simulator.enum_kind import Kind
from simulator.errors import SpecError


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


class LeafUplinks(Kind):
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
