"""Recursive doubling, binomial trees and Rabenseifner's halving-doubling (Thakur et al. 2005 §4–5).

Virtual index ``v`` = position in the node-by-node order (:attr:`Group.order`), so small distances
stay inside a node. Every step is a set of pairwise exchanges; a closed form is cost.py's
``steps_time_s`` of the same per-step flows as the schedule (Σ step bandwidth terms + the latency
chain), so where a step mixes link classes the latency is the longest chain, not the slowest hop
per step. With one uniform connection of latency α and bandwidth 1/β the closed forms reduce to
Thakur's (latency counts below assume every step extends the chain; a binomial tree on a
non-power-of-two group, or the fold, can have a shorter chain, e.g. p = 5 broadcast: 2α, not 3α):

- recursive doubling all-reduce: ``lg p·(α + nβ) + lg p·nγ``
- recursive doubling all-gather: ``lg p·α + ((p−1)/p)·nβ`` (power-of-two groups only; MPICH uses
  Bruck's algorithm otherwise, which we do not model)
- binomial broadcast: ``⌈lg p⌉·(α + nβ)``; binomial reduce the same plus ``⌈lg p⌉·nγ`` at the root
- Rabenseifner all-reduce (recursive halving reduce-scatter, then recursive doubling all-gather):
  ``2 lg p·α + 2((p−1)/p)·nβ + ((p−1)/p)·nγ``
- recursive halving reduce-scatter: ``lg p·α + ((p−1)/p)·nβ + ((p−1)/p)·nγ`` (power of two only)

Groups that are not a power of two (all-reduce only), as MPICH does: with ``m = 2^⌊lg p⌋`` and
``r = p − m``, the first ``2r`` ranks pair up and the odd one of each pair hands its whole buffer to
the even one (one step, reduce), the ``m`` survivors run the power-of-two algorithm, and the result
goes back to the odd ones (one more step): ``+ 2(α + nβ) + nγ``.
"""

from __future__ import annotations

from simulator.collectives.algorithm import Algorithm, is_power_of_two
from simulator.collectives.base import Op, Transfer, split
from simulator.collectives.cost import Env, Flow, Group


def fold(p: int) -> tuple[list[int], list[tuple[int, int]]]:
    """``(survivors, pairs)``: survivor u's virtual index, and (odd v, even v) pairs that fold."""
    m = 1 << (p.bit_length() - 1)
    r = p - m
    survivors = [2 * i for i in range(r)] + list(range(2 * r, p))
    return survivors, [(2 * i + 1, 2 * i) for i in range(r)]


def _lg(m: int) -> int:
    return m.bit_length() - 1


def _pair_steps(m: int, halving: bool) -> list[int]:
    """Exchange distances in step order: 1, 2, … (doubling) or m/2, m/4, … (halving)."""
    dists = [1 << k for k in range(_lg(m))]
    return dists[::-1] if halving else dists


def _rotated(group: Group, root: int) -> list[int]:
    start = group.order.index(root)
    return [group.order[(start + i) % group.p] for i in range(group.p)]


def _binomial(p: int, reduce: bool) -> list[list[tuple[int, int]]]:
    """Per step, (src v, dst v) pairs of a binomial broadcast (distance 1 first) or its reverse."""
    steps = []
    for k in range((p - 1).bit_length()):
        d = 1 << k
        steps.append([(v, v + d) for v in range(d) if v + d < p])
    return [[(b, a) for a, b in s] for s in reversed(steps)] if reduce else steps


class _Pairwise(Algorithm):
    """Shared step helpers: flows and transfers of a list of (src v, dst v, bytes or slice list)."""

    family = "ring"

    @staticmethod
    def _flows(group: Group, vmap: list[int], pairs, nbytes: float) -> list[Flow]:
        return [Flow(group.ranks[vmap[a]], group.ranks[vmap[b]], nbytes) for a, b in pairs]

    @staticmethod
    def _folded(group: Group, nbytes: int, middle: list[list[Flow]]) -> list[list[Flow]]:
        """The steps of a non-power-of-two group: fold in, ``middle``, unfold (just ``middle`` if none)."""
        _, pairs = fold(group.p)
        if not pairs:
            return middle
        there = _Pairwise._flows(group, list(group.order), pairs, nbytes)
        back = _Pairwise._flows(group, list(group.order), [(b, a) for a, b in pairs], nbytes)
        return [there] + middle + [back]


def _block_transfers(step, src, dst, slice_ids, slices, reduce):
    """One transfer per slice of a block (slices of a block need not be contiguous in the buffer)."""
    return [Transfer(step=step, src=src, dst=dst, offset=slices[s][0], nbytes=slices[s][1], reduce=reduce)
            for s in slice_ids]


