"""Topology queries: the path between two ranks as directional link resources, and the tiers a group spans.

A *resource* is one directional physical link instance, named by a hashable tuple such as
``("port_tx", node, gpu)`` or ``("nic_rx", node, nic)``. Two transfers whose paths share a
resource share its bandwidth; the schedule evaluator and the discrete-event engine rely on this.

Path model (what each fabric contributes):
- SWITCHED (NVSwitch, loopback): src GPU's port (tx) → dst GPU's port (rx); one hop of latency.
- PCIE_TREE: GPU PCIe link; with P2P and the same PCIe switch, switch-local. Otherwise the switch
  uplinks to the root complex, and the socket link between sockets. P2P off routes every pair
  through the root complex (host memory), as NCCL's SHM transport does.
- NVLINK_MESH: a direct NVLink pair at ``links × bw``; pairs without NVLink take the PCIe route.
- Between nodes: src NIC (tx) → dst NIC (rx). The transfer crosses the leaf uplink (bandwidth
  divided by the oversubscription ratio) when the nodes sit under different leaf groups, or on a
  rail-optimised fabric when the two NICs are on different rails. Without GPUDirect RDMA each side
  stages through host memory: a PCIe hop at half the host-to-device bandwidth (the bytes cross
  PCIe twice, GPU→host then host→NIC) and that hop's latency.
- A degraded NIC (``Cluster.degraded_nics``) is its node's NIC link at that fraction of the bandwidth,
  on both directions.
- Leaf uplinks (``NetworkSpec.leaf_uplinks``): ``per_nic`` gives each NIC its own uplink share
  ``("leaf_up", node, nic)`` at ``bw / ratio``; ``shared`` makes the source leaf's uplinks one resource
  ``("leaf_up", *leaf)`` and the destination leaf's downlinks another ``("leaf_down", *leaf)``, each of
  ``ports × bw / ratio`` (a leaf is a leaf group of nodes, and on a rail-optimised fabric one rail of it;
  its ports are the NIC ports under it), so every flow crossing the spine from or into a leaf shares it.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cluster.fabric_links import crosses_leaf, leaf_of, leaf_uplink, nic_link, shared_uplink, staging_link
from simulator.cluster.spec import Cluster, Fabric, LeafUplinks, Link, LinkClass, LinkKind
from simulator.enum_kind import Kind
from simulator.errors import SpecError

Resource = tuple
"""Hashable id of one directional link instance, e.g. ``("nic_tx", 3, 0)``."""


@dataclass(frozen=True)
class Hop:
    resource: Resource
    link: Link


@dataclass(frozen=True)
class Path:
    """The links a transfer from one rank to another crosses, and the connection's latency."""

    hops: tuple[Hop, ...]
    link_class: LinkClass
    """Latency class of the connection (a library with protocols charges its per-hop latency by it)."""
    latency_s: float
    """Latency of the connection from the links' own ``latency_us``."""

    @property
    def bottleneck_Bps(self) -> float:
        return min(hop.link.bw_Bps for hop in self.hops)

    def transfer_time_s(self, nbytes: float) -> float:
        """Uncontended time of one transfer: latency + bytes / bottleneck bandwidth (cut-through)."""
        return self.latency_s + nbytes / self.bottleneck_Bps


class Tier(Kind):
    """Levels of the hierarchy a group of ranks can span."""

    INTRA_NODE = "intra_node"
    """Between GPUs of the same node."""
    INTER_NODE = "inter_node"
    """Between nodes, over the NICs."""


@dataclass(frozen=True)
class TierInfo:
    """What one tier offers a group: its bottleneck per-rank bandwidth and latency."""

    tier: Tier
    span: int
    """Ranks (intra) or nodes (inter) the group spans at this tier."""
    bw_Bps: float
    """Intra: slowest pair's bottleneck. Inter: one NIC's achievable bandwidth."""
    latency_s: float
    """Slowest pair's connection latency at this tier."""
    nics_per_node: int = 0
    """Inter only: distinct NICs the group's GPUs use on one node."""


def path(cluster: Cluster, src: int, dst: int, nic: int | None = None) -> Path:
    """The path from rank ``src`` to rank ``dst``; ``nic`` overrides the NIC used between nodes."""
    if src == dst:
        raise SpecError("ranks", f"no path from rank {src} to itself")
    (sn, sl), (dn, dl) = cluster.place(src), cluster.place(dst)
    if sn == dn:
        return _intra_path(cluster, sn, sl, dl)
    return _inter_path(cluster, sn, sl, dn, dl, nic)


