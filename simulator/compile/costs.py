"""Memoised cost-model answers for one cluster: collective times, p2p times, compute tables.

Compiling a step asks the same questions many times (every layer's tensor-parallel all-reduce has
the same size; many candidate strategies share a tp group or a gradient bucket size), and the
collective cost model is slow on large groups (a 128-rank tree estimate takes tens of ms). A
:class:`CostCache` remembers each answer for one cluster. It is an explicit object the caller owns
(no module-level state): :func:`simulator.compile.compile_step` makes one per call unless given
one, and :func:`simulator.analytical_vec.estimate_many` shares one over all its candidates.

``auto`` here follows NCCL's tuner (``src/graph/tuning.cc``) on every cluster: for a collective it
considers only the algorithms NCCL implements for it (:data:`simulator.cluster.nccl.COLLECTIVE_CHOICES`:
ring, tree and NVLS for all-reduce, ring and NVLS for reduce-scatter and all-gather, ring for
broadcast) and picks the fastest predicted one. The registry's own ``auto`` on a non-NCCL cluster
also weighs ``ps`` and ``direct``, which are not library collectives. On a gloo cluster the ops whose
algorithm gloo fixes (:func:`simulator.collectives.gloo.runs_own`) take the registry's ``auto``: that algorithm,
or for a reduce-scatter the whole all-reduce gloo runs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
import math
from functools import cached_property
from typing import Any

from simulator.cluster.nccl import COLLECTIVE_CHOICES
from simulator.cluster.placement import PlacedCluster
from simulator.cluster.spec import Cluster, CommLibrary, Fabric, LeafUplinks
from simulator.collectives.base import Op
from simulator.collectives.cost import Env
from simulator.collectives.ps import ps_time_s
from simulator.collectives.gloo import runs_own
from simulator.collectives.registry import estimate, supports
from simulator.collectives.replayed import replay_extra_s, replayed_time_s
from simulator.work import CollectiveAlgorithm

class CostCache:
    """Memo of cost answers on one cluster. Keys include every input, so answers never go stale."""

    def __init__(self, cluster: Cluster, replays_built_on: Cluster | None = None):
        self.cluster = cluster
        self.replays_built_on = replays_built_on
        """The cluster the executor builds a replayed collective's schedule on (the plan's, when a run is
        validated on another cluster: :func:`simulator.collectives.replayed.replayed_time_s`); None: this one."""
        self._memo: dict[Hashable, Any] = {}
        self._moved: dict[tuple[int, ...], tuple[int, ...]] = {}  # ranks → _translated(ranks)

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` the first time ``key`` is asked, the remembered value afterwards."""
        try:
            return self._memo[key]  # one hash of the key when it is there
        except KeyError:
            value = self._memo[key] = compute()
            return value

    def collective(self, ranks: tuple[int, ...], op: Op, nbytes: int, algorithm: str = "auto",
                   replayed: bool = False) -> tuple[float, CollectiveAlgorithm | None]:
        """(time_s, algorithm used) of one call; ``algorithm`` a registry name or ``auto``. A one-rank
        group or an empty message costs nothing and runs no algorithm (None). ``replayed``: the named
        algorithm runs as a host loop's replay of its schedule, which adds
        :func:`simulator.collectives.replayed.replay_extra_s` (nothing for ``auto``, the library's own call)."""
        if len(ranks) < 2 or nbytes <= 0:
            return 0.0, None
        ranks = self.moved(ranks)
        replayed = replayed and algorithm != "auto"
        return self.memo(("coll", ranks, op, int(nbytes), algorithm, replayed),
                         lambda: self._collective(ranks, op, int(nbytes), algorithm, replayed))

    def moved(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """The group every cost answer for ``ranks`` is computed on (:meth:`_translated`, remembered): two
        groups with the same moved group get the same answer to every question on them."""
        moved = self._moved.get(ranks)
        if moved is None:
            moved = self._moved[ranks] = self._translated(ranks)
        return moved

    def _translated(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """The same group on other nodes of the same kind, placed so that its cost is identical: the cost
        models read a node's index only to tell whether two nodes share a leaf group
        (:func:`simulator.cluster.topology.path`) and as the name of its links. Groups of different
        pipeline stages or replicas that differ only by such a move share one answer.

        - Leaf crossings free (:meth:`_leaf_blind`): the group's nodes renumbered 0, 1, … in order.
        - Otherwise a group under one leaf group (every group inside one node) moves to node 0, and one
          spanning leaf groups by whole leaf groups (which of its nodes share a leaf is kept).

        Then its GPUs move down inside their nodes (:meth:`_gpus_shifted`)."""
        if isinstance(self.cluster, PlacedCluster) or self.cluster.varies:  # nodes that differ: no such move
            return ranks
        if min(ranks) < 0 or max(ranks) >= self.cluster.world_size:
            return ranks  # not on the cluster: the cost model says so
        return self._gpus_shifted(self._nodes_moved(ranks))

    def _nodes_moved(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        gpn, per_leaf = self.cluster.node.gpus_per_node, self._nodes_per_leaf
        if self._leaf_blind:
            nodes = sorted({r // gpn for r in ranks})
            if nodes[-1] == len(nodes) - 1:
                return ranks
            new = {n: k for k, n in enumerate(nodes)}
            return tuple(new[r // gpn] * gpn + r % gpn for r in ranks)
        first = min(ranks) // gpn
        if per_leaf and first // per_leaf != max(ranks) // gpn // per_leaf:
            shift = first - first % per_leaf
        else:
            shift = first
        return ranks if shift == 0 else tuple(r - shift * gpn for r in ranks)

    def _gpus_shifted(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """The group with every GPU moved ``s`` places down inside its node, on a switched node fabric: the
        pipeline stages' dp groups of a layout with tp·pp > 1 inside a node (GPUs 0, 4, … and 2, 6, …) share
        one answer. ``s`` is the largest multiple of ``G / gcd(G, N)`` (``G`` GPUs, ``N`` NICs per node) not above
        the group's lowest local GPU, so GPU ``g``'s NIC ``⌊g·N/G⌋`` becomes NIC ``⌊g·N/G⌋ − s·N/G``
        (:meth:`simulator.cluster.interconnect.NodeSpec.nic_of`): one shift of every NIC, which keeps their
        order, which GPUs share a NIC and which flows share a rail.

        Why the cost is identical: on a switched fabric a path inside a node is the two GPUs' ports, every
        port the node's one intra link (:func:`simulator.cluster.topology._intra_path`), and a path between
        nodes reads its GPUs only through their NICs, every NIC the network's one link (no degraded NIC: the
        cluster does not vary) and a rail only to compare two NICs; so each path of the moved group is the
        path in place with its port and NIC resources renamed one to one, and every load, bandwidth and
        latency is the same. A PCIe tree or an NVLink mesh reads which GPUs share a switch or a link: not moved."""
        spec = self.cluster.node
        if spec.fabric is not Fabric.SWITCHED:
            return ranks
        gpn = spec.gpus_per_node
        unit = gpn // math.gcd(gpn, spec.nics_per_node)
        low = min(r % gpn for r in ranks)
        shift = low - low % unit
        return ranks if shift == 0 else tuple(r - shift for r in ranks)

    @cached_property
    def _leaf_blind(self) -> bool:
        """Whether crossing between leaf groups costs nothing more: one leaf tier, or per-NIC uplinks at
        oversubscription 1 (a crossing adds a hop of the NIC's own bandwidth carrying a subset of the
        NIC's flows, so every path's bottleneck and latency stay the same;
        :func:`simulator.cluster.topology._inter_path`)."""
        net = self.cluster.network
        return net is None or not net.nodes_per_leaf or (net.leaf_uplinks is LeafUplinks.PER_NIC
                                                         and net.oversubscription == 1.0)

    @property
    def _nodes_per_leaf(self) -> int:
        net = self.cluster.network
        return int(net.nodes_per_leaf) if net is not None else 0

    def _collective(self, ranks, op, nbytes, algorithm, replayed=False) -> tuple[float, CollectiveAlgorithm]:
        if algorithm != "auto" and replayed and (built_on := self._replays_built_on()) is not None:
            time_s = replayed_time_s(self.cluster, ranks, op, nbytes, algorithm, built_on)
            return time_s, CollectiveAlgorithm(algorithm)
        if algorithm != "auto":
            est = estimate(self.cluster, ranks, op, nbytes, algorithm)
            extra = replay_extra_s(self.cluster, ranks, op, nbytes, algorithm) if replayed else 0.0
            return est.time_s + extra, CollectiveAlgorithm(est.algorithm)
        if self.cluster.comm.library is CommLibrary.GLOO and runs_own(op):  # what gloo runs
            est = estimate(self.cluster, ranks, op, nbytes, "auto")
        elif names := self.memo(("choices", ranks, op), lambda: self._choices(ranks, op)):
            est = min((estimate(self.cluster, ranks, op, nbytes, a) for a in names), key=lambda e: e.time_s)
        else:  # an operation NCCL has no tuned choice for: the registry's own pick
            est = estimate(self.cluster, ranks, op, nbytes, "auto")
        return est.time_s, CollectiveAlgorithm(est.algorithm)

    def _replays_built_on(self) -> Cluster | None:
        """Where a replayed schedule is built when it is priced step by step (:func:`replayed_time_s`): the plan's
        cluster when given, else this one where its processes time-share their cores (each step then at its busy
        processes' share, :mod:`simulator.collectives.replayed`); None: the closed form plus the replayed steps."""
        if self.replays_built_on is not None:
            return self.replays_built_on
        return self.cluster if Env(self.cluster, None).time_share > 1 else None

    def _choices(self, ranks: tuple[int, ...], op: Op) -> list[str]:
        """NCCL's algorithms for ``op`` (:data:`COLLECTIVE_CHOICES`) that the registry supports on the group, in
        NCCL's order: whether one does depends on the group and the op, not the size, so it is asked once per
        (group, op) rather than once per size (each ask builds the group's layout anew)."""
        return [a for a in COLLECTIVE_CHOICES.get(op.value, ()) if supports(a, op, self.cluster, ranks)]

    def p2p(self, src: int, dst: int, nbytes: int) -> float:
        """One send/recv from ``src`` to ``dst`` (the registry's point-to-point estimate)."""
        if src == dst or nbytes <= 0:
            return 0.0
        return self.collective((src, dst), Op.SEND_RECV, int(nbytes))[0]

    def p2p_wait_s(self) -> float:
        """The wait for a core a send between two ranks holds (:meth:`Env.blocking_wait_s` of a pair's send-recv;
        0 off a loopback node)."""
        return self.memo(("p2p wait",), lambda: Env(self.cluster, None).blocking_wait_s(Op.SEND_RECV, 2))

    def ps(self, ranks: tuple[int, ...], nbytes: int, shards: int, colocated: bool) -> float:
        """Synchronous push + pull of ``nbytes`` per worker (:func:`simulator.collectives.ps.ps_time_s`)."""
        if nbytes <= 0:
            return 0.0
        return self.memo(("ps", ranks, int(nbytes), shards, colocated),
                         lambda: ps_time_s(self.cluster, ranks, int(nbytes), shards, colocated))
