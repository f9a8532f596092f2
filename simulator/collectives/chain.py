"""Latency chains: the latency part of a schedule's time (dataflow latency, step-synchronous bandwidth).

A schedule is timed as ``Σ_steps step_bw + L`` (cost.py). The bandwidth term of a step is its
slowest transfer's bytes over its most loaded link, as before; the latency term is no longer the
slowest hop of every step but the longest chain of hop latencies a message can follow through the
schedule (a latency is a delay along the path a chunk travels; a pipelined ring's chunks keep
moving while earlier ones are in flight, so latencies add along the chain, not per step):

    A[r] = 0 for every rank; for each step k, for each transfer t = (src → dst, α_t) of step k:
        A'[dst] = max(A'[dst], A[src] + α_t),   A'[r] ≥ A[r] for every rank
    L = max_r A[r] after the last step

NCCL's tuner charges a ring the same way: the sum of the hop latencies along the ring,
``base + (nsteps − nInterSteps)·intraLat + nInterSteps·interLat`` (tuning.cc) [src: nccl-tuning]. When
every step's transfers share one α and every rank receives in every step, ``L = steps·α``, the old
per-step charge. Transfers of zero bytes are not transfers (no latency either), as in the replay.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

Edge = tuple[int, int, float]
"""``(src rank, dst rank, α seconds)`` of one transfer."""


def chain_latency_s(steps: Iterable[Sequence[Edge]]) -> float:
    """``L`` of the module docstring for steps given as lists of ``(src, dst, α)``."""
    arrival: dict[int, float] = {}
    for step in steps:
        new = dict(arrival)
        for src, dst, alpha in step:
            v = arrival.get(src, 0.0) + alpha
            if v > new.get(dst, 0.0):
                new[dst] = v
        arrival = new
    return max(arrival.values(), default=0.0)


VECTOR_MIN_EDGES = 4096
"""Schedules with fewer ``steps × edges`` than this take :func:`chain_latency_s`'s loop (numpy's per-step cost is
larger there); :func:`chain_latency_steps_s` gives the same float either way."""


def chain_latency_steps_s(distinct: Sequence[Sequence[Edge]], order: Sequence[int]) -> float:
    """:func:`chain_latency_s` of ``[distinct[k] for k in order]``, the same float, with numpy per step when the
    schedule is large (a ring: ``2(p−1)`` steps of ``p·C`` edges; des25).

    Each step is ``A' = A`` then ``A'[dst] = max(A'[dst], A[src] + α)`` over its edges: the sums are the same
    float additions of the same operands, and a maximum does not depend on the order it is taken in
    (``np.maximum.at``); a rank that never received is 0.0 in the array as in the loop's ``get(…, 0.0)``, and
    since the array starts at 0.0 and only grows, its maximum is the loop's ``max(…, default=0.0)``."""
    if len(order) * max(map(len, distinct), default=0) < VECTOR_MIN_EDGES:
        return chain_latency_s(distinct[k] for k in order)
    ids: dict[int, int] = {}
    arrays = [(np.array([ids.setdefault(s, len(ids)) for s, _, _ in step], dtype=np.int64),
               np.array([ids.setdefault(d, len(ids)) for _, d, _ in step], dtype=np.int64),
               np.array([a for _, _, a in step], dtype=float)) for step in distinct]
    arrival = np.zeros(len(ids))
    for k in order:
        src, dst, alpha = arrays[k]
        if len(src):
            new = arrival.copy()
            np.maximum.at(new, dst, arrival[src] + alpha)
            arrival = new
    return float(arrival.max()) if len(ids) else 0.0


def ring_chain_s(edge_alphas: Sequence[float], steps: int) -> float:
    """``L`` of ``steps`` identical ring steps, edge ``i`` = position ``i → i+1`` with latency ``α_i``.

    Every position receives on every step, so ``A`` after ``m`` steps at a position is the sum of
    the ``m`` ring edges ending there; ``L`` = the largest sum of ``m`` cyclically consecutive
    edges: ``⌊m/p⌋·Σα + max over starts of the next (m mod p) edges`` (O(p) with prefix sums).
    """
    p = len(edge_alphas)
    if p == 0 or steps <= 0:
        return 0.0
    laps, rest = divmod(steps, p)
    doubled = np.concatenate([[0.0], np.cumsum(np.concatenate([edge_alphas, edge_alphas]))])
    window = float(np.max(doubled[rest:rest + p] - doubled[:p])) if rest else 0.0
    return laps * float(doubled[p]) + window


class PipelineChain:
    """``L`` of a pipeline's schedule: chunk ``j`` crosses level ``ℓ`` at step ``j + ℓ`` (pipeline_choice.py).

    ``levels`` hold ``(src, dst, α)`` edges. Step ``s`` of ``k`` chunks runs levels
    ``max(0, s−k+1) .. min(L−1, s)``; for ``k ≥ L`` the fill steps are the same for every ``k``, so
    :meth:`many` advances one state through the steady state and drains a copy at each ``k``.
    """

    def __init__(self, levels: list[list[Edge]]):
        ids: dict[int, int] = {}
        self.depth = len(levels)
        self.levels = []
        for lvl in levels:
            best: dict[tuple[int, int], float] = {}
            for s, d, a in lvl:
                key = (ids.setdefault(s, len(ids)), ids.setdefault(d, len(ids)))
                best[key] = max(best.get(key, 0.0), a)
            self.levels.append(best)
        self.n = len(ids)
        self._spans: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._arrays: tuple | None = None  # (level starts, src, dst, α) when built by of_arrays

    @classmethod
    def of_arrays(cls, sizes: list[int], src: np.ndarray, dst: np.ndarray, alpha: np.ndarray) -> PipelineChain:
        """The chain of levels given as arrays, level after level (``sizes[k]`` edges of level ``k``, in order):
        the same ``L`` as the levels' edge lists, built without a Python loop per edge. Edges are not merged
        per (src, dst) pair: a step's ``maximum.at`` over a pair's edges takes ``A[src] + max α`` anyway
        (rounding is monotone, so ``max(x + a, x + b) = x + max(a, b)``, to the bit)."""
        out = cls([])
        out.depth = len(sizes)
        ranks, index = np.unique(np.concatenate([src, dst]), return_inverse=True)
        out.n = len(ranks)
        starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).tolist()
        index, alpha = index.astype(np.int64), np.asarray(alpha, dtype=float)
        out._arrays = (starts, index[:len(src)], index[len(src):], alpha)
        return out

    def _span(self, lo: int, hi: int):
        if (lo, hi) not in self._spans and self._arrays is not None:
            starts, src, dst, alpha = self._arrays
            a, b = starts[lo], starts[hi + 1]
            self._spans[(lo, hi)] = (src[a:b], dst[a:b], alpha[a:b])
        if (lo, hi) not in self._spans:
            edges = [(s, d, a) for lvl in self.levels[lo:hi + 1] for (s, d), a in lvl.items()]
            src = np.array([e[0] for e in edges], dtype=np.int64)
            dst = np.array([e[1] for e in edges], dtype=np.int64)
            self._spans[(lo, hi)] = (src, dst, np.array([e[2] for e in edges], dtype=float))
        return self._spans[(lo, hi)]

    def _step(self, arrival: np.ndarray, lo: int, hi: int) -> np.ndarray:
        src, dst, alpha = self._span(lo, hi)
        new = arrival.copy()
        np.maximum.at(new, dst, arrival[src] + alpha)
        return new

    def of(self, chunks: int) -> float:
        return self.many([chunks])[chunks]

    def many(self, chunk_counts: Iterable[int]) -> dict[int, float]:
        """``{k: L}`` for each chunk count ``k``."""
        depth, out = self.depth, {}
        counts = sorted(set(chunk_counts))
        if depth == 0:
            return {k: 0.0 for k in counts}
        for k in (k for k in counts if k < depth):
            a = np.zeros(self.n)
            for s in range(k + depth - 1):
                a = self._step(a, max(0, s - k + 1), min(depth - 1, s))
            out[k] = _top(a)
        a, done = np.zeros(self.n), 0
        for s in range(depth - 1):  # fill
            a = self._step(a, 0, s)
        for k in (k for k in counts if k >= depth):
            while done < k - depth + 1:  # steady state: all levels
                a, done = self._step(a, 0, depth - 1), done + 1
            b = a
            for s in range(1, depth):  # drain
                b = self._step(b, s, depth - 1)
            out[k] = _top(b)
        return out


def _top(arrival: np.ndarray) -> float:
    return float(arrival.max()) if arrival.size else 0.0