NIC_RESOURCES = frozenset({"nic_tx", "nic_rx", "leaf_up", "host_stage"})
"""Resource kinds named ``(kind, node, nic)``: a NIC's links (a shared leaf link is named by its leaf, never renamed)."""


@dataclass(frozen=True)
class Renaming:
    """Nodes, and NICs as (node, NIC), that carry some paths' resources onto others' (:func:`renaming`)."""

    nodes: dict
    ports: dict


def renaming(cluster: Cluster, links, moved) -> Renaming | None:
    """What carries ``path(*a)`` onto ``path(*b)`` for every ``(a, b)`` of ``zip(links, moved)`` (each a
    ``(src, dst, nic or None)``) by renaming resources (:func:`renamed`), or None where that may not hold.

    A path between nodes reads its GPUs only through their NICs, and its nodes and NICs only as names of its
    resources, except where it asks whether they cross a leaf (:func:`crosses_leaf`), where a NIC is degraded
    (``Cluster.degraded_nics``: its bandwidth) and where a shared leaf link is named by its leaf. A path inside a
    node reads the node only as a name. So ``b`` is ``a`` renamed when both stay inside a node on the same
    local GPUs, or both cross nodes with leaf crossings alike and none on a shared leaf link, no NIC of the
    cluster is degraded, and every node (inside nodes) and every (node, NIC) (across) goes to one place.
    ``tests/test_topology_translate.py`` rebuilds moved paths and compares."""
    if cluster.degraded_nics:
        return None
    spec, net = cluster.node, cluster.network
    gpn = spec.gpus_per_node
    place = cluster.place  # a job's view (PlacedCluster) places ranks its own way
    if type(cluster).place is Cluster.place:  # ranks of built paths and groups: in range, no check needed
        def place(rank: int) -> tuple[int, int]:
            return divmod(rank, gpn)
    shared = net is not None and net.leaf_uplinks is LeafUplinks.SHARED
    nodes: dict[int, int] = {}
    ports: dict[tuple, tuple] = {}
    for (a, b, nic), (a2, b2, nic2) in zip(links, moved, strict=True):
        (sn, sl), (dn, dl), (sn2, sl2), (dn2, dl2) = place(a), place(b), place(a2), place(b2)
        if (sn == dn) != (sn2 == dn2):
            return None
        if sn == dn:
            if sl != sl2 or dl != dl2 or nodes.setdefault(sn, sn2) != sn2:
                return None
            continue
        nic_s, nic_d = (spec.nic_of(sl), spec.nic_of(dl)) if nic is None else (nic, nic)
        nic_s2, nic_d2 = (spec.nic_of(sl2), spec.nic_of(dl2)) if nic2 is None else (nic2, nic2)
        crosses = crosses_leaf(cluster, sn, dn, nic_s, nic_d)
        if crosses != crosses_leaf(cluster, sn2, dn2, nic_s2, nic_d2) or (crosses and shared):
            return None
        if (ports.setdefault((sn, nic_s), (sn2, nic_s2)) != (sn2, nic_s2)
                or ports.setdefault((dn, nic_d), (dn2, nic_d2)) != (dn2, nic_d2)):
            return None
    return Renaming(nodes, ports)


def renamed(resources, moves: Renaming) -> list[Resource]:
    """``resources`` of paths that :func:`renaming` matched, renamed by it: a NIC's links by its (node, NIC),
    the others (``("port_tx", node, gpu)``...) by their node, named second."""
    nodes, ports = moves.nodes, moves.ports
    return [(r[0], *ports[r[1], r[2]]) if r[0] in NIC_RESOURCES else (r[0], nodes[r[1]], *r[2:]) for r in resources]


def translated(cluster: Cluster, p: Path, link, moved) -> Path | None:
    """``p = path(cluster, *link)`` as ``path(cluster, *moved)`` by renaming its resources (:func:`renaming`), or None."""
    moves = renaming(cluster, (link,), (moved,))
    if moves is None:
        return None
    hops = tuple(Hop(r, h.link) for r, h in zip(renamed([h.resource for h in p.hops], moves), p.hops))
    return Path(hops, p.link_class, p.latency_s)


