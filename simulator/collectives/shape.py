"""Size-independent structure of a schedule whose flows all carry the same bytes, cached per group.

A table of sizes (``trainplan collective --bytes 2KiB..1MiB``) costs the same flows at every size;
only their bytes change. For a schedule whose flows in every step carry one size ``b`` (direct,
pairwise all-to-all), cost.py's terms split into a part fixed by the group and one linear in ``b``:

    step_bw(b) = max over links r the step crosses of (c_r · b) / (bw_r · ratio)
    L          = chain_latency_s of the steps' (src, dst, α) edges, independent of b (b > 0)

with ``c_r`` the number of the step's flows that cross link ``r`` (its load is ``c_r·b`` bytes)
and ``ratio`` the protocol's bandwidth ratio (:meth:`Env.bw_ratio`). :class:`UniformSchedule`
looks the paths up once and keeps, per step, the pairs ``(c_r, bw_r)`` as arrays, so a further
size costs one vector expression per step instead of ``p²`` path look-ups; the latency is kept
per protocol. Same terms as :meth:`Env.steps_time_s` of the same flows: identical where ``b`` is a
whole number of bytes (``c_r·b`` is then the exact sum), else within a few ulps of the sum.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from simulator.cluster.spec import LinkClass
from simulator.cluster.topology import Path, path
from simulator.collectives.chain import chain_latency_s
from simulator.collectives.cost import Env, Group

Pair = tuple[int, int, int | None]
"""``(src rank, dst rank, NIC or None)`` of one flow (global ranks, as :class:`cost.Flow`)."""


class UniformSchedule:
    """The link loads per flow byte and the latency edges of a schedule's steps (module docstring)."""

    def __init__(self, group: Group, steps: list[list[Pair]]):
        kinds: dict[tuple, int] = {}  # (link class, links' own latency) → index into self.kinds
        self.kinds: list[Path] = []
        """One path per distinct (link class, latency): what :meth:`Env.latency_s` reads."""
        self.steps: list[tuple[np.ndarray, np.ndarray]] = []
        self.edges: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        paths = group.paths  # shared with the group's other schedules (paths do not depend on protocol)
        for step in steps:
            res_ids: dict[tuple, int] = {}
            rows: dict[Pair, int] = {}  # a ring step's channels repeat their connections inside nodes
            which = np.array([rows.setdefault(pair, len(rows)) for pair in step], dtype=np.int64)
            flows_per_row = np.bincount(which, minlength=len(rows)).tolist()
            hop_res, hop_bw, hop_flows, row_kind = [], [], [], []
            for pair, n in zip(rows, flows_per_row):  # one path read per distinct connection, in first-use order
                p = paths.get(pair)
                if p is None:
                    p = paths[pair] = path(group.cluster, *pair)
                k = kinds.setdefault((p.link_class, p.latency_s), len(kinds))
                if k == len(self.kinds):
                    self.kinds.append(p)
                row_kind.append(k)
                for hop in p.hops:
                    hop_res.append(res_ids.setdefault(hop.resource, len(res_ids)))
                    hop_bw.append(hop.link.bw_Bps)
                    hop_flows.append(n)
            kind_of = np.array(row_kind, dtype=np.int64)[which]
            # flows through each link: whole numbers, so the weighted sum is the count exactly
            count = np.bincount(np.array(hop_res, dtype=np.int64), weights=np.array(hop_flows, dtype=float),
                                minlength=len(res_ids))
            pairs = np.unique(np.array([hop_res, hop_bw], dtype=float).T, axis=0) if hop_res else np.empty((0, 2))
            self.steps.append((count[pairs[:, 0].astype(np.int64)].astype(float), pairs[:, 1].copy()))
            self.edges.append((np.array([s for s, _, _ in step], dtype=np.int64),
                               np.array([d for _, d, _ in step], dtype=np.int64), kind_of))
        self._latency: dict[tuple, tuple] = {}
        self._alphas: dict[tuple, tuple] = {}

    def bw_s(self, env: Env, nbytes: float) -> float:
        """``Σ_steps step_bw`` with every flow carrying ``nbytes`` (cost.py ``Env.steps_bw_s``)."""
        if nbytes <= 0:
            return 0.0
        b, ratio = float(nbytes), env.bw_ratio
        return sum(float(np.max((count * b) / (bw * ratio))) if count.size else 0.0 for count, bw in self.steps)

    def alphas_s(self, env: Env, step: int) -> np.ndarray:
        """α of each flow of ``step`` under the env's protocol (:meth:`Env.latency_s` of its path), plus
        the per-post overhead of its step's other network messages (:meth:`Env.edges`); kept per protocol
        (no size enters: a ring's latency term at a further size reads them again), read-only."""
        key = (id(env.protocol), env.family, env.post_overhead_s, step)  # the entry holds the protocol: its id stays unique
        kept = self._alphas.get(key)
        if kept is None:
            alphas = self._alphas_s(env, step)
            alphas.flags.writeable = False
            kept = self._alphas[key] = (alphas, env.protocol)
        return kept[0]

    def _alphas_s(self, env: Env, step: int) -> np.ndarray:
        src, dst, kind = self.edges[step]
        alphas = np.array([env.latency_s(p) for p in self.kinds], dtype=float)[kind]
        o = env.post_overhead_s
        net = np.array([p.link_class is LinkClass.NET for p in self.kinds], dtype=bool)[kind]
        if o > 0 and net.any():  # distinct network peers of each sender and receiver in the step
            pairs = np.unique(np.stack([src[net], dst[net]]), axis=1)
            sends = np.bincount(pairs[0], minlength=1 + int(max(src.max(), dst.max())))
            recvs = np.bincount(pairs[1], minlength=sends.size)
            alphas = alphas + np.where(net, (np.maximum(sends[src], recvs[dst]) - 1) * o, 0.0)
        return alphas

    def latency_s(self, env: Env) -> float:
        """``L``: the longest α chain through the steps (cost.py ``Env.chain_latency_s``), per protocol."""
        key = (id(env.protocol), env.family, env.post_overhead_s)  # the entry holds the protocol: its id stays unique
        if key not in self._latency:
            self._latency[key] = (chain_latency_s(
                zip(src.tolist(), dst.tolist(), self.alphas_s(env, k).tolist())
                for k, (src, dst, _) in enumerate(self.edges)), env.protocol)
        return self._latency[key][0]

    def time_s(self, env: Env, nbytes: float) -> float:
        """``Σ step_bw + L`` (:meth:`Env.steps_time_s`); nothing moves (and no latency) at 0 bytes."""
        if nbytes <= 0:
            return 0.0
        return self.bw_s(env, nbytes) + self.latency_s(env)


def uniform_schedule(group: Group, key: tuple, steps: Callable[[], list[list[Pair]]]) -> UniformSchedule:
    """The :class:`UniformSchedule` ``key`` names on ``group``, built from ``steps()`` the first
    time and kept in :attr:`Group.shapes` (the group's layout fixes it)."""
    if key not in group.shapes:
        group.shapes[key] = UniformSchedule(group, steps())
    return group.shapes[key]


def uniform_time_s(env: Env, group: Group, key: tuple, steps: Callable[[], list[list[Pair]]],
                   nbytes: float) -> float:
    """:meth:`UniformSchedule.time_s` of :func:`uniform_schedule` at ``nbytes`` per flow."""
    return uniform_schedule(group, key, steps).time_s(env, nbytes)
