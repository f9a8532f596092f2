"""A settle of the flow network on arrays: the walk, the progress and progressive filling as numpy operations over
(flow, resource) pairs, what :class:`~simulator.engine.network_store.StoredNetwork` does for a big settle (and what
``benchmarks/bench_des_settles.py`` checks against the object settles bit for bit and times).

The same IEEE operations as ``FlowNetwork._apply`` and ``_max_min_levels``, element by element:

- :func:`frontier_walk`: the flows connected to the seed resources, one level of the bipartite graph per pass
  (the object settle walks depth-first, one flow at a time).
- progress: ``moved = rate·(now − t_last)``, ``left = remaining − moved`` element-wise (no fused multiply-add, so
  the same bits as the engine's scalar lines), done where due, or ``left ≤ REL_BYTES_TOL·nbytes`` or
  ``left ≤ rate·slack``.
- :func:`level_rates`: ``_max_min_levels``' passes on the pairs (it reads the order of the flows only through
  integer counts per resource, so the rates do not depend on the walk's order).
- :func:`finish_times`: which re-rated flows change rate (``FlowNetwork._rate`` refiles only those) and their
  predicted finishes ``now + remaining / rate``, grouped by value as the engine's buckets are.
"""

from __future__ import annotations

import numpy as np

from simulator.engine.fairshare import fill_levels
from simulator.engine.network import REL_BYTES_TOL


def frontier_walk(flow_of: np.ndarray, res_of: np.ndarray, n_flows: int, n_res: int,
                  seeds: np.ndarray) -> tuple[np.ndarray, int]:
    """The flows connected to the resources ``seeds`` through shared resources, given the (flow, resource) pairs as
    two arrays (``flow_of[i]`` crosses ``res_of[i]``, local numbers), found one level at a time: the flow indices in
    increasing order and the levels taken."""
    res_in = np.zeros(n_res, dtype=bool)
    res_in[seeds] = True
    levels = 0
    while True:
        levels += 1
        flows = np.zeros(n_flows, dtype=bool)
        flows[flow_of[res_in[res_of]]] = True
        grown = res_in.copy()
        grown[res_of[flows[flow_of]]] = True
        if (grown == res_in).all():
            return np.flatnonzero(flows), levels
        res_in = grown


def progress(rate: np.ndarray, t_last: np.ndarray, remaining: np.ndarray, nbytes: np.ndarray, due: np.ndarray,
             now: float, slack: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bytes moved since ``t_last``, bytes left now, and which flows are done (``FlowNetwork._apply``'s test)."""
    moved = rate * (now - t_last)
    left = remaining - moved
    done = due | (left <= REL_BYTES_TOL * nbytes) | (left <= rate * slack)
    return moved, left, done


def level_rates(flow_of: np.ndarray, res_of: np.ndarray, n_flows: int, capacity: np.ndarray,
                bottleneck: np.ndarray) -> np.ndarray:
    """Max-min fair rates of the flows that cross the pairs (``flow_of[i]`` crosses resource ``res_of[i]``, numbered as
    a store keeps them, ``capacity[r]`` its capacity; ``bottleneck[k]``: flow ``k``'s least capacity): the passes of
    :func:`simulator.engine.fairshare._max_min_levels`, which give the same bits under any numbering of the resources
    (``tests/test_engine_renaming.py``). Flows with no pair keep −1."""
    if np.bincount(res_of, minlength=capacity.size).max() <= 1:  # no resource shared: each at its own bottleneck
        rate = np.full(n_flows, -1.0)
        rate[flow_of] = bottleneck[flow_of]
        return rate
    return fill_levels(flow_of, res_of, n_flows, capacity)


def finish_times(before: np.ndarray, after: np.ndarray, left: np.ndarray,
                 now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of re-rated flows with rates ``before`` → ``after`` and ``left`` bytes: which changed rate, the distinct
    predicted finishes ``now + left / after`` of those (the engine's buckets, in increasing order) and each changed
    flow's bucket."""
    changed = after != before
    instants, bucket = np.unique(now + left[changed] / after[changed], return_inverse=True)
    return changed, instants, bucket