def _intra_path(cluster: Cluster, node: int, a: int, b: int) -> Path:
    spec = cluster.node
    link = spec.intra_link
    if spec.fabric is Fabric.SWITCHED:
        hops = (Hop(("port_tx", node, a), link), Hop(("port_rx", node, b), link))
        return Path(hops, link.kind.latency_class, link.latency_s)
    if spec.fabric is Fabric.NVLINK_MESH:
        links = spec.nvlinks_between(a, b)
        if links:
            pair = Link(kind=LinkKind.NVLINK, bw_GBps=link.bw_GBps * links, latency_us=link.latency_us,
                        efficiency=link.efficiency)
            return Path((Hop(("nvlink", node, a, b), pair),), LinkClass.NVLINK, link.latency_s)
    return _pcie_path(cluster, node, a, b)


def _pcie_path(cluster: Cluster, node: int, a: int, b: int) -> Path:
    spec = cluster.node
    tree = spec.pcie_tree
    gpu_link = spec.intra_link if spec.fabric is Fabric.PCIE_TREE else tree.switch_uplink
    hops = [Hop(("port_tx", node, a), gpu_link)]
    latency = gpu_link.latency_s
    sa, sb = tree.switch_of(a), tree.switch_of(b)
    if sa != sb or not spec.gpu_peer_to_peer:
        hops.append(Hop(("switch_up", node, sa), tree.switch_uplink))
        ka, kb = tree.socket_of(a), tree.socket_of(b)
        if ka != kb:
            hops.append(Hop(("socket", node, ka, kb), tree.socket_link))
            latency += tree.socket_link.latency_s
        hops.append(Hop(("switch_down", node, sb), tree.switch_uplink))
    hops.append(Hop(("port_rx", node, b), gpu_link))
    return Path(tuple(hops), LinkClass.PCIE, latency)


def _inter_path(cluster: Cluster, sn: int, sl: int, dn: int, dl: int, nic: int | None) -> Path:
    spec, net = cluster.node, cluster.network
    nic_s = spec.nic_of(sl) if nic is None else nic
    nic_d = spec.nic_of(dl) if nic is None else nic
    if not 0 <= nic_s < spec.nics_per_node:
        raise SpecError("nic", f"NIC {nic_s} does not exist; the node has {spec.nics_per_node}")
    hops: list[Hop] = []
    latency = net.link.latency_s
    staging = None if net.gpudirect_rdma else staging_link(cluster)
    if staging is not None:
        hops.append(Hop(("host_stage", sn, nic_s), staging))
        latency += staging.latency_s
    hops.append(Hop(("nic_tx", sn, nic_s), nic_link(cluster, sn, nic_s)))
    if crosses_leaf(cluster, sn, dn, nic_s, nic_d):
        if net.leaf_uplinks is LeafUplinks.SHARED:
            shared = shared_uplink(net, spec.nics_per_node)
            hops += [Hop(("leaf_up", *leaf_of(cluster, sn, nic_s)), shared),
                     Hop(("leaf_down", *leaf_of(cluster, dn, nic_d)), shared)]
        else:
            hops.append(Hop(("leaf_up", sn, nic_s), leaf_uplink(net)))
    hops.append(Hop(("nic_rx", dn, nic_d), nic_link(cluster, dn, nic_d)))
    if staging is not None:
        hops.append(Hop(("host_stage", dn, nic_d), staging))
        latency += staging.latency_s
    return Path(tuple(hops), LinkClass.NET, latency)


def nodes_of(cluster: Cluster, ranks: list[int]) -> dict[int, list[int]]:
    """Group ranks by node, keeping their order: ``{node: [rank, ...]}``."""
    by_node: dict[int, list[int]] = {}
    for r in ranks:
        by_node.setdefault(cluster.place(r)[0], []).append(r)
    return by_node


def group_tiers(cluster: Cluster, ranks: list[int]) -> list[TierInfo]:
    """The tiers a group spans, innermost first, with each tier's bottleneck bandwidth and latency."""
    if len(set(ranks)) != len(ranks):
        raise SpecError("ranks", "a group lists the same rank twice")
    by_node = nodes_of(cluster, ranks)
    tiers = []
    widest = max(by_node.values(), key=len)
    if len(widest) > 1:
        pairs = [path(cluster, a, b) for a in widest for b in widest if a != b]
        tiers.append(TierInfo(Tier.INTRA_NODE, len(widest), min(p.bottleneck_Bps for p in pairs),
                              max(p.latency_s for p in pairs)))
    if len(by_node) > 1:
        first, second = list(by_node.values())[:2]
        link_path = path(cluster, first[0], second[0])
        nics = {cluster.node.nic_of(cluster.place(r)[1]) for r in widest}
        tiers.append(TierInfo(Tier.INTER_NODE, len(by_node), link_path.bottleneck_Bps, link_path.latency_s,
                              nics_per_node=len(nics)))
    return tiers
