"""A plan step as copies of few parts: one component of each kind stands for all its copies when played alone.

A step's flows split into *components* (flows joined by a shared resource, transitively) and those into *kinds*:
equal up to a renaming of the resources (each component's flows in step order; per flow its route as resources
numbered by first appearance in the component, its bytes and latency; the resources' capacities in that numbering).
A dp tree step at 512 nodes is ~37k components of ~700 kinds (docs/engine.md, des20). :func:`step_kinds` finds
them with numpy; :func:`~simulator.engine.step_ties.played_alone` then plays the first component of each kind on a
scratch network whose filler is chosen by the pair count the whole step would have (:class:`Weighted`).

**Why that play is the whole play's, to the bit** (a step alone on a fresh
:class:`~simulator.engine.network.FlowNetwork`; by induction over its settles, every copy of a kind holding the
state of its first component, so the whole play's state is the reduced play's with each kind repeated):

- *Settle times.* A copy's arrivals (``now + α``), filed finishes (``now + b/r``) and due test (``CLOCK_ULPS·ulp``)
  are its kind's, so both plays settle at the same instants, the same settle events, and their due flows and arrivals
  are whole kinds' copies.
- *The walk.* Its stack holds resources of many components; popping one pushes only its own component's resources,
  so each component's subsequence of the stack is popped and pushed as if that component were walked alone from its
  own seeds (in the same order: first appearance over due flows by creation order, then arrivals). A component's
  flows are thus met in the same order in both plays; the progress arithmetic is per flow.
- *The heap filler* keys resources by ``(share, first appearance in the re-rated list)``; a pop changes ``left`` and
  ``count`` of its own component only, and pops of one component come in its own key order, the first-appearance
  ranks within a component being the walk's (above). Per component the same float operations in the same order.
- *The level filler* reads the pair order only through integer counts per resource; each pass's least share and its
  ``TIE_RTOL`` band are over the set of shares present, which copies repeat and do not change.
- *The switch* between them is the re-rated pairs against ``VECTOR_MIN_HOPS``; a settle re-rates whole components,
  all copies of a kind together, so the whole play's count is ``Σ pairs × copies`` of the reduced play's re-rated
  flows: :class:`Weighted` chooses by it (the plain count picks the heap where the whole step fills by levels:
  ``tests/test_bench_des_plays.py``'s ``_SWITCH``). "No resource shared" (both fillers' early exit) holds for the whole
  step iff it holds for one copy of each kind.
- *The end and the watch.* The step's group ends at the last finish, a kind's;
  :class:`~simulator.engine.step_ties._Watched` checks the filed values' maximum and whether any is a tie: both
  depend on the set of values, which copies repeat.

A capacity that differs (a degraded link), a route, bytes or a latency that differ make another kind: where symmetry
breaks, the copies stop being copies and are played themselves. ``tests/test_engine_step_kinds.py`` plays random steps
both ways and compares ends and reaches.
"""

from __future__ import annotations

from itertools import chain
from operator import itemgetter

import numpy as np

from simulator.engine.fairshare import VECTOR_MIN_HOPS, _max_min_levels, max_min


def components(flow_of: np.ndarray, res: np.ndarray, starts: np.ndarray, n_res: int) -> np.ndarray:
    """The component of each resource (its least member's number): ``res[i]`` is the resource (0..``n_res``−1) of
    pair ``i``, pairs grouped by flow, flow ``k``'s from ``starts[k]``. Least-label propagation through the flows, with
    each label's own label lowered to it (hooking) and labels followed to their fixed point (pointer jumping); stops
    when no label moves: then both resources of every flow carry one label, which is thus constant on components, and
    every label is a member of its resource's component (each is one of the component's own numbers)."""
    label = np.arange(n_res)
    by_res = np.argsort(res, kind="stable")
    res_starts = np.flatnonzero(np.r_[True, res[by_res][1:] != res[by_res][:-1]])
    while True:
        least = np.minimum.reduceat(label[res], starts)[flow_of]  # per pair: the least label on its flow
        new = np.minimum(label, np.minimum.reduceat(least[by_res], res_starts))
        np.minimum.at(new, label, new)
        while True:
            jumped = new[new]
            if (jumped == new).all():
                break
            new = jumped
        if (new == label).all():
            return label
        label = new


