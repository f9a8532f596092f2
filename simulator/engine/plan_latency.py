"""A chunk pipeline's latency (:func:`~simulator.collectives.algorithm.pipeline_latency_s`) from a local schedule's
structure and one group's α per pair, with numpy: the same floats as the cost model's loop, without a schedule
built on the group.

``pipeline_latency_s`` keeps, per (rank, byte offset), the latest arrival of those bytes: step by step, a transfer
of offset ``o`` from ``s`` to ``d`` arrives at ``arrival[s, o] + α(s, d, NIC)``, read from the previous steps only,
and ``arrival[d, o']`` becomes the max of what it was (0 at first) and the step's arrivals there. The result is
``max(arrival) + (k − 1)·α_max·share`` (``k`` the most transfers on one (src, dst, channel) edge, ``α_max`` the
largest α). Only the α depend on the group; which rank sends which offset to whom, in which step, on which
channel, is the local schedule's (group indices; a NIC as its index in the sender node's set), shared by every
group of its key. Here the (rank, offset) keys are numbered once per local schedule; each step gathers its
senders' arrivals, adds the α (the same additions), and scatters the max into the receivers
(``np.maximum.at``: a max is exact and order-free); the gather precedes the scatter, so a step reads the previous
steps only. ``tests/test_engine_plan_latency.py`` checks it ``==`` against ``pipeline_latency_s`` on schedules built
for the groups themselves.
"""

from __future__ import annotations

import numpy as np

from simulator.collectives.cost import Env


class PipelineRows:
    """A local schedule's transfers with bytes, step by step, as (sender key, receiver key, pair index) arrays."""

    __slots__ = ("local", "steps", "keys", "chunks")

    def __init__(self, local):
        self.local = local
        group = local.group
        nic_index = [{nic: i for i, nic in enumerate(nics)} for nics in group.nic_sets]
        node = group.node_index
        pair_ix = {pair: i for i, pair in enumerate(local.pairs)}
        keys: dict[tuple[int, int], int] = {}
        per_edge: dict[tuple[int, int, int], int] = {}
        self.steps = []
        for step in local.schedule.steps():
            src, dst, pairs = [], [], []
            for t in step:
                if t.nbytes <= 0:
                    continue
                src.append(keys.setdefault((t.src, t.offset), len(keys)))
                dst.append(keys.setdefault((t.dst, t.recv_offset), len(keys)))
                pairs.append(pair_ix[(t.src, t.dst, None if t.nic is None else nic_index[node[t.src]][t.nic])])
                edge = (t.src, t.dst, t.channel)
                per_edge[edge] = per_edge.get(edge, 0) + 1
            if src:
                self.steps.append((np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                                   np.array(pairs, dtype=np.int64)))
        self.keys = len(keys)
        self.chunks = max(per_edge.values(), default=1)


def pipeline_latency(rows: PipelineRows, costs: Env, alphas: list[float]) -> float:
    """``pipeline_latency_s(costs, schedule)`` of the local schedule on the group whose pairs have α ``alphas``
    (``costs.latency_s`` of each pair's path, in :attr:`LocalSchedule.pairs` order)."""
    alpha = np.array(alphas, dtype=float)
    arrival = np.zeros(rows.keys)
    for src, dst, pairs in rows.steps:
        np.maximum.at(arrival, dst, arrival[src] + alpha[pairs])
    alpha_max = max(0.0, float(alpha.max())) if rows.steps else 0.0
    latest = float(arrival.max()) if rows.keys else 0.0
    return latest + (rows.chunks - 1) * alpha_max * costs.chunk_latency_share
