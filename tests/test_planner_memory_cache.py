"""The memory phase's shared answers equal the ones computed alone: the model-state lower bound kept per
(tp·pp, dp·cp, ZeRO stage), and the reports sharing model states across a search."""

import itertools

from simulator.cluster.io import load_cluster
from simulator.memory import memory_report
from simulator.strategy import Offload, ScheduleKind, Strategy, ZeroStage, build_layout
from simulator.workload import get_preset

from planner.feasible import _states_lower_bound

MODEL = get_preset("llama2-7b")
CLUSTER = load_cluster("dgx-h100", nodes=2)


def _strategies():
    for tp, pp, zero, mbs, offload in itertools.product((1, 2, 4), (1, 2, 4), ZeroStage, (1, 2),
                                                        (Offload.NONE, Offload.OPTIMIZER)):
        if offload is Offload.OPTIMIZER and zero is ZeroStage.ZERO0 or pp > 1 and zero >= ZeroStage.ZERO2:
            continue  # refused layouts
        yield Strategy(global_batch=64, dp=16 // (tp * pp), tp=tp, pp=pp, zero=zero, micro_batch=mbs, offload=offload,
                       schedule=ScheduleKind.ONE_F_ONE_B)


def test_the_shared_lower_bound_is_each_candidate_s_own():
    memo = {}
    for s in _strategies():
        assert _states_lower_bound(MODEL, s, memo) == _states_lower_bound(MODEL, s)
    assert 0 < len(memo) < len(list(_strategies()))


def test_reports_sharing_states_equal_reports_alone():
    shared = {}
    for s in _strategies():
        layout = build_layout(s, CLUSTER, MODEL)
        assert memory_report(MODEL, CLUSTER, layout, cache=shared) == memory_report(MODEL, CLUSTER, layout)
