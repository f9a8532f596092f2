"""The pipeline arrays built without a loop per edge (pipeline_cost.py, chain.py ``PipelineChain.of_arrays``) give
the same floats, to the bit, as the edge lists they replace: the latency chain of generated levels (repeated
(src, dst) pairs with different α included) at every chunk count, and on real tree and chain pipelines under every
protocol the chain and each step window's bandwidth profile (from the per-level load table, and from the window's
flows) against the per-level formulas written out; a layout with fractional weights keeps no table."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.collectives import registry
from simulator.collectives.base import Op
from simulator.collectives import pipeline_cost
from simulator.collectives.chain import PipelineChain
from simulator.collectives.cost import Env
from simulator.collectives.pipeline_cost import PipelineCost, PipelineLayout
from simulator.collectives.ring import _chain_levels
from simulator.collectives.tree import DoubleBinaryTree

_EDGE = st.tuples(st.integers(0, 9), st.integers(0, 9), st.floats(1e-7, 1e-4, allow_nan=False))


@settings(max_examples=150, deadline=None)
@given(levels=st.lists(st.lists(_EDGE, max_size=12), max_size=9))
def test_the_array_chain_is_the_edge_list_chain(levels):
    sizes = [len(lvl) for lvl in levels]
    flat = [e for lvl in levels for e in lvl]
    arrays = PipelineChain.of_arrays(sizes, np.array([e[0] for e in flat], dtype=np.int64),
                                     np.array([e[1] for e in flat], dtype=np.int64),
                                     np.array([e[2] for e in flat], dtype=float))
    counts = [1, 2, 3, 5, 8, 64]
    assert arrays.many(counts) == PipelineChain(levels).many(counts)


def _masked_profile(cost: PipelineCost, lo: int, hi: int) -> float:
    """A step window's bandwidth per unit, selecting its levels' flows by a mask (the formula before the slices)."""
    sel = (cost.level >= lo) & (cost.level <= hi)
    res, inv_bw = cost.res[sel], cost.inv_bw[sel]
    load = np.bincount(res.ravel(), weights=np.repeat(cost.weight[sel], res.shape[1]), minlength=cost.n_res)
    unit = (load[res] * inv_bw).max(axis=1)
    return float(unit.max()) if unit.size else 0.0


@pytest.mark.parametrize("name, ranks", [("dgx-a100", tuple(range(0, 64, 2))), ("dgx-h100", (0, 1, 2, 5, 8, 9, 12, 15)),
                                         ("dgx-v100", tuple(range(0, 32, 3)))])
@pytest.mark.parametrize("case", ["tree", "ring-broadcast"])
@pytest.mark.parametrize("cells", [pipeline_cost.PREFIX_CELLS, 0])
def test_pipeline_costs_equal_the_per_level_formulas(name, ranks, case, cells, monkeypatch):
    """With the per-level load table and without it (``PREFIX_CELLS`` 0: each window's flows read)."""
    monkeypatch.setattr(pipeline_cost, "PREFIX_CELLS", cells)
    cluster = load_preset(name, 8)
    group = registry._group(cluster, ranks)
    levels = (DoubleBinaryTree()._unit_levels(group) if case == "tree" else _chain_levels(group, Op.BROADCAST, 1))
    family = "tree" if case == "tree" else "ring"
    for protocol in [None, *cluster.comm.protocols]:
        env = Env(cluster, protocol, group.paths, family=family)
        layout = PipelineLayout(env, levels)
        assert (layout.prefix is None) == (cells == 0)
        cost = PipelineCost(env, layout)
        alpha = np.array([env.latency_s(p) for p in layout.kinds], dtype=float)[layout.kind].tolist()
        by_level = [np.flatnonzero(layout.level == k).tolist() for k in range(layout.depth)]
        edges = [[(layout.src[i], layout.dst[i], alpha[i]) for i in idx] for idx in by_level]
        assert cost.latency_s == PipelineChain(edges).of(1)
        assert cost.alpha_max_s == max(alpha, default=0.0)
        for lo in range(layout.depth):
            for hi in range(lo, layout.depth):
                assert cost._profile(lo, hi) == _masked_profile(cost, lo, hi)


@pytest.mark.parametrize("name, ranks", [("dgx-a100", tuple(range(0, 64, 2))), ("dgx-v100", tuple(range(0, 32, 3)))])
def test_layout_rows_are_each_flows_path(name, ranks):
    """Each flow's row names its path's links (one id per resource, the same id wherever the resource recurs), their
    bandwidths, zeros as padding, and a connection kind of its path's class and latency."""
    cluster = load_preset(name, 8)
    group = registry._group(cluster, ranks)
    levels = DoubleBinaryTree()._unit_levels(group)
    env = Env(cluster, None, group.paths, family="tree")
    layout = PipelineLayout(env, levels)
    named: dict[int, tuple] = {}
    for i, f in enumerate(f for lvl in levels for f in lvl):
        p = env.path(f.src, f.dst, f.nic)
        assert layout.res[i, len(p.hops):].tolist() == [0] * (layout.res.shape[1] - len(p.hops))
        assert layout.link_bw[i].tolist() == [h.link.bw_Bps for h in p.hops] + [0.0] * (layout.res.shape[1] - len(p.hops))
        for j, hop in enumerate(p.hops):
            assert named.setdefault(int(layout.res[i, j]), hop.resource) == hop.resource
        kind = layout.kinds[layout.kind[i]]
        assert (kind.link_class, kind.latency_s) == (p.link_class, p.latency_s)
    assert len(set(named.values())) == len(named) == layout.n_res - 1


def test_fractional_weights_keep_no_table():
    """Loads of fractional weights depend on the order they are added in: such a layout reads each window's flows."""
    cluster = load_preset("dgx-h100", 2)
    group = registry._group(cluster, tuple(range(16)))
    levels = [[type(f)(f.src, f.dst, 0.3, f.nic) for f in lvl] for lvl in DoubleBinaryTree()._unit_levels(group)]
    layout = PipelineLayout(Env(cluster, None, group.paths, family="tree"), levels)
    assert layout.prefix is None
    cost = PipelineCost(Env(cluster, None, group.paths, family="tree"), layout)
    assert cost._profile(0, layout.depth - 1) == _masked_profile(cost, 0, layout.depth - 1)


def test_a_resource_at_two_bandwidths_keeps_no_table():
    """A resource crossed at two bandwidths has no one 1/bw: such a layout reads each window's flows."""
    from simulator.cluster.spec import Link, LinkClass, LinkKind
    from simulator.cluster.topology import Hop, Path
    from simulator.collectives.group import Flow

    fast, slow = Link(kind=LinkKind.NVLINK, bw_GBps=100, latency_us=1), Link(kind=LinkKind.NVLINK, bw_GBps=10, latency_us=1)
    paths = {(0, 1): Path((Hop(("x",), fast),), LinkClass.NVLINK, 1e-6),
             (1, 2): Path((Hop(("x",), slow), Hop(("y",), fast)), LinkClass.NVLINK, 1e-6)}

    class _Env:
        bw_ratio = 1.0

        def path(self, src, dst, nic=None):
            return paths[(src, dst)]

    layout = PipelineLayout(_Env(), [[Flow(0, 1, 1.0)], [Flow(1, 2, 1.0)]])
    assert layout.prefix is None
