"""Ring collectives (NCCL's ring; Thakur, Rabenseifner & Gropp 2005 §4): multi-channel, on real placement.

The ring visits the group node by node (:attr:`Group.order`), so it crosses each node boundary
once. ``C`` = :attr:`Group.channels` rings run side by side, each on ``1/C`` of the data; where a
ring leaves a node, channel ``c`` uses the node's ``c``-th NIC, so the inter-node part reaches
``C × NIC bandwidth`` while the GPU ports inside a node carry all ``C`` channels.

Closed forms, with ``bw(b)`` one ring step's bandwidth term at ``b`` bytes per channel on every
ring edge (cost.py: the most loaded link's bytes / bandwidth) and ``chain(m)`` the ring's latency
chain over ``m`` steps: the largest sum of α over ``m`` cyclically consecutive ring edges (every
position receives on every step; an edge's α is the largest over channels; chain.py ``ring_chain_s``,
O(p)):

- reduce-scatter, all-gather: ``(p−1)·bw(n/(pC)) + chain(p−1)``  (Thakur: ``(p−1)α + ((p−1)/p)·nβ``)
- all-reduce = reduce-scatter + all-gather: ``2(p−1)·bw(n/(pC)) + chain(2(p−1)) + γ·((p−1)/p)·n``
  On one switched node with link bandwidth B and latency α: ``2(p−1)·(α + (n/p)/B) + γ-term``.
  Across N nodes the ring has N network edges; ``2(p−1)`` consecutive edges are the whole ring
  plus ``p−2`` more, so ``chain(2(p−1))`` holds ``2N`` network edges with 3 or more GPUs per node
  (``2N−1`` with 2), e.g. 32 H100 ranks on 4 nodes, LL:
  ``6.6 + 54·0.6 + 8·2.7 = 60.6 µs`` (NCCL's tuner: ``nInter = 2(N−1)``, 56.4 µs).
- broadcast / reduce: a pipelined chain from (to) the root along the ring order; each channel's
  share is cut into ``k`` chunks (the fastest of pipeline_choice.py ``PIPELINE_CHUNKS``; under NCCL a chunk
  is at most one FIFO step, ``Protocol.step_bytes``), chunk ``j`` crosses edge ``e`` at step ``j+e``:
  ``Σ_{s<k+p−2} bw(active edges, n/(Ck)) + Σ_edges α_e + (k−1)·α_max`` ≈ ``(k+p−2)·(α + n/(Ck)·β)``,
  Pješivac-Grbović et al.'s segmented chain [src: pjesivac-2007]: one pass down the line, plus one
  message latency per further chunk (cost.py ``Env.best_pipeline``), so the best ``k`` is near
  ``sqrt((p−2)·nβ/α)``. Reduce adds the exposed ``γ·n`` (every rank on the chain adds the
  incoming partial sum once; pipelined, so it overlaps the transfer where cost.py says so).
"""

from __future__ import annotations

import numpy as np

from simulator.collectives.algorithm import Algorithm, LocalSteps, chunked, sub_slices
from simulator.collectives.base import Op, Transfer, split
from simulator.collectives.chain import ring_chain_s
from simulator.collectives.cost import Env
from simulator.collectives.group import Flow, Group
from simulator.collectives.group import ring_nic as _nic
from simulator.collectives.rotated import RotatedStep
from simulator.collectives.shape import uniform_schedule


