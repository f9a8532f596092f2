"""Max-min fair rates of flows over shared resources, by progressive filling.

Definition (Bertsekas & Gallager, "Data Networks", 2nd ed., §6.5.2): an allocation is max-min fair
when no flow's rate can grow without lowering the rate of a flow that already has no more. It is
what SimGrid's flow-level model computes (Velho et al., ACM TOMACS 2013) [src: velho-2013].

Progressive filling: every resource ``r`` has ``left_r`` (capacity not yet given out) and ``n_r``
(flows crossing it whose rate is not fixed). The resource with the least fair share
``left_r / n_r`` is a bottleneck: its unfixed flows get exactly that share, which is taken off every
other resource they cross; repeat until every flow is fixed. A lazy heap keyed by the share makes
this O(H log H) for H (flow, resource) pairs. Ties go to the resource that appears first in ``flows``
(in flow order, each flow's resources in path order): deterministic, and independent of how resources are
numbered, so a set of flows rated under any renaming of its resources gets the same rates to the bit (what
lets :mod:`simulator.engine.callfold_shapes` share one replay between calls equal up to a renaming).

Large sets (at least ``VECTOR_MIN_HOPS`` pairs) are filled level by level with numpy instead: every
resource whose share equals the least one (to ``TIE_RTOL``) is fixed in the same pass. That is the
same allocation: fixing a bottleneck at share ``m`` leaves a tied resource's share
``(left − k·m)/(n − k) = m`` unchanged. Passes = distinct rate levels (1 to 3 in symmetric schedules).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from itertools import chain
from typing import Protocol, Sequence

import numpy as np

SHARE_FLOOR = 1e-15
"""Float guard: a fixed share is at least this fraction of the resource's capacity (a share is
positive in exact arithmetic; rounding in ``left_r`` must not produce a zero or negative rate)."""
VECTOR_MIN_HOPS = 512
"""(flow, resource) pairs from which numpy's per-pass cost beats the heap's per-pair cost (measured
with benchmarks/bench_network.py; both give the same rates)."""
TABLE_PER_HOP = 16
"""Resource indices (up to the largest one crossed) per (flow, resource) pair up to which :func:`_numbered`
numbers the resources by a table over those indices (O(indices + pairs)) rather than by sorting the pairs
(``np.unique``, O(pairs · log pairs)); both give the same numbering, so the choice changes no rate."""
TIE_RTOL = 1e-12
"""Shares within this relative distance of the least one are the same level (rounding only)."""


class RatedFlow(Protocol):
    """What progressive filling needs of a flow: its resources, bottleneck capacity, and a rate slot."""

    res: tuple[int, ...]
    """Resource indices it crosses (no repeats)."""
    bottleneck_Bps: float
    """Least capacity among its resources."""
    rate: float


def max_min(flows: Sequence[RatedFlow], cap: Sequence[float]) -> None:
    """Set ``f.rate`` of every flow to its max-min fair rate, given resource capacities ``cap[r]``.

    ``flows`` must hold every flow that crosses any of their resources (a union of components).
    """
    routes = [f.res for f in flows]
    hops = sum(map(len, routes))
    if hops >= VECTOR_MIN_HOPS:
        _max_min_levels(flows, cap, hops, routes)
        return
    members: dict[int, list[RatedFlow]] = {}
    for f in flows:
        for r in f.res:
            m = members.get(r)
            if m is None:
                members[r] = [f]
            else:
                m.append(f)
    if hops == len(members):  # no resource shared: each flow runs at its own bottleneck
        for f in flows:
            f.rate = f.bottleneck_Bps
        return
    for f in flows:
        f.rate = -1.0  # unfixed
    left = {r: cap[r] for r in members}
    count = {r: len(m) for r, m in members.items()}
    version = dict.fromkeys(members, 0)
    first = {r: i for i, r in enumerate(members)}  # a tie goes to the first to appear, not the lower index
    heap = [(left[r] / n, first[r], r, 0) for r, n in count.items()]
    heapify(heap)
    while heap:
        share, _, r, v = heappop(heap)
        if v != version[r] or count[r] == 0:
            continue  # stale entry, or every flow of r fixed elsewhere
        count[r] = 0
        share = max(share, cap[r] * SHARE_FLOOR)
        for f in members[r]:
            if f.rate >= 0:
                continue
            f.rate = share
            for q in f.res:
                if q != r and count[q]:
                    left[q] -= share
                    count[q] -= 1
                    version[q] += 1
                    if count[q]:
                        heappush(heap, (max(left[q], 0.0) / count[q], first[q], q, version[q]))


def _max_min_levels(flows: Sequence[RatedFlow], cap: Sequence[float], hops: int, routes: list | None = None) -> None:
    """Progressive filling one rate level per pass, vectorised over (flow, resource) pairs (``hops``: the total
    length of the flows' ``res``; ``routes``: those, if the caller has them)."""
    routes = [f.res for f in flows] if routes is None else routes
    res = np.fromiter(chain.from_iterable(routes), dtype=np.int64, count=hops)
    lengths = np.fromiter(map(len, routes), dtype=np.int64, count=len(flows))
    flow_of = np.repeat(np.arange(len(flows)), lengths)
    used, local = _numbered(res, hops)
    if used.size == hops:  # no resource shared: each flow runs at its own bottleneck
        for f in flows:
            f.rate = f.bottleneck_Bps
        return
    capacity = np.array([cap[r] for r in used.tolist()], dtype=float)  # not the whole list: it grows with the network
    rate = fill_levels(flow_of, local, len(flows), capacity)
    for f, r in zip(flows, rate.tolist()):
        f.rate = r


def fill_levels(flow_of: np.ndarray, res_of: np.ndarray, n_flows: int, capacity: np.ndarray) -> np.ndarray:
    """Progressive filling on (flow, resource) pairs (``flow_of[i]`` crosses resource ``res_of[i]``, local numbers;
    ``capacity[r]``): each pass fixes every open flow crossing a resource whose fair share ``left / count`` is within
    ``TIE_RTOL`` of the least, at that level (floored at ``SHARE_FLOOR`` of the tight capacity), and takes it off its
    resources. The order of the pairs reaches the result only through integer counts per resource. Flows with no
    pair keep −1. The one home of the passes: :func:`_max_min_levels` and the flow store's
    :func:`simulator.engine.settle_arrays.level_rates` both read it."""
    n_res = capacity.size
    left = capacity.astype(float)
    count = np.bincount(res_of, minlength=n_res).astype(float)
    rate = np.full(n_flows, -1.0)
    # Only the open pairs are kept from pass to pass (a flow's pairs close together, when it is fixed), so later
    # passes read fewer; the counts they give are the same integers, hence the same floats.
    with np.errstate(divide="ignore", invalid="ignore"):
        while flow_of.size:
            share = np.where(count > 0, left / count, np.inf)
            level = share.min()
            tight = share <= level * (1 + TIE_RTOL)
            fixed = np.zeros(n_flows, dtype=bool)
            fixed[flow_of[tight[res_of]]] = True
            level = max(level, float(capacity[tight].min()) * SHARE_FLOOR)
            rate[fixed] = level
            done = fixed[flow_of]
            dropped = np.bincount(res_of[done], minlength=n_res)
            left -= level * dropped
            count -= dropped
            count[tight] = 0
            kept = ~done
            flow_of, res_of = flow_of[kept], res_of[kept]
    return rate


def _numbered(res: np.ndarray, hops: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(res, return_inverse=True)``: the distinct resources in increasing order, and each pair's index
    among them. Where the largest index is below ``TABLE_PER_HOP`` per pair, read off a table over every
    index up to it instead of sorting the pairs: the same two arrays (distinct indices in increasing order are
    the table's non-zero entries in order), without the sort that made progressive filling of a 512-node tree
    step (thousands of pairs) O(H log H) per settle."""
    size = int(res.max()) + 1
    if size > TABLE_PER_HOP * hops:
        return np.unique(res, return_inverse=True)
    table = np.zeros(size, dtype=np.int64)
    table[res] = 1
    used = np.flatnonzero(table)
    table[used] = np.arange(used.size)
    return used, table[res]
