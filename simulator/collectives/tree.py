"""NCCL-style double binary tree all-reduce (Sanders, Speck & Träff 2009; NCCL 2.4 release notes).

Shape, as NCCL builds it: inside each node the group's GPUs form a chain ``r0 ← r1 ← … ← r(m−1)``;
the chain heads ``r0`` of the nodes form a binary tree over the nodes. Two trees are used: tree A
is the heap-ordered binary tree over the nodes in order (node i's parent is node ⌊(i−1)/2⌋), tree
B the same over the nodes in reverse order, so the leaves of A (the later half) are interior in B.
Our construction of the pair; NCCL's ``ncclGetDtree`` shifts or mirrors an in-order tree, to the
same end: no node is interior in both trees.

Channels: ``2C`` (C = :attr:`Group.channels`), channel ``c`` runs tree ``c mod 2`` over the node's
NIC number ``c // 2``, so every NIC carries one channel of each tree and the interior fan-in of
one tree is balanced by the leaf role in the other.

Pipelined all-reduce (reduce up, broadcast down, overlapped as NCCL does): each channel's share
``n/(2C)`` is cut into ``k`` chunks (the fastest of pipeline_choice.py ``PIPELINE_CHUNKS``); with ``H`` the deepest rank's
depth, chunk ``j`` goes up the edge from a child at depth ``d`` at step ``j + H − d`` and down the
edge from a parent at depth ``d`` at step ``j + H + d``. Closed form:

    T = Σ_{s < k+2H−1} bw(edges active at s, n/(2Ck)) + L + (k−1)·α_max + γ·(most children any rank has, summed over channels)·n/(2C)

``bw`` is a step's bandwidth term; ``L`` the latency of one chunk's path, up the tree and down
again (chunk-level dataflow: chunk ``j`` waits only for chunk ``j`` from its children or parent;
chain.py ``PipelineChain.of(1)``), so ``L`` no longer grows with ``k``; each chunk after the first
pays the slowest hop's latency ``α_max`` once (cost.py ``Env.best_pipeline``,
[src: pjesivac-2007]), which is what keeps ``k`` finite; under NCCL a chunk is at most one FIFO
step (``Protocol.step_bytes``). The γ overlaps the transfer where cost.py says so (pipelined).
``L`` is NCCL's tree latency ``2·((g−1)·α_intra + ⌊log2 N⌋·α_net)``
(tuning.cc) [src: nccl-tuning] for ``g`` GPUs on each of ``N`` nodes. At large sizes each NIC moves ≈ 2n/C
bytes, the ring's ``2(p−1)/p·n/C``, so ring edges ahead by the pipeline fill ``(2H−1)/k``.
"""

from __future__ import annotations

from simulator.collectives.algorithm import Algorithm, LocalSteps, chunked
from simulator.collectives.base import Op, Transfer, split
from simulator.collectives.cost import Env, Flow, Group
from simulator.collectives.pipeline_cost import PipelineLayout
from simulator.collectives.tree_edges import most_children, tree_unit_edges


def _node_parents(n_nodes: int, mirrored: bool) -> list[int | None]:
    """Parent node position of each node position in tree A (heap order) or B (reversed heap)."""
    parents: list[int | None] = []
    for i in range(n_nodes):
        j = n_nodes - 1 - i if mirrored else i
        if j == 0:
            parents.append(None)
        else:
            pj = (j - 1) // 2
            parents.append(n_nodes - 1 - pj if mirrored else pj)
    return parents


def tree_parents(group: Group, mirrored: bool) -> dict[int, int | None]:
    """Group index → parent group index (None at the root) of tree A or B, chains included."""
    nodes = group.nodes
    parent: dict[int, int | None] = {}
    for x, up in zip(nodes, _node_parents(len(nodes), mirrored)):
        parent[x[0]] = None if up is None else nodes[up][0]
        for prev, r in zip(x[:-1], x[1:]):
            parent[r] = prev
    return parent


def _depths(parent: dict[int, int | None]) -> dict[int, int]:
    depth: dict[int, int] = {}

    def walk(i: int) -> int:
        if i not in depth:
            depth[i] = 0 if parent[i] is None else walk(parent[i]) + 1
        return depth[i]

    for i in parent:
        walk(i)
    return depth


