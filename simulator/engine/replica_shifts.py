"""The replica groups of :func:`~simulator.engine.replay_work.replica_groups` shifted along whole dimensions, on arrays.

A group that spans none or all of dp has one copy per value of the dp/tp coordinates it does not span (the free
dimensions): the copy with value ``v`` puts every rank's free coordinate at ``v``. Two different values differ in some
free coordinate for every rank, so the copies are pairwise disjoint, and the group's own values give the group back:
the loop's greedy "disjoint from those already taken" keeps every copy but the group's own, in
``itertools.product`` order. :func:`whole_shifts` builds them as one ``values × ranks`` array and *checks* what the
argument assumes (the own values give the group, no rank twice) rather than trusting the layout; where a check
fails it answers None and the loop decides. ``tests/test_replica_shifts.py`` compares with the loop.
"""

from __future__ import annotations

import numpy as np


def whole_shifts(group: tuple[int, ...], coords: list, free: list[str], dims: dict, strides: dict,
                 count: int) -> list[tuple[int, ...]] | None:
    """Up to ``count − 1`` copies of ``group`` (coordinates ``coords``) with its ``free`` coordinates set to each
    value in turn, ranks ``dp·s_dp + pp·s_pp + tp·s_tp`` (``strides``, dp taken mod its size as in the loop), the
    group's own values left out; None where the copies are not pairwise disjoint or the own values do not give
    ``group`` back (the loop then decides)."""
    if not group:
        return None
    n_dp = dims["dp"]
    fixed = np.array([(0 if "dp" in free else c.dp % n_dp * strides["dp"]) + c.pp * strides["pp"]
                      + (0 if "tp" in free else c.tp * strides["tp"]) for c in coords], dtype=np.int64)
    sizes = [dims[d] for d in free]
    grid = np.indices(sizes).reshape(len(free), -1) if free else np.zeros((0, 1), dtype=np.int64)  # product's order
    shift = np.zeros(grid.shape[1], dtype=np.int64)
    for i, d in enumerate(free):
        shift += (grid[i] % n_dp if d == "dp" else grid[i]) * strides[d]
    copies = shift[:, None] + fixed[None, :]
    own = int(np.ravel_multi_index(tuple(getattr(coords[0], d) for d in free), sizes)) if free else 0
    if copies[own].tolist() != list(group) or np.unique(copies).size != copies.size:
        return None
    keep = np.delete(copies, own, axis=0)[:count - 1]
    return list(map(tuple, keep.tolist()))
