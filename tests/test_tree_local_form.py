"""The double binary tree's local form and chunk-pipeline latency against the schedule they stand in for.

``DoubleBinaryTree.local_steps`` gives the steps the engine used to read from :meth:`Algorithm.schedule`
(group indices, NICs by index in the sender node's set) without building the ~10⁵ ``Transfer`` objects of a
large tree; ``chunk_pipeline_latency_s`` gives :func:`pipeline_latency_s` of that schedule from one chunk per
channel. Both must be the same values, bit for bit (==), on every group shape, byte count (empty chunks
included: 9 bytes in 4 chunks are 4, 4, 0 and 1 bytes), protocol, α vector and a degraded NIC; and a plan built
from the local form must equal one built from the schedule.
"""

from dataclasses import replace

import pytest
from hypothesis import example, given, settings, strategies as st

from simulator.cluster.facts import DegradedNic
from simulator.cluster.presets import load_preset
from simulator.collectives.algorithm import pipeline_latency_s
from simulator.collectives.base import Op
from simulator.collectives.cost import Env, Group
from simulator.collectives.registry import get_algorithm
from simulator.engine.shapes import LocalSchedule
from simulator.work import CollectiveAlgorithm

from local_form_plans import assert_local_form_plans_equal

A100 = load_preset("dgx-a100")
TREE = get_algorithm("tree")
FAST = settings(max_examples=40, deadline=None)


def _group(nodes: int, per_node: int, first_gpu: int, sick: bool) -> Group:
    cluster = A100.with_nodes(nodes)
    if sick:  # NIC 0 of the last node at 5 %: its paths' bandwidth and the tree's chunk count move
        cluster = replace(cluster, degraded_nics=(DegradedNic(node=nodes - 1, nic=0, bw_fraction=0.05),))
    gpus = [(first_gpu + 3 * i) % 8 for i in range(per_node)]
    return Group(cluster, tuple(8 * n + g for n in range(nodes) for g in gpus))


class _Slower(Env):
    """Costs whose connections from group index ``p // 2`` up pay 1 µs more: other α on one shape."""

    def path(self, src, dst, nic=None):
        p = super().path(src, dst, nic)
        return replace(p, latency_s=p.latency_s + 1e-6) if src >= self.first else p


shapes = dict(nodes=st.integers(1, 40), per_node=st.sampled_from([1, 2, 3, 8]), first_gpu=st.integers(0, 7),
              sick=st.booleans(),
              nbytes=st.one_of(st.integers(1, 64), st.integers(1, 2**31), st.sampled_from([12 * 2**20, 2**30 + 3])))


def _fits(nodes: int, per_node: int) -> bool:
    """At least two ranks, and at most 128 (test25: an explicit schedule costs ranks × steps, 9 s of CPU for 40
    nodes × 8 GPUs at 2 GiB; trees of up to 40 nodes are still drawn with 1-3 GPUs per node, 8 per node up to 16)."""
    return 2 <= nodes * per_node <= 128 and not (nodes == 1 and per_node == 1)


@FAST
@given(**shapes)
@example(nodes=3, per_node=1, first_gpu=0, sick=False, nbytes=9)
@example(nodes=33, per_node=2, first_gpu=5, sick=True, nbytes=12 * 2**20 + 6)
def test_local_steps_are_the_schedules_steps_in_local_form(nodes, per_node, first_gpu, sick, nbytes):
    if not _fits(nodes, per_node):
        return
    group = _group(nodes, per_node, first_gpu, sick)
    schedule = TREE.schedule(group, Op.ALL_REDUCE, nbytes)
    built, direct = LocalSchedule(schedule, group), LocalSchedule.of_local("tree", group,
                                                                        TREE.local_steps(group, Op.ALL_REDUCE, nbytes))
    for name in ("algorithm", "reduce_bytes_per_rank", "contents", "sequence", "pairs"):
        assert getattr(direct, name) == getattr(built, name), name
    assert len(direct.sequence) == schedule.num_steps and direct.schedule is None


@FAST
@given(**shapes)
@example(nodes=3, per_node=1, first_gpu=0, sick=False, nbytes=9)  # the 0-byte chunk between two with bytes
@example(nodes=2, per_node=1, first_gpu=0, sick=False, nbytes=3)  # no chunk with bytes: 0 s, k = 1
def test_chunk_pipeline_latency_is_the_schedules(nodes, per_node, first_gpu, sick, nbytes):
    if not _fits(nodes, per_node):
        return
    group = _group(nodes, per_node, first_gpu, sick)
    schedule = TREE.schedule(group, Op.ALL_REDUCE, nbytes)
    slower = _Slower(group.cluster, None, family="tree")
    slower.first = group.ranks[group.p // 2]
    envs = [Env(group.cluster, p, group.paths, family="tree", group=group) for p in (None, *group.cluster.comm.protocols)]
    for env in envs + [slower]:
        assert TREE.chunk_pipeline_latency_s(env, group, Op.ALL_REDUCE, nbytes) == pipeline_latency_s(env, schedule)


@pytest.mark.parametrize("nbytes", [12 * 2**20, 3 * 2**20 + 6, 4100])
@pytest.mark.parametrize("sick", [False, True], ids=["uniform", "degraded-nic"])
def test_plans_from_the_local_form_equal_plans_from_the_schedule(nbytes, sick, monkeypatch):
    assert_local_form_plans_equal(CollectiveAlgorithm.TREE, nbytes, sick, monkeypatch)
