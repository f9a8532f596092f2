"""A pipelined schedule's levels as arrays, so each step's α-β cost is a few vector operations.

:class:`PipelineLayout` holds what does not depend on the protocol (each flow's links, their
bandwidths, its connection kind and level; kept per group in :attr:`Group.shapes`);
:class:`PipelineCost` applies one protocol's bandwidth ratio and hop latencies to it and prices a
schedule of ``chunks`` chunks, for :meth:`simulator.collectives.pipeline_choice.Pipelining.best_pipeline`.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from simulator.cluster.topology import Path
from simulator.collectives.chain import PipelineChain
from simulator.collectives.group import Flow

if TYPE_CHECKING:
    from simulator.collectives.cost import Env


class PipelineLayout:
    """A pipeline's levels as protocol-independent arrays: each flow's link resources (0: padding)
    and link bandwidths, its connection kind (link class, own latency) and its level."""

    def __init__(self, env: Env, levels: list[list[Flow]]):
        flows = [f for lvl in levels for f in lvl]
        rows: dict[tuple, int] = {}  # (src, dst, nic) → its row among the distinct connections, in first-use order
        which = [rows.setdefault((f.src, f.dst, f.nic), len(rows)) for f in flows]
        self._fill(env, list(rows), which, [f.nbytes for f in flows], [f.src for f in flows],
                   [f.dst for f in flows], [len(lvl) for lvl in levels])

    @classmethod
    def of_edges(cls, env: Env, sizes: list[int], src: np.ndarray, dst: np.ndarray, nic: np.ndarray) -> PipelineLayout:
        """The layout of unit flows given as arrays, level after level (``sizes[k]`` flows of level ``k``): global
        ranks ``src → dst`` leaving by NIC ``nic`` (−1: None). The same layout as the levels of
        ``Flow(src, dst, 1.0, nic)`` but for the order of the distinct connections, and so of the resource numbers,
        which no result reads: a window's profile is a max over resources of exact sums, the chain a max per rank."""
        out = cls.__new__(cls)
        src, dst, nic = (np.asarray(a, dtype=np.int64) for a in (src, dst, nic))
        span, nics = int(max(src.max(initial=0), dst.max(initial=0))) + 1, int(nic.max(initial=-1)) + 2
        _, first, which = np.unique((src * span + dst) * nics + (nic + 1), return_index=True, return_inverse=True)
        rows = [(s, d, None if n < 0 else n)
                for s, d, n in zip(src[first].tolist(), dst[first].tolist(), nic[first].tolist())]
        out._fill(env, rows, which.reshape(-1), np.ones(len(src)), src, dst, list(sizes))
        return out

    def _fill(self, env: Env, rows: list[tuple], which, weight, src, dst, sizes: list[int]) -> None:
        """The arrays from the distinct connections ``rows`` (``(src, dst, nic)``), each flow's row ``which``, its
        weight, ends (global ranks: lists or arrays) and the flows per level."""
        ids: dict[tuple, int] = {}
        kinds: dict[tuple, int] = {}
        self.kinds: list[Path] = []
        """One path per distinct (link class, latency): all :meth:`Env.latency_s` reads of a path."""
        res, bw, kind = [], [], []
        for key in rows:  # one path read per distinct connection; resources numbered in the rows' order
            p = env.path(*key)
            k = kinds.setdefault((p.link_class, p.latency_s), len(kinds))
            if k == len(self.kinds):
                self.kinds.append(p)
            res.append([ids.setdefault(hop.resource, len(ids) + 1) for hop in p.hops])
            bw.append([hop.link.bw_Bps for hop in p.hops])
            kind.append(k)
        width = max(map(len, res), default=1)
        for r, b in zip(res, bw):
            r += [0] * (width - len(r))
            b += [0.0] * (width - len(b))
        which = np.array(which, dtype=np.int64)
        self.res = np.array(res, dtype=np.int64).reshape(len(rows), width)[which]  # index 0: padding, load 0
        self.link_bw = np.array(bw, dtype=float).reshape(len(rows), width)[which]
        self.kind = np.array(kind, dtype=np.int64)[which]
        self.n_res = len(ids) + 1
        self.weight = np.array(weight, dtype=float)
        self.src, self.dst = src, dst
        self.sizes = sizes
        """Flows per level: the flows are in level order (level ``k``: ``starts[k]`` to ``starts[k + 1]``)."""
        self.starts = np.concatenate([[0], np.cumsum(self.sizes, dtype=np.int64)]).tolist()
        self.level = np.repeat(np.arange(len(sizes), dtype=np.int64), self.sizes)
        self.depth = len(sizes)
        self.res_bw, self.prefix = self._level_sums()

    def _level_sums(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(each resource's one link bandwidth, the loads of levels ``0..k−1`` per resource for every ``k``), or
        (None, None) where a window's loads cannot be read from them to the bit: a resource crossed at two
        bandwidths, weights that are not whole numbers (a sum of whole numbers below 2^53 is exact in any order,
        so ``prefix[hi + 1] − prefix[lo]`` is the window's bincount), or a table past :data:`PREFIX_CELLS`."""
        n, width = self.n_res, self.res.shape[1]
        if (self.depth + 1) * n > PREFIX_CELLS or not np.array_equal(self.weight, np.floor(self.weight)):
            return None, None
        if self.weight.sum() * width >= 2.0 ** 53:
            return None, None
        res_bw = np.zeros(n)
        res_bw[self.res.ravel()] = self.link_bw.ravel()
        if not np.array_equal(res_bw[self.res], self.link_bw):  # one bandwidth per resource (padding: 0)
            return None, None
        units = np.repeat(self.weight, width)
        prefix = np.zeros((self.depth + 1, n))
        for k in range(self.depth):
            a, b = self.starts[k], self.starts[k + 1]
            prefix[k + 1] = prefix[k] + np.bincount(self.res[a:b].ravel(), weights=units[a * width:b * width],
                                                    minlength=n)
        return res_bw, prefix


PREFIX_CELLS = 1 << 20
"""The largest per-level load table (levels + 1) × resources a layout keeps (8 MiB): a tree's (~30 levels) always
fits; a chained broadcast over hundreds of ranks (as many levels) reads its windows' flows instead."""


class PipelineCost:
    """The levels of a pipeline as arrays, so each step's cost is a few vector operations.

    ``cost(lo, hi)`` is :meth:`Env.step_bw_s` of all flows of levels ``lo..hi`` at ``b`` bytes per
    unit: ``max_f b · max over f's links r of load_r / bw_r`` with ``load_r`` in units; the latency
    is one chunk's chain (:class:`simulator.collectives.chain.PipelineChain`) plus ``α_max`` per
    further chunk.
    """

    def __init__(self, env: Env, levels: list[list[Flow]] | PipelineLayout):
        lay = levels if isinstance(levels, PipelineLayout) else PipelineLayout(env, levels)
        self.res, self.n_res, self.weight, self.level, self.depth = lay.res, lay.n_res, lay.weight, lay.level, lay.depth
        self.inv_bw = np.zeros(lay.link_bw.shape)  # 1 / (link bw × the protocol's ratio); 0 on padding
        np.divide(1.0, lay.link_bw * env.bw_ratio, out=self.inv_bw, where=lay.link_bw > 0)
        self.prefix, self.inv_res = lay.prefix, None  # per resource: the same 1 / (bw × ratio) as its hops'
        if lay.prefix is not None:
            self.inv_res = np.zeros(lay.n_res)
            np.divide(1.0, lay.res_bw * env.bw_ratio, out=self.inv_res, where=lay.res_bw > 0)
        alpha = np.array([env.latency_s(p) for p in lay.kinds], dtype=float)[lay.kind]
        self.alpha_max_s = float(alpha.max()) if alpha.size else 0.0
        """The slowest hop's latency: what each chunk after the first pays (:meth:`Env.best_pipeline`)."""
        self.share = env.chunk_latency_share
        self.protocol = env.protocol  # kept by id in Group.shapes: holding it keeps the id unique
        self.chain = PipelineChain.of_arrays(lay.sizes, np.array(lay.src, dtype=np.int64),
                                             np.array(lay.dst, dtype=np.int64), alpha)
        self.starts = lay.starts
        self._profiles: dict[tuple[int, int], float] = {}
        self._kept_windows: dict[int | None, tuple] = {}

    @cached_property
    def latency_s(self) -> float:
        """One chunk's latency chain through the levels (``PipelineChain.of(1)``)."""
        return self.chain.of(1)

    def _profile(self, lo: int, hi: int) -> float:
        """``max over the window's flows f, f's links r of load_r / bw_r`` with ``load_r`` the window's units through
        ``r``. With the layout's per-level sums it is ``max over every resource r of load_r · (1 / bw_r)``: a
        resource outside the window adds ``0``, and every value is ``≥ 0``, so the max is the same float."""
        if (lo, hi) not in self._profiles and self.prefix is not None:
            load = self.prefix[hi + 1] - self.prefix[lo]
            self._profiles[(lo, hi)] = float((load * self.inv_res).max())
        if (lo, hi) not in self._profiles:
            sel = slice(self.starts[lo], self.starts[hi + 1])  # levels lo..hi: their flows, in order
            res, inv_bw = self.res[sel], self.inv_bw[sel]
            load = np.bincount(res.ravel(), weights=np.repeat(self.weight[sel], res.shape[1]),
                               minlength=self.n_res)
            unit = (load[res] * inv_bw).max(axis=1)
            self._profiles[(lo, hi)] = float(unit.max()) if unit.size else 0.0
        return self._profiles[(lo, hi)]

    def cost(self, lo: int, hi: int, chunk_bytes: float) -> float:
        return chunk_bytes * self._profile(lo, hi)

    def time_s(self, chunks: int, b: float) -> float:
        """Σ step bandwidth terms + one chunk's latency chain + the per-chunk overhead."""
        return self.bw_s(chunks, b) + self.latency_s + (chunks - 1) * self.alpha_max_s * self.share

    def bw_s(self, chunks: int, b: float) -> float:
        """``Σ_steps cost(window of step s, b)``: the fill, ``chunks − L + 1`` steady steps of all levels and the
        drain for ``chunks ≥ L``, else every step's window. Each window's profile is kept (:meth:`_windows`), so a
        further size or chunk count is one vector product and a sum in step order (the same floats as the sum
        of :meth:`cost` over the steps)."""
        depth = self.depth
        if depth == 0:
            return 0.0
        b = float(b)
        if chunks >= depth:  # fill, steady state (all levels, chunks − L + 1 steps), drain
            fill, full, drain = self._windows(None)
            return sum((b * fill).tolist()) + (chunks - depth + 1) * (b * full) + sum((b * drain).tolist())
        return sum((b * self._windows(chunks)[0]).tolist())

    def _windows(self, chunks: int | None) -> tuple:
        """``chunks`` None (any ``chunks ≥ L``): (the fill steps' profiles, the steady step's, the drain steps'); else
        (the profiles of the ``chunks + L − 1`` steps' windows of levels ``max(0, s−chunks+1) .. min(L−1, s)``,)."""
        kept = self._kept_windows.get(chunks)
        if kept is None:
            depth = self.depth
            if chunks is None:
                kept = (np.array([self._profile(0, s) for s in range(depth - 1)], dtype=float),
                        self._profile(0, depth - 1),
                        np.array([self._profile(s, depth - 1) for s in range(1, depth)], dtype=float))
            else:
                kept = (np.array([self._profile(max(0, s - chunks + 1), min(depth - 1, s))
                                  for s in range(chunks + depth - 1)], dtype=float),)
            self._kept_windows[chunks] = kept
        return kept
