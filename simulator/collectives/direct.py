"""One-shot (direct) collectives and pairwise all-to-all: everyone talks to everyone at once.

Direct: every message of the collective goes in a single step (NCCL's all-to-all and p2p are built
this way: all sends posted together). With one uniform connection (α, bandwidth B) and a GPU port
carrying all of its rank's messages, the closed forms are one step each:

- all-reduce (one-shot): each rank sends its whole buffer to the ``p−1`` others, which add it:
  ``α + (p−1)·n/B + γ·(p−1)·n``
- reduce-scatter: slice ``j`` to rank ``j``: ``α + ((p−1)/p)·n/B + γ·((p−1)/p)·n``
- all-gather: own slice to everyone: ``α + ((p−1)/p)·n/B``
- all-to-all: slice ``j`` to rank ``j``: ``α + ((p−1)/p)·n/B`` (nccl-tests' busbw factor (p−1)/p)
- broadcast: root to everyone: ``α + (p−1)·n/B`` (the root's port carries all copies)
- reduce: everyone to the root: ``α + (p−1)·n/B + γ·(p−1)·n``
- send/recv: group index 0 to 1: ``α + n/B``

Pairwise exchange all-to-all (Thakur et al. 2005 §5): ``p−1`` steps, at step ``s`` position ``i``
sends to position ``i+s``: ``(p−1)·(α + (n/p)/B)`` ≈ Thakur's ``(p−1)α + nβ``. Across nodes a step
mixes link classes; the latency is then the schedule's chain from the same per-step flows (cost.py
``steps_time_s``), not ``p−1`` times the network α. A one-step collective's chain is its slowest α.

All-to-all moves ``p`` equal blocks of ``⌊n/(4p)⌋·4`` bytes (:func:`a2a_blocks`), as nccl-tests does
(its count per peer rounds down); when ``n`` is not a multiple of ``4p`` the tail is not sent (the
uneven slices of :func:`split` would not fit each other's places). The diagonal block (rank ``i``'s
block ``i`` to itself) is a local copy, not a transfer; the executor and the replayer copy it before
the schedule runs.
"""

from __future__ import annotations

from simulator.collectives.algorithm import Algorithm
from simulator.collectives.base import Op, Transfer, split
from simulator.collectives.cost import Env, Group
from simulator.collectives.shape import uniform_time_s


def a2a_blocks(nbytes: int, p: int) -> list[tuple[int, int]]:
    """All-to-all blocks: ``p`` equal (offset, length) blocks of whole 4-byte elements."""
    size = (nbytes // (4 * p)) * 4
    return [(j * size, size) for j in range(p)]


def _pairs(p: int, op: Op, root: int) -> list[tuple[int, int]]:
    if op is Op.SEND_RECV:
        return [(0, 1)]
    if op is Op.BROADCAST:
        return [(root, j) for j in range(p) if j != root]
    if op is Op.REDUCE:
        return [(i, root) for i in range(p) if i != root]
    return [(i, j) for i in range(p) for j in range(p) if i != j]


MAX_PAIR_FLOW_RANKS = 1024
"""The most ranks direct and pairwise are costed for: their cost enumerates the p² rank pairs, so time
and memory grow with the square of the group (measured 2026-11-24, 2-core VM shared with other jobs,
``trainplan collective --cluster dgx-h100 --algorithm direct --bytes 1KB..1MB``: 1,024 ranks 8.3 s CPU
and 0.46 GB, 2,048 ranks 32 s and 1.6 GB; 8,192 ranks ran past 60 s and 11.8 GB, found by the long
CLI fuzz run). A bound on work, not a model limit."""


class Direct(Algorithm):
    """Every transfer in one step."""

    name = "direct"
    family = "ring"
    ops = frozenset(Op)
    max_ranks = MAX_PAIR_FLOW_RANKS

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        per = nbytes / group.p if op in (Op.REDUCE_SCATTER, Op.ALL_GATHER) else nbytes
        if op is Op.ALL_TO_ALL:
            per = a2a_blocks(nbytes, group.p)[0][1]
        ranks = group.ranks
        return uniform_time_s(env, group, (self.name, op, root),
                              lambda: [[(ranks[a], ranks[b], None) for a, b in _pairs(group.p, op, root)]], per)

    def reduce_bytes(self, group: Group, op: Op, nbytes: int) -> float:
        p = group.p
        if op in (Op.ALL_REDUCE, Op.REDUCE):
            return (p - 1) * nbytes
        return (p - 1) / p * nbytes if op is Op.REDUCE_SCATTER else 0.0

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        slices = a2a_blocks(nbytes, group.p) if op is Op.ALL_TO_ALL else split(nbytes, group.p)
        out = []
        for a, b in _pairs(group.p, op, root):
            if op is Op.REDUCE_SCATTER:
                out.append(Transfer(step=0, src=a, dst=b, offset=slices[b][0], nbytes=slices[b][1], reduce=True))
            elif op is Op.ALL_GATHER:
                out.append(Transfer(step=0, src=a, dst=b, offset=slices[a][0], nbytes=slices[a][1]))
            elif op is Op.ALL_TO_ALL:
                out.append(Transfer(step=0, src=a, dst=b, offset=slices[b][0], nbytes=slices[b][1],
                                    dst_offset=slices[a][0]))
            else:
                out.append(Transfer(step=0, src=a, dst=b, offset=0, nbytes=nbytes,
                                    reduce=op in (Op.ALL_REDUCE, Op.REDUCE)))
        return out


class Pairwise(Algorithm):
    """Pairwise-exchange all-to-all: ``p−1`` steps, one partner per step."""

    name = "pairwise"
    family = "ring"
    ops = frozenset({Op.ALL_TO_ALL})
    max_ranks = MAX_PAIR_FLOW_RANKS

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        p, order = group.p, group.order
        block = a2a_blocks(nbytes, p)[0][1]
        ranks = group.ranks
        return uniform_time_s(env, group, (self.name, op), lambda: [
            [(ranks[order[v]], ranks[order[(v + s) % p]], None) for v in range(p)] for s in range(1, p)], block)

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        p, order = group.p, group.order
        slices = a2a_blocks(nbytes, p)
        out = []
        for s in range(1, p):
            for v in range(p):
                a, b = order[v], order[(v + s) % p]
                out.append(Transfer(step=s - 1, src=a, dst=b, offset=slices[b][0], nbytes=slices[b][1],
                                    dst_offset=slices[a][0]))
        return out
