"""A collective's group of ranks on a cluster, and the transfers the cost model prices.

:class:`Group` is the layout every algorithm reads: which group indices share a node, the NICs their
GPUs own there, and the NCCL-like channel count that follows from them; :class:`Flow` is one transfer
(global ranks, bytes, the NIC it leaves by). :func:`ring_flows` gives one multi-channel ring step, which
both the ring algorithm and the protocol's bus-bandwidth cap (:attr:`Group.ring_bus_bw_Bps`) use. The
costs themselves are in :mod:`simulator.collectives.cost`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from simulator.cluster.spec import Cluster
from simulator.cluster.topology import path
from simulator.errors import SpecError


@dataclass(frozen=True)
class Flow:
    """A transfer as the cost model sees it: global ranks, bytes and the NIC it uses across nodes."""

    src: int
    dst: int
    nbytes: float
    nic: int | None = None


@dataclass(frozen=True)
class Group:
    """A group of ranks on a cluster and its layout: which group indices share a node, and their NICs."""

    cluster: Cluster
    ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.ranks) < 2:
            raise SpecError("ranks", f"a collective needs at least 2 ranks, got {len(self.ranks)}; "
                            "a group of one rank costs nothing, skip the call")
        for r in self.ranks:  # types first: an unhashable rank would break the duplicate check
            if not isinstance(r, int) or isinstance(r, bool):
                raise SpecError("ranks", f"ranks must be integers, got {r!r}")
        if len(set(self.ranks)) != len(self.ranks):
            raise SpecError("ranks", "a group lists the same rank twice")
        if self._node_by_node and 0 <= min(self.ranks) and max(self.ranks) < self.cluster.world_size:
            return  # every rank placed (the check below, once per group rather than per rank)
        for r in self.ranks:
            self.cluster.place(r)

    @property
    def _node_by_node(self) -> bool:
        """The cluster places ranks node by node (:meth:`Cluster.place`: ``divmod(rank, gpus_per_node)``), not a
        job's view of its own: :meth:`_places` may divide."""
        return type(self.cluster).place is Cluster.place

    def _places(self) -> list[tuple[int, int]]:
        """``cluster.place(r)`` of each rank in group order (ranks checked by ``__post_init__``)."""
        if self._node_by_node:
            gpn = self.cluster.node.gpus_per_node
            return [divmod(r, gpn) for r in self.ranks]
        return [self.cluster.place(r) for r in self.ranks]

    @property
    def p(self) -> int:
        return len(self.ranks)

    @cached_property
    def nodes(self) -> tuple[tuple[int, ...], ...]:
        """Group indices grouped by node, nodes in order of first appearance, indices in group order."""
        by_node: dict[int, list[int]] = {}
        for i, (node, _) in enumerate(self._places()):
            by_node.setdefault(node, []).append(i)
        return tuple(tuple(v) for v in by_node.values())

    @cached_property
    def order(self) -> tuple[int, ...]:
        """Group indices node by node: a ring over this order crosses each node boundary once."""
        return tuple(i for node in self.nodes for i in node)

    @cached_property
    def node_index(self) -> dict[int, int]:
        """Group index → position of its node in :attr:`nodes`."""
        return {i: k for k, node in enumerate(self.nodes) for i in node}

    @cached_property
    def nic_sets(self) -> tuple[tuple[int, ...], ...]:
        """Per node, the distinct NICs of the group's GPUs there (each GPU's own NIC, sorted)."""
        nic_of, places = self.cluster.node.nic_of, self._places()  # not kept: ~10⁵ groups' places at 65,536 GPUs
        return tuple(tuple(sorted({nic_of(places[i][1]) for i in node})) for node in self.nodes)

    @cached_property
    def channels(self) -> int:
        """NCCL-like channels of a ring: one per NIC the group owns on every node (1 inside a node).

        Each channel carries ``1/channels`` of the data and leaves the node through its own NIC, so
        the inter-node bus bandwidth reaches ``channels × NIC bandwidth`` (nccl-tests on DGX A100,
        8×HDR: ≈192 GB/s) [src: nccl-1576]. A group with one GPU per node owns one NIC: one channel.
        """
        if len(self.nodes) == 1:
            return 1
        return min(len(s) for s in self.nic_sets)

    @cached_property
    def shape(self) -> tuple:
        """Size, partition into nodes (group indices) and how many NICs the group's GPUs own on each node:
        the layout relative to nodes without the rank ids (what :meth:`Algorithm.schedule_key` may use)."""
        return self.p, self.nodes, tuple(len(s) for s in self.nic_sets)

    def nic(self, src_index: int, channel: int) -> int:
        """NIC channel ``channel`` uses to leave the node of group index ``src_index``."""
        nics = self.nic_sets[self.node_index[src_index]]
        return nics[channel % len(nics)]

    @cached_property
    def paths(self) -> dict:
        """Path cache shared by every :class:`Env` evaluating this group (paths do not depend on protocol)."""
        return {}

    def share_paths(self, cache: dict) -> "Group":
        """This group with ``cache`` as its :attr:`paths` (set before any path is read): a path is a function of the
        cluster and its (src, dst, NIC) alone, so every group of one cluster may read one cache. A call planner
        passes its own, so a tree's 4,088 paths at dp 1,024 are built once per group, not once for the chunk count
        and again for the plan (des28)."""
        if "paths" in self.__dict__ and self.__dict__["paths"] is not cache:
            raise ValueError("share_paths: this group has read paths of its own already")
        self.__dict__["paths"] = cache  # what cached_property would store: the frozen dataclass keeps its fields
        return self

    @cached_property
    def shapes(self) -> dict:
        """Size-independent schedule structures keyed by (algorithm, op, root), shared by every size
        and protocol evaluated on this group (:mod:`simulator.collectives.shape`)."""
        return {}

    @cached_property
    def ring_pairs(self) -> tuple[tuple[int, int, int | None], ...]:
        """The connections of one multi-channel ring step (:func:`ring_pairs`), shared by the ring's step schedule
        and :attr:`ring_bus_bw_Bps`."""
        return ring_pairs(self)

    def same_node(self, a: int, b: int) -> bool:
        return self.node_index[a] == self.node_index[b]

    @cached_property
    def ring_bus_bw_Bps(self) -> float:
        """Bus bandwidth of the group's multi-channel ring on the links as given (no protocol): what a
        rank pushes per ring step over the step's time, ``C / max_r (load_r / bw_r)`` with one byte per
        channel on every ring edge (:func:`ring_flows`). NCCL's tuner calls it ``busBw``
        (``nChannels × bw``) and caps a protocol's share of it (:meth:`Env.bw_ratio`)."""
        flows: dict[tuple, float] = {}  # (src, dst, nic) → flows on it: channels repeat connections inside nodes
        for key in self.ring_pairs:  # one byte per channel on every ring edge
            flows[key] = flows.get(key, 0.0) + 1.0
        load: dict[tuple, float] = {}  # sums of whole numbers of bytes: exact in any grouping
        links: dict[tuple, float] = {}  # (resource, bw): the max reads each value once
        for key, nbytes in flows.items():
            p = self.paths.get(key) or path(self.cluster, *key)
            self.paths[key] = p
            for hop in p.hops:
                load[hop.resource] = load.get(hop.resource, 0.0) + nbytes
                links[(hop.resource, hop.link.bw_Bps)] = hop.link.bw_Bps
        step_s = max((load[r] / bw for r, bw in links), default=0.0)
        return self.channels / step_s if step_s > 0 else float("inf")


def ring_nic(group: Group, src: int, dst: int, channel: int) -> int | None:
    """NIC ring channel ``channel`` leaves by from group index ``src`` to ``dst`` (None inside a node)."""
    return None if group.same_node(src, dst) else group.nic(src, channel)


def ring_flows(group: Group, per_channel_bytes: float) -> list[Flow]:
    """The flows of one ring step: every position sends ``per_channel_bytes`` on every channel
    (:mod:`simulator.collectives.ring`), over :attr:`Group.ring_pairs`."""
    return [Flow(src, dst, per_channel_bytes, nic) for src, dst, nic in group.ring_pairs]


def ring_pairs(group: Group) -> tuple[tuple[int, int, int | None], ...]:
    """``(src rank, dst rank, NIC or None)`` of each flow of one ring step, channel by channel, position by position
    in :attr:`Group.order`: every position sends to the next on every channel (read once per group as
    :attr:`Group.ring_pairs`)."""
    pos, p = group.order, group.p
    return tuple((group.ranks[pos[i]], group.ranks[pos[(i + 1) % p]], ring_nic(group, pos[i], pos[(i + 1) % p], c))
                 for c in range(group.channels) for i in range(p))
