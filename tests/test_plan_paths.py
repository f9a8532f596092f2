"""A collective plan's distinct paths taken from its pairs (:func:`simulator.engine.call_plan.distinct_paths`) are
the distinct paths of its flows, the same objects in the same order (first appearance, step by step): rings and
trees on dp groups across nodes, a tp group inside a node, bytes that split unevenly or leave parts empty, fused
steps or not, with and without a degraded NIC."""

from dataclasses import replace

import pytest

from simulator.cluster.facts import DegradedNic
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.collectives.registry import estimate
from simulator.engine.call_plan import CallPlan, CallPlanner, distinct_paths
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport
from local_form_plans import dp_groups


@pytest.mark.parametrize("fuse, sick", [(True, False), (False, True)], ids=["fused", "unfused-degraded-nic"])
def test_paths_from_pairs_are_the_flows_paths(fuse, sick):
    cluster = load_preset("dgx-a100").with_nodes(48)
    if sick:
        cluster = replace(cluster, degraded_nics=(DegradedNic(node=4, nic=0, bw_fraction=0.02),))
    planner = CallPlanner(cluster, fuse=fuse)
    groups = dp_groups() + [tuple(range(8, 16))]
    n = 0
    for algorithm in (CollectiveAlgorithm.RING, CollectiveAlgorithm.TREE):
        for nbytes in (3 * 2**20 + 6, 4100, 7):
            for g in groups:
                call = CommCall(kind=CommKind.DP, op=Op.ALL_REDUCE, group=g, nbytes=nbytes,
                                transport=Transport.COLLECTIVE, algorithm=algorithm,
                                time_s=estimate(cluster, list(g), Op.ALL_REDUCE, nbytes, algorithm.value).time_s)
                plan = planner.plan(call, g)
                from_flows = CallPlan(plan.pre_s, plan.steps, plan.gamma_s).paths
                assert [id(p) for p in plan.paths] == [id(p) for p in from_flows]
                n += 1
    assert n == 2 * 3 * len(groups)


def test_rows_whose_pairs_and_bytes_differ_in_length_are_left_to_the_flows():
    rows = [(((0, 1, None), (1, 0, None)), [1.0])]
    assert distinct_paths(rows, {(0, 1, None): "a", (1, 0, None): "b"}) is None
    rows = [(((0, 1, None), (1, 0, None)), [1.0, 2.0]), (((1, 0, None),), [3.0])]
    assert distinct_paths(rows, {(0, 1, None): "a", (1, 0, None): "b"}) == ("a", "b")