def step_kinds(cap, routes, nbytes, latencies) -> tuple[list[int], list[int]] | None:
    """``(kept, copies)``: the indices of the first component of each kind (step order) and, per kept flow, how many
    components of its kind the step has; None where no kind repeats. ``routes`` are the flows' resource tuples in the
    network's numbering (capacities ``cap``), ``nbytes`` and ``latencies`` theirs (the module docstring). Components of
    one size (flows, resources) are compared as rows of int64 (a flow's route length, its renamed route, padded, its
    bytes' and latency's bits; then the capacities' bits) by ``np.unique`` over the rows' bytes: exact, no hash."""
    n = len(routes)
    if n < 2:
        return None
    lengths = np.fromiter(map(len, routes), dtype=np.int64, count=n)
    flat = np.fromiter(chain.from_iterable(routes), dtype=np.int64, count=int(lengths.sum()))
    used, first, res = np.unique(flat, return_index=True, return_inverse=True)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    flow_of = np.repeat(np.arange(n), lengths)
    comp_of_res = components(flow_of, res, starts, used.size)
    comp = comp_of_res[res[starts]]
    by_comp_res = np.lexsort((first, comp_of_res))  # resources by component, then first appearance
    res_runs = _runs(comp_of_res[by_comp_res])
    number = np.empty(used.size, dtype=np.int64)
    number[by_comp_res] = np.arange(used.size) - np.repeat(res_runs[:-1], np.diff(res_runs))
    by_comp = np.argsort(comp, kind="stable")  # flows by component, in step order within it
    flow_runs = _runs(comp[by_comp])
    if flow_runs.size - 1 < 2:
        return None
    width = int(lengths.max())
    rows = np.full((n, width + 3), -1, dtype=np.int64)
    rows[:, 0] = lengths
    rows[flow_of, 1 + np.arange(flat.size) - starts[flow_of]] = number[res]
    rows[:, width + 1] = np.asarray(nbytes, dtype=float).view(np.int64)
    rows[:, width + 2] = np.asarray(latencies, dtype=float).view(np.int64)
    rows = rows[by_comp]
    caps = np.array(itemgetter(*used[by_comp_res].tolist())(cap) if used.size > 1 else [cap[int(used[0])]],
                    dtype=float).view(np.int64)
    n_flows, n_res = np.diff(flow_runs), np.diff(res_runs)
    sizes = n_flows * (used.size + 1) + n_res  # one number per (flows, resources)
    kept_comps, kept_copies = [], []
    for size in np.unique(sizes).tolist():
        which = np.flatnonzero(sizes == size)
        if which.size == 1:
            kept_comps.append(which)
            kept_copies.append(np.ones(1, dtype=np.int64))
            continue
        nf, nr = int(n_flows[which[0]]), int(n_res[which[0]])
        table = np.concatenate([rows[flow_runs[which, None] + np.arange(nf)].reshape(which.size, -1),
                                caps[res_runs[which, None] + np.arange(nr)]], axis=1)
        keys = np.ascontiguousarray(table).view(np.dtype((np.void, table.shape[1] * 8))).ravel()  # a row's bytes
        _, firsts, counts = np.unique(keys, return_index=True, return_counts=True)
        kept_comps.append(which[firsts])
        kept_copies.append(counts)
    comps, copies = np.concatenate(kept_comps), np.concatenate(kept_copies)
    if comps.size == flow_runs.size - 1:
        return None
    flows = np.concatenate([by_comp[flow_runs[c]:flow_runs[c + 1]] for c in comps.tolist()])
    per_flow = np.repeat(copies, n_flows[comps])
    order = np.argsort(flows)
    return flows[order].tolist(), per_flow[order].tolist()


def _runs(sorted_labels: np.ndarray) -> np.ndarray:
    """Where each run of equal values of ``sorted_labels`` starts, and its length at the end."""
    return np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1], True])


class Weighted:
    """A scratch network's filler chosen by the whole step's pair count (mixed into a
    :class:`~simulator.engine.callfold_replay._Scratch`): its flows are one component of each kind, flow ``k``
    (creation order) standing for ``copies[k]`` components (the module docstring, *the switch*)."""

    copies: list[int]

    def _max_min(self, flows, cap) -> None:
        hops = sum(len(f.res) for f in flows)
        copies = self.copies
        if hops < VECTOR_MIN_HOPS <= sum(len(f.res) * copies[f.fid] for f in flows):
            _max_min_levels(flows, cap, hops)
        else:
            max_min(flows, cap)
