"""A pipeline's bandwidth term from its kept window profiles (pipeline_cost.py ``PipelineCost.bw_s``: one vector
product per size and chunk count) is, to the bit, the per-step sum of :meth:`PipelineCost.cost` it replaced: the fill,
the steady steps and the drain for ``chunks ≥ L``, every step's window below, on real tree and chained-broadcast
pipelines under every protocol, at random sizes (whole and fractional bytes) and chunk counts, asked in random order."""

import pytest
from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.collectives import registry
from simulator.collectives.base import Op
from simulator.collectives.cost import Env
from simulator.collectives.pipeline_cost import PipelineCost
from simulator.collectives.ring import _chain_levels
from simulator.collectives.tree import DoubleBinaryTree


def _per_step_sum(cost: PipelineCost, chunks: int, b: float) -> float:
    """The step-by-step sum (the formula before the kept windows)."""
    depth = cost.depth
    if depth == 0:
        return 0.0
    if chunks >= depth:
        fill = sum(cost.cost(0, s, b) for s in range(depth - 1))
        drain = sum(cost.cost(s, depth - 1, b) for s in range(1, depth))
        return fill + (chunks - depth + 1) * cost.cost(0, depth - 1, b) + drain
    return sum(cost.cost(max(0, s - chunks + 1), min(depth - 1, s), b) for s in range(chunks + depth - 1))


def _pipelines():
    out = []
    for name, ranks in [("dgx-a100", tuple(range(0, 64, 2))), ("dgx-h100", (0, 1, 2, 5, 8, 9, 12, 15)),
                        ("dgx-a100", (0, 1))]:
        cluster = load_preset(name, 8)
        group = registry._group(cluster, ranks)
        for family, levels in [("tree", DoubleBinaryTree()._unit_levels(group)),
                               ("ring", _chain_levels(group, Op.BROADCAST, 1))]:
            for protocol in [None, *cluster.comm.protocols]:
                out.append(PipelineCost(Env(cluster, protocol, group.paths, family=family), levels))
    return out


_PIPELINES = _pipelines()
_SIZE = st.one_of(st.integers(1, 2**40), st.floats(1e-3, 1e12, allow_nan=False, allow_infinity=False))


@settings(max_examples=60, deadline=None)
@given(which=st.integers(0, len(_PIPELINES) - 1),
       asks=st.lists(st.tuples(st.integers(1, 1100), _SIZE), min_size=1, max_size=12))
def test_kept_windows_give_the_per_step_sum(which, asks):
    cost = _PIPELINES[which]
    for chunks, b in asks:
        assert cost.bw_s(chunks, b) == _per_step_sum(cost, chunks, b)


@pytest.mark.parametrize("chunks", [1, 2, 7, 8, 1024])
def test_every_chunk_count_of_a_deep_tree(chunks):
    cluster = load_preset("dgx-a100", 32)
    group = registry._group(cluster, tuple(range(256)))
    cost = PipelineCost(Env(cluster, None, group.paths, family="tree"), DoubleBinaryTree()._unit_levels(group))
    assert cost.depth > 8  # both branches: chunks below and at or past the depth
    for b in (1.0, 3.0 / 7.0, 1e6 / 3.0, 123456789.0):
        assert cost.bw_s(chunks, b) == _per_step_sum(cost, chunks, b)