def tree_levels(group: Group) -> list[list[tuple[int, int, int, bool]]]:
    """Pipeline levels of the overlapped all-reduce: ``[(src, dst, channel, reduce)]`` per level."""
    channels = 2 * group.channels
    shapes = [tree_parents(group, mirrored) for mirrored in (False, True)]
    depths = [_depths(s) for s in shapes]
    height = max(max(d.values()) for d in depths)
    levels: list[list[tuple[int, int, int, bool]]] = [[] for _ in range(2 * height)]
    for c in range(channels):
        parent, depth = shapes[c % 2], depths[c % 2]
        for child, up in parent.items():
            if up is None:
                continue
            levels[height - depth[child]].append((child, up, c, True))
            levels[height + depth[up]].append((up, child, c, False))
    return levels


class DoubleBinaryTree(Algorithm):
    """NCCL's tree algorithm: all-reduce only (as in NCCL)."""

    name = "tree"
    family = "tree"
    pipelined = True
    ops = frozenset({Op.ALL_REDUCE})

    def chunk_pipelined(self, op: Op) -> bool:
        return True

    def schedule_key(self, group: Group, op: Op, nbytes: int, root: int = 0) -> tuple | None:
        """The trees come from the node partition, channel ``c`` leaves a node by NIC index ``(c // 2) mod``
        its NIC count: the shape, plus the chunk count :meth:`chunks` picks from the paths' costs."""
        return group.shape, self.chunks(group, op, nbytes)

    def links_key(self, group: Group, op: Op, nbytes: int, root: int = 0) -> tuple | None:
        """Every tree edge of a channel carries bytes once the channel's share does (its chunks sum to it),
        whatever the chunk count: the shape alone."""
        return (group.shape,)

    def chunks(self, group: Group, op: Op, nbytes: int) -> int:
        """Chunks per channel of the schedule: the fastest count on the links' own costs (no protocol),
        :meth:`Env.best_pipeline` of the unit levels (kept in :attr:`Group.shapes`, as :meth:`comm_time_s`)."""
        env = Env(group.cluster, None, group.paths)
        return env.best_pipeline(lambda: self._unit_layout(env, group), nbytes / (2 * group.channels),
                                 group, (self.name, op))[1]

    def _nic(self, group: Group, src: int, dst: int, channel: int) -> int | None:
        return None if group.same_node(src, dst) else group.nic(src, channel // 2)

    def _unit_layout(self, env: Env, group: Group) -> PipelineLayout:
        """The layout of :meth:`_unit_levels` built from the node partition as arrays
        (:func:`~simulator.collectives.tree_edges.tree_unit_edges`): the same costs to the bit."""
        return PipelineLayout.of_edges(env, *tree_unit_edges(group))

    def _unit_levels(self, group: Group) -> list[list[Flow]]:
        """One unit flow per tree edge and channel (the reference :meth:`_unit_layout` is tested against); a flow
        equal to an earlier one (an edge inside a node, whose channels share it) is that same immutable object."""
        kept: dict[tuple, Flow] = {}

        def flow(s: int, d: int, c: int) -> Flow:
            key = (s, d, self._nic(group, s, d, c))
            f = kept.get(key)
            if f is None:
                f = kept[key] = Flow(group.ranks[s], group.ranks[d], 1.0, key[2])
            return f

        return [[flow(s, d, c) for s, d, c, _ in lvl] for lvl in tree_levels(group)]

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        return env.best_pipeline(lambda: self._unit_layout(env, group), nbytes / (2 * group.channels),
                                 group, (self.name, op))[0]

    def reduce_bytes(self, group: Group, op: Op, nbytes: int) -> float:
        return self._most_children(group) * nbytes / (2 * group.channels)

    def _most_children(self, group: Group) -> int:
        """Children the busiest rank reduces over all channels' trees (kept per group: it fixes the layout)."""
        key = (self.name, "most_children")
        if key not in group.shapes:
            group.shapes[key] = most_children(group)
        return group.shapes[key]

    def _parts(self, group: Group, op: Op, nbytes: int) -> list[list[tuple[int, int]]]:
        """Per channel, its chunks ``(offset, length)``: the channel's share cut into :meth:`chunks` pieces."""
        k = self.chunks(group, op, nbytes)
        return [chunked(off, length, k) for off, length in split(nbytes, 2 * group.channels)]

    def local_steps(self, group: Group, op: Op, nbytes: int) -> LocalSteps:
        """:meth:`transfers` by step in local form: chunk ``j`` of an edge on level ``l`` is in step ``j + l``,
        and :meth:`Schedule.steps` keeps the transfers' order, so step ``s`` lists level by level (ascending)
        each edge's chunk ``s − l``, zero-length chunks left out as :meth:`schedule` leaves them. A
        cross-node edge of channel ``c`` leaves by :meth:`Group.nic` ``(src, c // 2)``, position
        ``(c // 2) mod |NICs|`` in its node's sorted NIC set. ``reduce_bytes_per_rank``: the most bytes one
        rank receives on reducing edges, each edge carrying its channel's share (integer sums, exact)."""
        parts = self._parts(group, op, nbytes)
        levels = tree_levels(group)
        node, sets = group.node_index, group.nic_sets
        live = [[(j, n) for j, (_, n) in enumerate(part) if n > 0] for part in parts]
        last = max((j for part in live for j, _ in part[-1:]), default=-1)
        steps: list[list] = [[] for _ in range(last + len(levels) if last >= 0 else 0)]
        reduced: dict[int, int] = {}
        for level, edges in enumerate(levels):
            for src, dst, c, reduce in edges:
                nic = None if node[src] == node[dst] else (c // 2) % len(sets[node[src]])
                for j, n in live[c]:
                    steps[j + level].append((src, dst, n, nic))
                if reduce and live[c]:
                    reduced[dst] = reduced.get(dst, 0) + sum(n for _, n in live[c])
        while steps and not steps[-1]:
            steps.pop()  # a schedule's steps end at its last transfer
        return LocalSteps([tuple(step) for step in steps], float(max(reduced.values(), default=0)))

    def chunk_pipeline_latency_s(self, env: Env, group: Group, op: Op, nbytes: int) -> float:
        """:func:`~simulator.collectives.algorithm.pipeline_latency_s` of :meth:`schedule` from one chunk per
        channel. Its recurrence is keyed by (rank, offset) and every chunk of a channel crosses the same
        edges level by level (chunk ``j`` of level ``l`` in step ``j + l``, reading what earlier steps, i.e.
        earlier levels of that chunk, delivered), so each chunk's arrivals are the same sums in the same order
        and the maximum over all chunks is the maximum over one per channel with bytes; ``k`` (the most
        chunks on one edge) is the most chunks with bytes of one channel, ``α_max`` the slowest link of those
        channels' edges."""
        live = [sum(1 for _, n in part if n > 0) for part in self._parts(group, op, nbytes)]
        ranks = group.ranks
        alphas: dict[tuple, float] = {}
        arrival: dict[tuple[int, int], float] = {}
        alpha_max = 0.0
        for edges in tree_levels(group):
            new: dict[tuple[int, int], float] = {}  # this level's arrivals; read from the earlier levels' only
            for src, dst, c, _ in edges:
                if not live[c]:
                    continue
                link = (src, dst, self._nic(group, src, dst, c))
                alpha = alphas.get(link)
                if alpha is None:
                    alpha = alphas[link] = env.latency_s(env.path(ranks[src], ranks[dst], link[2]))
                alpha_max = max(alpha_max, alpha)
                v = arrival.get((src, c), 0.0) + alpha
                key = (dst, c)
                if v > new.get(key, arrival.get(key, 0.0)):
                    new[key] = v
            arrival.update(new)
        chunks = max(live) if any(live) else 1  # every channel has edges (p ≥ 2)
        return max(arrival.values(), default=0.0) + (chunks - 1) * alpha_max * env.chunk_latency_share

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        levels = tree_levels(group)
        parts = self._parts(group, op, nbytes)
        out = []
        for level, edges in enumerate(levels):
            for src, dst, c, reduce in edges:
                nic = self._nic(group, src, dst, c)
                for j, (off, length) in enumerate(parts[c]):
                    out.append(Transfer(step=j + level, src=src, dst=dst, offset=off, nbytes=length,
                                        reduce=reduce, channel=c, nic=nic))
        return out
