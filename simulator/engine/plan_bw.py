"""Σ :meth:`~simulator.collectives.cost.Env.step_bw_s` over a local schedule's steps on one group, from the
pairs' paths, with numpy for the large steps: the same floats as the cost model's loop.

``Env.step_bw_s`` of one step: each flow with bytes adds its bytes into every resource its path crosses, in flow
order and each path in hop order (``load[r] = load.get(r, 0.0) + b``), then the step's term is the max over its
hops of ``load[r] / (bw · ratio)``. Here a step is a row of pair indices and bytes (per distinct content of the
:class:`~simulator.engine.shapes.LocalSchedule`, shared by every group of its shape); a group's paths give each
pair its hops' resource numbers (padded to the longest path with a sink that is never read). The loads are
``np.add.at`` of the bytes repeated per hop at those numbers, flattened flow by flow, hop by hop: ``ufunc.at``
is unbuffered and applies the additions one by one in index order (NumPy's reference, ``numpy.ufunc.at``), so
each resource's load is the same sum in the same order from ``0.0``; the divisions are elementwise and the max is
order-free. The steps' terms are then added in the schedule's step order, as ``call_plan`` did.
``tests/test_engine_plan_bw.py`` checks it ``==`` against ``Env.step_bw_s`` on every algorithm's schedules.
"""

from __future__ import annotations

import numpy as np

from simulator.collectives.cost import Env
from simulator.collectives.rotated import RotatedStep

VECTOR_MIN_FLOWS = 64
"""Steps with fewer flows than this take the plain loop (numpy's per-call cost is larger there); both give the
same floats."""


class StepRows:
    """A local schedule's distinct step contents as (pair indices, bytes, flows) of their flows with bytes; a
    :class:`RotatedStep` of ``VECTOR_MIN_FLOWS`` flows or more as (its links' pair indices, shared by its rotations,
    the step itself, None), its bytes read per step by :func:`steps_bw_sum` (no ``p`` rows of ``p·C``: des26)."""

    __slots__ = ("local", "rows")

    def __init__(self, local):
        self.local = local
        index = {pair: i for i, pair in enumerate(local.pairs)}
        self.rows = []
        links_ix: dict[int, np.ndarray] = {}  # id(RotatedStep.links) → its pair indices, shared by its rotations
        for content in local.contents:
            if isinstance(content, RotatedStep) and len(content) >= VECTOR_MIN_FLOWS:  # bytes read per step (des26)
                ix = links_ix.get(id(content.links))
                if ix is None:
                    ix = links_ix[id(content.links)] = np.array([index[pair] for pair in content.links], dtype=np.int64)
                self.rows.append((ix, content, None))
                continue
            flows = [(index[(s, d, n)], float(b)) for s, d, b, n in content if b > 0]
            self.rows.append((np.array([i for i, _ in flows], dtype=np.int64),
                              np.array([b for _, b in flows], dtype=float), flows))


def steps_bw_sum(rows: StepRows, costs: Env, paths: list) -> float:
    """Σ over the schedule's steps (in order) of ``costs.step_bw_s`` of the step's flows on the group whose
    ``paths`` are those of ``rows.local.pairs`` (same order)."""
    number: dict = {}
    hop_res = [[number.setdefault(h.resource, len(number)) for h in p.hops] for p in paths]
    hop_bw = [[costs.bw_Bps(h) for h in p.hops] for p in paths]
    sink = len(number)
    width = max(map(len, hop_res), default=0)
    res_of = np.full((len(paths), width), sink, dtype=np.int64)
    bw_of = np.full((len(paths), width), np.inf)
    for i, (rs, bws) in enumerate(zip(hop_res, hop_bw)):
        res_of[i, :len(rs)] = rs
        bw_of[i, :len(bws)] = bws
    terms = []
    for pair_ix, nbytes, flows in rows.rows:
        if flows is not None and not flows:
            terms.append(0.0)
        elif flows is not None and len(flows) < VECTOR_MIN_FLOWS:
            terms.append(_loop(flows, hop_res, hop_bw))
        else:
            if isinstance(nbytes, RotatedStep):
                nbytes = nbytes.bytes_row()  # lengths[c][(i − r) mod p] as floats, as the row would hold them
            res = res_of[pair_ix]
            load = np.zeros(sink + 1)
            np.add.at(load, res.ravel(), np.repeat(nbytes, width))
            terms.append(float((load[res] / bw_of[pair_ix]).max()))  # the sink's hops: x / inf = 0, never the max
    return sum(terms[k] for k in rows.local.sequence)


def _loop(flows, hop_res, hop_bw) -> float:
    """``Env.step_bw_s``'s loop on renumbered resources."""
    load: dict[int, float] = {}
    links: dict[tuple, None] = {}
    for i, b in flows:
        for r, bw in zip(hop_res[i], hop_bw[i]):
            load[r] = load.get(r, 0.0) + b
            links[(r, bw)] = None
    return max(load[r] / bw for r, bw in links)
