"""des28's per-group memos give the plans of the code they replace, bit for bit:

- a planner's groups read its path cache (:meth:`Group.share_paths`) and each group's pairs' links, paths and path
  signature are read once per (pairs, group) (:meth:`CallPlanner._pair_paths`): every plan equals the plan a fresh
  planner builds for that call alone on groups with caches of their own (rings and trees, several bucket sizes on
  the same groups, fused or not, with and without a degraded NIC).
"""

from dataclasses import replace

import pytest

from simulator.cluster.facts import DegradedNic
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.collectives.cost import Group
from simulator.collectives.registry import estimate
from simulator.engine.call_plan import CallPlanner
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