class RecursiveDoubling(_Pairwise):
    """Recursive doubling all-reduce and all-gather; binomial-tree broadcast and reduce."""

    name = "recursive_doubling"
    ops = frozenset({Op.ALL_REDUCE, Op.ALL_GATHER, Op.BROADCAST, Op.REDUCE})

    def supports_group(self, group: Group, op: Op) -> bool:
        return op is not Op.ALL_GATHER or is_power_of_two(group.p)

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        p = group.p
        if op in (Op.BROADCAST, Op.REDUCE):
            vmap = _rotated(group, root)
            return env.steps_time_s([self._flows(group, vmap, s, nbytes) for s in _binomial(p, op is Op.REDUCE)])
        if op is Op.ALL_GATHER:
            vmap = list(group.order)
            return env.steps_time_s([self._flows(group, vmap, [(v, v ^ d) for v in range(p)], d * nbytes / p)
                                     for d in _pair_steps(p, halving=False)])
        survivors, _ = fold(p)
        vmap = [group.order[v] for v in survivors]
        m = len(survivors)
        return env.steps_time_s(self._folded(group, nbytes, [
            self._flows(group, vmap, [(u, u ^ d) for u in range(m)], nbytes) for d in _pair_steps(m, halving=False)]))

    def reduce_bytes(self, group: Group, op: Op, nbytes: int) -> float:
        if op is Op.REDUCE:
            return nbytes * (group.p - 1).bit_length()
        if op is Op.ALL_REDUCE:
            survivors, pairs = fold(group.p)
            return nbytes * (_lg(len(survivors)) + (1 if pairs else 0))
        return 0.0

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        p, order = group.p, group.order
        if op in (Op.BROADCAST, Op.REDUCE):
            vmap = _rotated(group, root)
            return [Transfer(step=k, src=vmap[a], dst=vmap[b], offset=0, nbytes=nbytes, reduce=op is Op.REDUCE)
                    for k, s in enumerate(_binomial(p, op is Op.REDUCE)) for a, b in s]
        if op is Op.ALL_GATHER:
            slices = split(nbytes, p)
            out = []
            for k, d in enumerate(_pair_steps(p, halving=False)):
                for v in range(p):
                    block = [order[w] for w in range((v // d) * d, (v // d) * d + d)]
                    out += _block_transfers(k, order[v], order[v ^ d], block, slices, False)
            return out
        survivors, pairs = fold(p)
        m, first = len(survivors), 1 if pairs else 0
        out = [Transfer(step=0, src=order[a], dst=order[b], offset=0, nbytes=nbytes, reduce=True)
               for a, b in pairs]
        for k, d in enumerate(_pair_steps(m, halving=False)):
            out += [Transfer(step=first + k, src=order[survivors[u]], dst=order[survivors[u ^ d]], offset=0,
                             nbytes=nbytes, reduce=True) for u in range(m)]
        last = first + _lg(m)
        out += [Transfer(step=last, src=order[b], dst=order[a], offset=0, nbytes=nbytes) for a, b in pairs]
        return out


class HalvingDoubling(_Pairwise):
    """Rabenseifner's all-reduce (recursive halving + doubling); recursive halving reduce-scatter."""

    name = "halving_doubling"
    ops = frozenset({Op.ALL_REDUCE, Op.REDUCE_SCATTER})

    def supports_group(self, group: Group, op: Op) -> bool:
        return op is Op.ALL_REDUCE or is_power_of_two(group.p)

    def _layout(self, group: Group, op: Op, nbytes: int):
        """(vmap, slices, slice id of survivor u): all-reduce cuts m slices, reduce-scatter p by group index."""
        if op is Op.REDUCE_SCATTER:
            return list(group.order), split(nbytes, group.p), list(group.order)
        survivors, _ = fold(group.p)
        m = len(survivors)
        return [group.order[v] for v in survivors], split(nbytes, m), list(range(m))

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        vmap, _, _ = self._layout(group, op, nbytes)
        m = len(vmap)
        halves = [self._flows(group, vmap, [(u, u ^ d) for u in range(m)], d * nbytes / m)
                  for d in _pair_steps(m, halving=True)]
        if op is Op.REDUCE_SCATTER:
            return env.steps_time_s(halves)
        return env.steps_time_s(self._folded(group, nbytes, halves + halves[::-1]))

    def reduce_bytes(self, group: Group, op: Op, nbytes: int) -> float:
        if op is Op.REDUCE_SCATTER:
            return (group.p - 1) / group.p * nbytes
        survivors, pairs = fold(group.p)
        m = len(survivors)
        return (m - 1) / m * nbytes + (nbytes if pairs else 0)

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        vmap, slices, ids = self._layout(group, op, nbytes)
        m, order = len(vmap), group.order
        pairs = fold(group.p)[1] if op is Op.ALL_REDUCE else []
        step = 1 if pairs else 0
        out = [Transfer(step=0, src=order[a], dst=order[b], offset=0, nbytes=nbytes, reduce=True) for a, b in pairs]
        for d in _pair_steps(m, halving=True):  # reduce-scatter: keep the half holding your own slice
            for u in range(m):
                base = (u // (2 * d)) * 2 * d
                give = range(base + d, base + 2 * d) if u & d == 0 else range(base, base + d)
                out += _block_transfers(step, vmap[u], vmap[u ^ d], [ids[w] for w in give], slices, True)
            step += 1
        if op is Op.REDUCE_SCATTER:
            return out
        for d in _pair_steps(m, halving=False):  # all-gather: hand your block of d slices to the partner
            for u in range(m):
                own = range((u // d) * d, (u // d) * d + d)
                out += _block_transfers(step, vmap[u], vmap[u ^ d], [ids[w] for w in own], slices, False)
            step += 1
        out += [Transfer(step=step, src=order[b], dst=order[a], offset=0, nbytes=nbytes) for a, b in pairs]
        return out