def ring_edge_alphas(env: Env, flows: list[Flow], p: int) -> list[float]:
    """α of each ring edge (position i → i+1), the largest over channels; empty if no bytes move."""
    edges = env.edges(flows)
    if not edges:
        return []
    return [max(edges[c * p + i][2] for c in range(len(edges) // p)) for i in range(p)]


def ring_transfers(group: Group, nbytes: int, phase: str, first_step: int = 0) -> list[Transfer]:
    """Reduce-scatter (``phase='rs'``) or all-gather (``'ag'``) steps of the multi-channel ring.

    RS: at step s position i sends its partial of the slice owned by position i−s−1 to i+1, which adds
    it; after p−1 steps position i holds the full sum of its own slice. AG: position i forwards the
    slice of position i−s; after p−1 steps everyone holds every slice.
    """
    pos, p, channels = group.order, group.p, group.channels
    slices = sub_slices(nbytes, p, channels)
    shift = 1 if phase == "rs" else 0
    out = []
    for s in range(p - 1):
        for c in range(channels):
            for i in range(p):
                src, dst = pos[i], pos[(i + 1) % p]
                owner = pos[(i - s - shift) % p]
                off, length = slices[owner][c]
                out.append(Transfer(step=first_step + s, src=src, dst=dst, offset=off, nbytes=length,
                                    reduce=phase == "rs", channel=c, nic=_nic(group, src, dst, c)))
    return out


def ring_local_steps(group: Group, nbytes: int, phases: tuple[str, ...]) -> LocalSteps:
    """:func:`ring_transfers` of ``phases`` (one after the other, as :meth:`Ring.transfers` lists them) by step in
    local form, built in O(p·C) in all instead of O(p²·C) when every transfer has bytes.

    Step ``s`` of a phase is one *rotation* of the same ring step: position ``i`` sends channel ``c``'s part of the
    slice owned by position ``i − r`` to ``i + 1``, ``r = s + 1`` for ``rs`` and ``r = s`` for ``ag``; the pairs
    and NICs (``channel mod |NICs|``, the position of :meth:`Group.nic` in the node's sorted set) are the same in
    every step, only the lengths rotate. When every transfer has bytes, each step is a :class:`RotatedStep` of the
    shared links and lengths (O(1) per step, one object per distinct rotation: one when the bytes divide evenly,
    des26); otherwise (some slice or channel part empty: small messages) one tuple per distinct rotation. Zero-length transfers are left out as :meth:`Algorithm.schedule`
    leaves them; no step is empty unless every slice is (then there are no steps). ``reduce_bytes_per_rank``
    (``rs`` only): position ``j`` adds every slice but that of position ``j − 1`` (integer sums, exact)."""
    pos, p, channels = group.order, group.p, group.channels
    node, sets = group.node_index, group.nic_sets
    slices = sub_slices(nbytes, p, channels)
    lengths = [tuple(n for _, n in slices[pos[i]]) for i in range(p)]  # per position, each channel's length
    links = [(pos[i], pos[(i + 1) % p], None if node[pos[i]] == node[pos[(i + 1) % p]]
              else c % len(sets[node[pos[i]]])) for c in range(channels) for i in range(p)]
    if p >= 2 and all(map(all, lengths)):  # every transfer has bytes: rotations of shared links and lengths
        return _rotated(links, lengths, phases)
    uniform = len(set(lengths)) <= 1
    contents: dict[int, tuple] = {}

    def content(r: int) -> tuple:
        key = 0 if uniform else r % p
        if key not in contents:
            contents[key] = tuple((src, dst, n, nic) for (src, dst, nic), n in
                                  zip(links, (lengths[(i - r) % p][c] for c in range(channels) for i in range(p)))
                                  if n > 0)
        return contents[key]

    if p < 2 or not any(map(any, lengths)):
        return LocalSteps([], 0.0)
    steps = [content(s + (1 if phase == "rs" else 0)) for phase in phases for s in range(p - 1)]
    return LocalSteps(steps, _reduced(lengths, phases))


def _reduced(lengths: list[tuple[int, ...]], phases: tuple[str, ...]) -> float:
    """``reduce_bytes_per_rank``: position ``j`` adds every slice but that of position ``j − 1`` (rs only)."""
    p, totals = len(lengths), [sum(n) for n in lengths]
    return float(max(sum(totals) - totals[(j - 1) % p] for j in range(p))) if "rs" in phases else 0.0


def _rotated(links: list, lengths: list[tuple[int, ...]], phases: tuple[str, ...]) -> LocalSteps:
    """:func:`ring_local_steps` when every transfer has bytes: each step a :class:`RotatedStep` of the shared links
    and ``C × p`` lengths, O(1) per step (des26). Rotations ``r`` and ``r + d`` are the same content exactly when the
    per-position lengths repeat with period ``d``; ``d`` is the smallest such divisor of ``p`` (1 when the bytes divide
    evenly), and the step of rotation ``r`` is the object of ``r mod d``, so distinct objects are distinct contents."""
    p = len(lengths)
    period = next(d for d in range(1, p + 1) if p % d == 0 and lengths[d:] + lengths[:d] == lengths)
    shared, table = tuple(links), np.array(lengths, dtype=np.int64).T.copy()  # [channel, position]
    objects: dict[int, RotatedStep] = {}

    def step(r: int) -> RotatedStep:
        r %= period
        if r not in objects:
            objects[r] = RotatedStep(shared, table, r)
        return objects[r]

    steps = [step(s + (1 if phase == "rs" else 0)) for phase in phases for s in range(p - 1)]
    return LocalSteps(steps, _reduced(lengths, phases))


def chain(group: Group, root: int) -> list[int]:
    """Group indices along the ring order, starting at ``root``."""
    pos, p = group.order, group.p
    start = pos.index(root)
    return [pos[(start + i) % p] for i in range(p)]


def _chain_edges(group: Group, op: Op, root: int) -> list[tuple[int, int]]:
    line = chain(group, root)
    edges = list(zip(line[:-1], line[1:]))
    if op is Op.REDUCE:
        edges = [(b, a) for a, b in reversed(edges)]
    return edges


def _chain_levels(group: Group, op: Op, root: int) -> list[list[Flow]]:
    """Unit flows (one chunk per channel) of each chain edge, edge by edge."""
    return [[Flow(group.ranks[a], group.ranks[d], 1.0, _nic(group, a, d, c)) for c in range(group.channels)]
            for a, d in _chain_edges(group, op, root)]


MAX_CHAIN_RANKS = 1024
"""The most ranks the chained broadcast and reduce are costed for: the pipeline's ``p−1`` levels and
up to 1,024 chunks make each chunk count's time a sum over ``k+p−2`` step windows of up to ``k`` levels
each (pipeline_cost.py ``PipelineCost.bw_s``), so the work grows as ``p·Σk`` (measured 2026-11-24, 2-core VM shared
with other jobs, ``trainplan collective --op broadcast --algorithm ring``, 21 sizes: 512 ranks 1.8 s
CPU, 1,024 ranks 5.2 s, 2,048 ranks 26 s under cProfile; 8,192 ranks ran past 27 s unfinished, found by the long CLI
fuzz run). A bound on work, not a model limit; all-reduce, reduce-scatter and all-gather are O(p)."""


class Ring(Algorithm):
    """NCCL-style ring: reduce-scatter, all-gather, all-reduce; pipelined chain broadcast and reduce."""

    name = "ring"
    family = "ring"
    pipelined = True
    ops = frozenset({Op.ALL_REDUCE, Op.REDUCE_SCATTER, Op.ALL_GATHER, Op.BROADCAST, Op.REDUCE})

    bound_work = "every step window of a chunk pipeline as deep as the group"

    def rank_limit(self, op: Op) -> int | None:
        return MAX_CHAIN_RANKS if op in (Op.BROADCAST, Op.REDUCE) else None

    def chunk_pipelined(self, op: Op) -> bool:
        return op in (Op.BROADCAST, Op.REDUCE)

    def schedule_key(self, group: Group, op: Op, nbytes: int, root: int = 0) -> tuple | None:
        """Reduce-scatter, all-gather, all-reduce: :func:`ring_transfers` reads the node order, the channel
        count and each channel's NIC by index (``channel mod`` the node's NIC count): the shape only. The
        chained broadcast and reduce pick a chunk count from the paths' costs: per group."""
        return (group.shape,) if op in (Op.ALL_REDUCE, Op.REDUCE_SCATTER, Op.ALL_GATHER) else None

    def local_steps(self, group: Group, op: Op, nbytes: int) -> LocalSteps | None:
        """Reduce-scatter, all-gather, all-reduce: :func:`ring_local_steps` (the same steps as :meth:`schedule`'s,
        ``tests/test_ring_local_form.py``); None for the chained broadcast and reduce (no schedule key)."""
        phases = {Op.REDUCE_SCATTER: ("rs",), Op.ALL_GATHER: ("ag",), Op.ALL_REDUCE: ("rs", "ag")}.get(op)
        return None if phases is None else ring_local_steps(group, nbytes, phases)

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        p, channels = group.p, group.channels
        if op in (Op.BROADCAST, Op.REDUCE):
            return env.best_pipeline(lambda: _chain_levels(group, op, root), nbytes / channels,
                                     group, (self.name, op, root))[0]
        steps = 2 * (p - 1) if op is Op.ALL_REDUCE else p - 1
        per = nbytes / (p * channels)
        if per <= 0:
            return 0.0
        step = uniform_schedule(group, (self.name, "step"),  # one ring step's loads, kept for every size
                                lambda: [list(group.ring_pairs)])
        edge_alphas = step.alphas_s(env, 0).reshape(channels, p).max(axis=0)  # ring_edge_alphas
        return steps * step.bw_s(env, per) + ring_chain_s(edge_alphas, steps)

    def reduce_bytes(self, group: Group, op: Op, nbytes: int) -> float:
        if op in (Op.ALL_REDUCE, Op.REDUCE_SCATTER):
            return (group.p - 1) / group.p * nbytes
        return float(nbytes) if op is Op.REDUCE else 0.0

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        p = group.p
        if op is Op.REDUCE_SCATTER:
            return ring_transfers(group, nbytes, "rs")
        if op is Op.ALL_GATHER:
            return ring_transfers(group, nbytes, "ag")
        if op is Op.ALL_REDUCE:
            return ring_transfers(group, nbytes, "rs") + ring_transfers(group, nbytes, "ag", p - 1)
        channels = group.channels
        k = Env(group.cluster, None).best_pipeline(_chain_levels(group, op, root), nbytes / channels)[1]
        out = []
        for c, (off, length) in enumerate(split(nbytes, channels)):
            for j, (coff, clen) in enumerate(chunked(off, length, k)):
                for e, (a, d) in enumerate(_chain_edges(group, op, root)):
                    out.append(Transfer(step=j + e, src=a, dst=d, offset=coff, nbytes=clen,
                                        reduce=op is Op.REDUCE, channel=c, nic=_nic(group, a, d, c)))
        return out
