"""The links a path between nodes crosses besides the intra-node fabric: a NIC's own link (a degraded NIC's
fraction of it), the leaf uplinks (one per NIC, or a leaf's as one shared link), and the host staging hop
without GPUDirect RDMA; and which transfers cross a leaf. :mod:`simulator.cluster.topology` builds the paths
from them (its docstring gives the path model).
"""

from __future__ import annotations

from functools import lru_cache

from simulator.cluster.spec import Cluster, Link, LinkKind, NetworkSpec
from simulator.errors import SpecError


def nic_link(cluster: Cluster, node: int, nic: int) -> Link:
    """The NIC's link: the network's, or a degraded NIC's fraction of it (``Cluster.degraded_nics``)."""
    link = cluster.network.link
    if not cluster.degraded_nics:
        return link
    fraction = cluster.nic_fraction(node, nic)
    return link if fraction == 1.0 else _scaled(link, fraction)


@lru_cache(maxsize=64)
def _scaled(link: Link, fraction: float) -> Link:
    """``link`` at ``fraction`` of its bandwidth (one object per degraded NIC)."""
    return Link(kind=link.kind, bw_GBps=link.bw_GBps * fraction, latency_us=link.latency_us,
                efficiency=link.efficiency)


@lru_cache(maxsize=16)
def leaf_uplink(net: NetworkSpec) -> Link:
    """A leaf's uplink: the NIC link's bandwidth divided by the oversubscription ratio (one object per
    network: an all-to-all over 512 ranks crosses it on 230k paths)."""
    return Link(kind=net.link.kind, bw_GBps=net.link.bw_GBps / net.oversubscription,
                latency_us=net.link.latency_us, efficiency=net.link.efficiency)


def leaf_of(cluster: Cluster, node: int, nic: int) -> tuple[int, ...]:
    """The leaf switch NIC ``nic`` of ``node`` hangs under: its leaf group, and its rail on a
    rail-optimised fabric (``(group,)`` or ``(group, rail)``)."""
    net = cluster.network
    group = node // net.nodes_per_leaf if net.nodes_per_leaf else 0
    return (group, nic) if net.rail_optimized else (group,)


@lru_cache(maxsize=16)
def shared_uplink(net: NetworkSpec, nics_per_node: int) -> Link:
    """All uplinks of one leaf as one link: ``ports × bw / ratio`` with ``ports`` the NIC ports under the
    leaf (``nodes_per_leaf``, times the NICs per node unless each rail has its own leaf)."""
    ports = net.nodes_per_leaf * (1 if net.rail_optimized else nics_per_node)
    return Link(kind=net.link.kind, bw_GBps=ports * net.link.bw_GBps / net.oversubscription,
                latency_us=net.link.latency_us, efficiency=net.link.efficiency)


def crosses_leaf(cluster: Cluster, sn: int, dn: int, nic_s: int, nic_d: int) -> bool:
    """Whether a transfer from NIC ``nic_s`` of node ``sn`` to NIC ``nic_d`` of node ``dn`` crosses a leaf
    uplink: on a rail-optimised fabric when the rails differ, and when the nodes sit under different leaf groups."""
    net = cluster.network
    if net.rail_optimized and nic_s != nic_d:
        return True
    per_leaf = net.nodes_per_leaf
    return bool(per_leaf) and sn // per_leaf != dn // per_leaf


def staging_link(cluster: Cluster) -> Link:
    """Without GPUDirect RDMA, the PCIe hop a transfer stages through host memory on each side: half the
    host-to-device bandwidth (the bytes cross PCIe twice, GPU→host then host→NIC), at its latency."""
    host = cluster.node.host
    if host is None:
        raise SpecError("node.host", "gpudirect_rdma: false needs the host section (h2d_bw_GBps, h2d_latency_us)")
    return Link(kind=LinkKind.PCIE, bw_GBps=host.h2d_bw_GBps / 2, latency_us=host.h2d_latency_us)
