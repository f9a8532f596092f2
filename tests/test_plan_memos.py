"""des28's per-group memos give the plans and routes of the code they replace, bit for bit:

- a planner's groups read its path cache (:meth:`Group.share_paths`) and each group's pairs' links, paths and path
  signature are read once per (pairs, group) (:meth:`CallPlanner._pair_paths`): every plan equals the plan a fresh
  planner builds for that call alone on groups with caches of their own (rings and trees, several bucket sizes on
  the same groups, fused or not, with and without a degraded NIC);
- a plan step's items checked column by column (:meth:`Holding._checked`) give the routes, bytes and latencies of
  the item-by-item loop, with the resources numbered in the same order, and the same error on a bad value.
"""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from simulator.cluster.facts import DegradedNic
from simulator.cluster.presets import load_preset
from simulator.cluster.topology import path
from simulator.collectives.base import Op
from simulator.collectives.cost import Group
from simulator.collectives.registry import estimate
from simulator.engine.call_plan import CallPlanner
from simulator.engine.network import FlowNetwork
from simulator.errors import SpecError
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport
from local_form_plans import dp_groups


class _OwnCaches(CallPlanner):
    """The reference: every group with a path cache of its own (before des28)."""

    def _group(self, group):
        shaped = self._groups.get(group)
        if shaped is None:
            shaped = self._groups[group] = Group(self.cluster, group)
        return shaped


def _plan_values(plan):
    return plan.pre_s, plan.gamma_s, [[(p, b, lat) for p, b, lat in step] for step in plan.steps], plan.resources


@pytest.mark.parametrize("fuse, sick", [(True, False), (False, True)], ids=["fused", "unfused-degraded-nic"])
def test_shared_caches_give_the_plans_of_fresh_planners(fuse, sick):
    cluster = load_preset("dgx-a100").with_nodes(48)
    if sick:
        cluster = replace(cluster, degraded_nics=(DegradedNic(node=4, nic=0, bw_fraction=0.02),))
    shared = CallPlanner(cluster, fuse=fuse)
    n = 0
    for algorithm in (CollectiveAlgorithm.TREE, CollectiveAlgorithm.RING):
        for nbytes in (26_214_400, 9_844_736, 4100):  # two bucket sizes of one group reuse its pairs' paths
            for g in dp_groups():
                call = CommCall(kind=CommKind.DP, op=Op.ALL_REDUCE, group=g, nbytes=nbytes,
                                transport=Transport.COLLECTIVE, algorithm=algorithm,
                                time_s=estimate(cluster, list(g), Op.ALL_REDUCE, nbytes, algorithm.value).time_s)
                assert _plan_values(shared.plan(call, g)) == _plan_values(_OwnCaches(cluster, fuse=fuse).plan(call, g))
                n += 1
    assert n == 2 * 3 * len(dp_groups())
    assert len(shared._pair_path_memo) < n  # the memo was hit: the test compares the shared path


def test_a_group_that_read_its_own_paths_refuses_another_cache():
    cluster = load_preset("dgx-a100").with_nodes(4)
    group = Group(cluster, (0, 8, 16))
    cache = {}
    assert group.share_paths(cache).paths is cache and group.share_paths(cache) is group
    other = Group(cluster, (0, 8))
    assert other.paths == {}
    with pytest.raises(ValueError, match="share_paths"):
        other.share_paths(cache)


_CLUSTER = load_preset("dgx-a100").with_nodes(24)
_PATHS = [path(_CLUSTER, s, d, n) for s, d, n in
          ((0, 8, 0), (8, 0, 0), (0, 1, None), (9, 170, 1), (170, 9, 2), (0, 8, 0), (40, 100, 3), (3, 5, None))]
_GOOD = st.one_of(st.integers(0, 2**40), st.floats(0.0, 1e12), st.just(0.0))
_BAD = st.sampled_from([float("nan"), float("inf"), -1.0, -1e-300, float("-inf")])


def _loop(items):
    net = FlowNetwork(None)
    try:
        return net._checked_loop(list(items)), net._res_index, None
    except SpecError as e:
        return None, None, str(e)


def _columns(items):
    net = FlowNetwork(None)
    try:
        return net._checked(items), net._res_index, None
    except SpecError as e:
        return None, None, str(e)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(_PATHS))), _GOOD, st.one_of(st.none(), st.floats(0.0, 1e-3))),
                max_size=40),
       st.one_of(st.none(), st.tuples(st.integers(0, 39), st.booleans(), _BAD)))
def test_columns_check_as_the_loop_does(rows, bad):
    items = [[_PATHS[k], b, lat] for k, b, lat in rows]
    if bad is not None and items:
        k, in_bytes, value = bad
        items[k % len(items)][1 if in_bytes else 2] = value
    items = [tuple(i) for i in items]
    (out, numbering, error), (ref, ref_numbering, ref_error) = _columns(items), _loop(items)
    assert error == ref_error
    if ref is not None:
        routes, nbytes, latencies = out
        assert [r.res for r in routes] == [r.res for r in ref[0]] and [r.path for r in routes] == [r.path for r in ref[0]]
        assert nbytes == ref[1] and latencies == ref[2] and list(numbering.items()) == list(ref_numbering.items())
        assert all(type(b) is float for b in nbytes)
