"""The step-by-step replay of each schedule equals its algorithm's closed form (rel tol 1e-9).

Sizes divide evenly into p × channels × chunks slices (20160 elements = 2^6·3^2·5·7), so the closed
form's n/p is the schedule's slice. nvls is left out by design: its schedule is the data-equivalent
two-shot exchange, not the switch's reduction (see replay.py for every legitimate difference).
"""

import pytest

from simulator.collectives import pipeline_choice
from simulator.collectives.base import Op
from simulator.collectives.cost import Group
from simulator.collectives.registry import algorithm_names, build_schedule, get_algorithm, supports
from simulator.collectives.replay import schedule_time_s
from simulator.errors import SpecError
from test_collectives_helpers import nccl_protocols, pcie_tree, switched

NBYTES = 4 * 20160
CLUSTERS = {
    "node8": (switched(nodes=1, gpus=8), [list(range(8)), [0, 1, 2], [6, 2, 4, 0, 1], list(range(7))]),
    "4x4": (switched(nodes=4, gpus=4), [list(range(16)), [0, 4, 8, 12], [0, 1, 4, 5, 8, 9], list(range(12))]),
    "4x4-2nics": (switched(nodes=4, gpus=4, nics=2), [list(range(16)), [1, 5, 9, 13, 2, 6]]),
    "pcie": (pcie_tree(), [[0, 1, 2, 3], [0, 2, 3]]),
}


def _cases():
    for key, (cluster, groups) in CLUSTERS.items():
        for ranks in groups:
            for name in algorithm_names():
                for op in Op:
                    if name != "nvls" and supports(name, op, cluster, ranks):
                        yield pytest.param(cluster, ranks, name, op, id=f"{key}-{len(ranks)}r-{name}-{op.value}")


@pytest.fixture
def few_chunks(monkeypatch):
    monkeypatch.setattr(pipeline_choice, "PIPELINE_CHUNKS", (1, 2, 4, 8))


@pytest.mark.parametrize("cluster, ranks, name, op", list(_cases()))
def test_replay_equals_closed_form(cluster, ranks, name, op, few_chunks):
    algorithm, group = get_algorithm(name), Group(cluster, tuple(ranks))
    root = len(ranks) - 1 if op in (Op.BROADCAST, Op.REDUCE) else 0
    closed = algorithm.time_s(group, op, NBYTES, None, root=root)
    replayed = schedule_time_s(cluster, build_schedule(cluster, ranks, op, NBYTES, name, root=root))
    assert replayed == pytest.approx(closed, rel=1e-9)


@pytest.mark.parametrize("name", ["ring", "tree", "recursive_doubling", "hierarchical", "direct"])
def test_replay_equals_closed_form_under_every_nccl_protocol(name, monkeypatch):
    monkeypatch.setattr(pipeline_choice, "PIPELINE_CHUNKS", (4,))  # the schedule's chunking does not depend on protocol
    cluster = switched(nodes=2, gpus=4, comm=nccl_protocols())
    ranks = list(range(8))
    group = Group(cluster, tuple(ranks))
    sched = build_schedule(cluster, ranks, Op.ALL_REDUCE, NBYTES, name)
    for protocol in cluster.comm.protocols:
        closed = get_algorithm(name).time_s(group, Op.ALL_REDUCE, NBYTES, protocol)
        assert schedule_time_s(cluster, sched, protocol) == pytest.approx(closed, rel=1e-9)


def test_uneven_sizes_replay_no_faster_than_a_slice_rounding_allows():
    # 4·997 bytes over 8 ranks: slices of 124 or 128 bytes; the replay charges the larger slice.
    cluster, ranks = switched(nodes=1, gpus=8), list(range(8))
    closed = get_algorithm("ring").time_s(Group(cluster, tuple(ranks)), Op.ALL_REDUCE, 4 * 997, None)
    replayed = schedule_time_s(cluster, build_schedule(cluster, ranks, Op.ALL_REDUCE, 4 * 997, "ring"))
    assert closed <= replayed <= closed + 14 * 4 / 100e9 + 1e-15


def test_a_protocol_of_another_cluster_is_rejected():
    cluster = switched(nodes=1, gpus=8)
    sched = build_schedule(cluster, list(range(8)), Op.ALL_REDUCE, NBYTES, "ring")
    with pytest.raises(SpecError, match="protocol"):
        schedule_time_s(cluster, sched, nccl_protocols().protocols[0])
