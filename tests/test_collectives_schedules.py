"""Data semantics of every schedule: a numpy replay of base.py's rules must produce each op's definition.

Every algorithm × every op it supports × groups of several sizes (powers of two and not, one node
and several, one GPU per node), sizes that divide evenly and sizes that do not, and pipelines cut
into many chunks.
"""

import pytest

from simulator.collectives import pipeline_choice
from simulator.collectives.base import Op
from simulator.collectives.registry import algorithm_names, build_schedule, supports
from test_collectives_helpers import check, pcie_tree, switched

ONE_NODE = switched(nodes=1, gpus=8, in_switch_reduction=True)
FOUR_NODES = switched(nodes=4, gpus=4, nics=2)
FOUR_SHARP = switched(nodes=4, gpus=4, nics=2, in_switch_reduction=True)
GROUPS = [
    (ONE_NODE, [0, 1]), (ONE_NODE, [0, 1, 2]), (ONE_NODE, [3, 1, 0, 2]), (ONE_NODE, list(range(5))),
    (ONE_NODE, list(range(8))), (FOUR_NODES, list(range(16))), (FOUR_NODES, [0, 4, 8, 12]),
    (FOUR_NODES, [0, 1, 4, 5, 8, 9]), (FOUR_NODES, [5, 0, 9, 1, 13, 4, 12]), (FOUR_NODES, list(range(12))),
    (pcie_tree(), [0, 1, 2, 3]),
]
SIZES = [4 * 720, 4 * 997, 4 * 3]  # divides evenly; a prime number of elements; fewer elements than ranks


def _cases():
    for cluster, ranks in GROUPS:
        for name in algorithm_names():
            for op in Op:
                if supports(name, op, cluster, ranks):
                    yield pytest.param(cluster, ranks, name, op, id=f"{name}-{op.value}-{len(ranks)}r-{cluster.nodes}n")


@pytest.mark.parametrize("cluster, ranks, name, op", list(_cases()))
def test_schedule_computes_the_op(cluster, ranks, name, op):
    for nbytes in SIZES:
        for root in sorted({0, len(ranks) - 1}) if op in (Op.BROADCAST, Op.REDUCE) else [0]:
            check(build_schedule(cluster, ranks, op, nbytes, name, root=root), seed=nbytes + root)


@pytest.mark.parametrize("name", ["ring", "tree"])
def test_pipelines_cut_into_many_chunks_stay_correct(name, monkeypatch):
    monkeypatch.setattr(pipeline_choice, "PIPELINE_CHUNKS", (16,))
    for cluster, ranks in [(ONE_NODE, list(range(8))), (FOUR_NODES, [0, 1, 4, 5, 8, 9, 12])]:
        for op in (Op.ALL_REDUCE, Op.BROADCAST, Op.REDUCE):
            if supports(name, op, cluster, ranks):
                sched = build_schedule(cluster, ranks, op, 4 * 1001, name, root=len(ranks) // 2)
                if name == "tree" or op is not Op.ALL_REDUCE:  # the ring all-reduce is not pipelined
                    assert sched.num_steps >= 16
                check(sched)


def test_every_op_has_an_algorithm_and_every_algorithm_an_op():
    ranks = list(range(16))
    for op in Op:
        assert any(supports(a, op, FOUR_NODES, ranks) for a in algorithm_names()), op
    for a in algorithm_names():
        assert any(supports(a, op, c, r) for op in Op for c, r in [(ONE_NODE, list(range(8))), (FOUR_NODES, ranks),
                                                                    (FOUR_SHARP, ranks)]), a
    assert not supports("hierarchical", Op.ALL_REDUCE, ONE_NODE, list(range(8)))  # needs several nodes
    assert not supports("nvls", Op.ALL_REDUCE, FOUR_NODES, ranks)  # in-switch reduction off, several nodes
    assert not supports("nvls_tree", Op.ALL_REDUCE, FOUR_NODES, ranks)  # in-switch reduction off
    assert not supports("nvls_tree", Op.ALL_REDUCE, ONE_NODE, list(range(8)))  # needs several nodes
    assert not supports("nvls_tree", Op.ALL_REDUCE, FOUR_SHARP, [0, 4, 8, 12])  # one GPU per node: a plain tree
