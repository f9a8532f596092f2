"""The kinds of link and of node fabric a cluster is made of (enums; re-exported by
:mod:`simulator.cluster.spec`, kept apart so that the cross-field rules can name them without a cycle)."""

from __future__ import annotations


from simulator.cluster.comm import LinkClass
from simulator.enum_kind import Kind


class LinkKind(Kind):
    """Physical kind of a link; it decides which latency class a communication library charges."""

    NVLINK = "nvlink"
    """Direct GPU-to-GPU NVLink between a pair of GPUs (no switch)."""
    NVSWITCH = "nvswitch"
    """NVLink into an NVSwitch: full bisection, any GPU pair at the full per-GPU bandwidth."""
    PCIE = "pcie"
    """PCI Express: GPU to PCIe switch / root complex, or host-to-device copies."""
    SOCKET = "socket"
    """CPU socket-to-socket link (Intel UPI, AMD xGMI) crossed by PCIe traffic between sockets."""
    INFINIBAND = "infiniband"
    """InfiniBand NIC port (EDR/HDR/NDR/XDR)."""
    ROCE = "roce"
    """RDMA over Converged Ethernet v2 NIC port."""
    ETHERNET = "ethernet"
    """Plain TCP/IP Ethernet NIC port (no RDMA)."""
    LOOPBACK = "loopback"
    """Processes on one host talking over loopback TCP or shared memory (the localhost-cpu preset)."""

    @property
    def latency_class(self) -> "LinkClass":
        """NCCL's three latency classes (``src/graph/tuning.cc``: NVLink, PCI, NET)."""
        if self in (LinkKind.NVLINK, LinkKind.NVSWITCH):
            return LinkClass.NVLINK
        if self in (LinkKind.PCIE, LinkKind.SOCKET, LinkKind.LOOPBACK):
            return LinkClass.PCIE
        return LinkClass.NET


class Fabric(Kind):
    """How the GPUs inside one node are connected."""

    SWITCHED = "switched"
    """Full-bisection switch (NVSwitch, or loopback for CPU processes): every GPU pair gets the
    full per-GPU link bandwidth; a GPU's port is shared by all its concurrent transfers."""
    PCIE_TREE = "pcie_tree"
    """GPUs under PCIe switches, switches under the CPU sockets' root complexes, sockets joined
    by a socket link; traffic between switches crosses the switch uplinks (and the socket link)."""
    NVLINK_MESH = "nvlink_mesh"
    """Direct NVLink between listed GPU pairs (DGX-1 hybrid cube-mesh); other pairs use PCIe."""
