"""The double binary tree's flows built as arrays from the node partition (tree_edges.py) are the per-flow reference's
(``DoubleBinaryTree._unit_levels``, tree.py's ``tree_parents``): the same (src, dst, NIC) flows on every level, the
same most-children count, and the same times and chunk counts to the bit under every protocol, for groups drawn
over presets, node counts, rank subsets and placement orders, and for the bench's 1,024- and 512-rank groups."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from presets_once import preset
from simulator.cluster.presets import load_preset
from simulator.collectives.cost import Env
from simulator.collectives.group import Group
from simulator.collectives.pipeline_cost import PipelineCost, PipelineLayout
from simulator.collectives.tree import DoubleBinaryTree, tree_parents
from simulator.collectives.tree_edges import most_children, tree_unit_edges

TREE = DoubleBinaryTree()
PRESETS = ("dgx-a100", "dgx-h100", "dgx-v100", "h100-roce")


@st.composite
def groups(draw):
    cluster = preset(draw(st.sampled_from(PRESETS)), draw(st.integers(1, 6)))
    ranks = draw(st.permutations(range(cluster.world_size)))
    return Group(cluster, tuple(ranks[:draw(st.integers(2, len(ranks)))]))


def _reference_most_children(group: Group) -> int:
    children: dict[int, int] = {}
    for c in range(2 * group.channels):
        for up in tree_parents(group, mirrored=bool(c % 2)).values():
            if up is not None:
                children[up] = children.get(up, 0) + 1
    return max(children.values())


def _times(group: Group, layout) -> list:
    """(time, chunks) under every protocol at a few sizes, uncached (no group, no key)."""
    out = []
    for protocol in [None, *group.cluster.comm.protocols]:
        env = Env(group.cluster, protocol, group.paths, family="tree", group=group)
        for nbytes in (4096, 3 << 20, 1 << 30):
            out.append(env.best_pipeline(lambda: layout(env), nbytes / (2 * group.channels)))
    return out


def _same_costs(group: Group) -> None:
    ref = TREE._unit_levels(group)
    assert _times(group, lambda env: ref) == _times(group, lambda env: TREE._unit_layout(env, group))


@settings(max_examples=60, deadline=None)
@given(group=groups())
def test_the_array_flows_are_the_reference_flows(group):
    """Level by level the same multiset of (src, dst, NIC) unit flows; fails if a depth, a level, a channel's tree or
    NIC, or a chain edge is read otherwise."""
    sizes, src, dst, nic = tree_unit_edges(group)
    ref = TREE._unit_levels(group)
    assert sizes == [len(lvl) for lvl in ref]
    starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    for k, lvl in enumerate(ref):
        got = [(s, d, None if n < 0 else n) for s, d, n in zip(src[starts[k]:starts[k + 1]].tolist(),
                                                               dst[starts[k]:starts[k + 1]].tolist(),
                                                               nic[starts[k]:starts[k + 1]].tolist())]
        assert sorted(got, key=repr) == sorted(((f.src, f.dst, f.nic) for f in lvl), key=repr)
        assert all(f.nbytes == 1.0 for f in lvl)
    assert most_children(group) == _reference_most_children(group)


@settings(max_examples=25, deadline=None)
@given(group=groups())
def test_the_array_layout_costs_the_same(group):
    """Times and chunk counts equal to the bit under every protocol, and every step window's profile, the chain
    latency and the slowest hop of the layout equal the reference layout's."""
    _same_costs(group)
    env = Env(group.cluster, None, group.paths, family="tree")
    new, old = PipelineCost(env, TREE._unit_layout(env, group)), PipelineCost(env, TREE._unit_levels(group))
    assert (new.latency_s, new.alpha_max_s, new.depth) == (old.latency_s, old.alpha_max_s, old.depth)
    for lo in range(new.depth):
        for hi in range(lo, new.depth):
            assert new._profile(lo, hi) == old._profile(lo, hi)


@pytest.mark.parametrize("ranks", [tuple(range(1024)), tuple(range(0, 1024, 2)), tuple(range(3, 1024, 8))])
def test_the_bench_groups_cost_the_same(ranks):
    """GPT-3 175B's data-parallel groups on 1,024 A100s (128 nodes): all ranks, every other (512), one per node."""
    group = Group(load_preset("dgx-a100", 128), ranks)
    _same_costs(group)
    assert most_children(group) == _reference_most_children(group)


def test_the_layout_from_arrays_is_the_layout_of_flows():
    """Rows name the same paths (by resource, up to their numbering), bandwidths and kinds as the flows' layout."""
    cluster = load_preset("dgx-h100", 3)
    group = Group(cluster, tuple(range(0, 24, 2)) + (1, 9))
    env = Env(cluster, None, group.paths, family="tree")
    new, old = TREE._unit_layout(env, group), PipelineLayout(env, TREE._unit_levels(group))
    assert new.sizes == old.sizes and new.weight.tolist() == old.weight.tolist()

    def rows(lay):
        named = {}
        for r, h in zip(lay.res.ravel().tolist(), lay.link_bw.ravel().tolist()):
            named.setdefault(r, h)
        kinds = [(lay.kinds[k].link_class, lay.kinds[k].latency_s) for k in lay.kind.tolist()]
        return sorted(zip(np.asarray(lay.src).tolist(), np.asarray(lay.dst).tolist(), lay.level.tolist(),
                          map(tuple, lay.link_bw.tolist()), kinds), key=repr)

    assert rows(new) == rows(old)
