"""The two engines on the same compiled work: the DES is never faster than the analytical estimate,
and agrees with it within 2 % where the analytical assumptions hold (no stragglers, links not shared
between calls that run at the same time). Issue: "The two agree within 2 % where the analytical
assumptions hold (no contention, no stragglers), and the DES is never faster than the analytical
lower bound."
"""

import pytest

from simulator.analytical import estimate_work
from simulator.cluster.io import load_cluster
from simulator.compile import compile_step
from simulator.engine.step import simulate
from simulator.schedules import ScheduleKind
from simulator.strategy import AllReduceSync, AttentionKind, ParamServerSync, Strategy, ZeroStage
from simulator.workload import Recompute, load_model

AGREEMENT = 0.02
CASES = {
    "pure-dp": dict(global_batch=16, micro_batch=2, dp=8),
    "dp-no-overlap": dict(global_batch=16, micro_batch=2, dp=8, dp_sync=AllReduceSync(overlap_grad_reduce=False)),
    "3d": dict(global_batch=16, micro_batch=1, dp=2, tp=2, pp=2),
    "3d-sp-selective": dict(global_batch=16, micro_batch=1, dp=2, tp=2, pp=2, sequence_parallel=True,
                            recompute=Recompute.SELECTIVE),
    "3d-eager-selective": dict(global_batch=16, micro_batch=1, dp=2, tp=2, pp=2, attention=AttentionKind.EAGER,
                               recompute=Recompute.SELECTIVE),
    "gpipe": dict(global_batch=16, micro_batch=1, dp=2, tp=1, pp=4, schedule=ScheduleKind.GPIPE),
    "interleaved": dict(global_batch=32, micro_batch=1, dp=1, tp=2, pp=4, schedule=ScheduleKind.INTERLEAVED,
                        virtual_stages=2),
    "zero3": dict(global_batch=16, micro_batch=2, dp=8, zero=ZeroStage.ZERO3),
    "zero1-full-recompute": dict(global_batch=16, micro_batch=2, dp=8, zero=ZeroStage.ZERO1,
                                 recompute=Recompute.FULL),
    "ps-sync": dict(global_batch=16, micro_batch=2, dp=8, dp_sync=ParamServerSync(shards=2)),
}


@pytest.fixture(scope="module")
def setup():
    return load_cluster("dgx-h100"), load_model("gpt3-125m").with_seq(1024)


@pytest.mark.parametrize("name", sorted(CASES))
def test_des_is_never_faster_and_agrees_without_contention(setup, name):
    cluster, model = setup
    work = compile_step(cluster, model, Strategy(**CASES[name]))
    analytical = estimate_work(work)
    des = simulate(work, cluster, trace=False)
    assert des.step_time_s >= analytical.step_time_s * (1 - 1e-9)
    assert des.step_time_s == pytest.approx(analytical.step_time_s, rel=AGREEMENT)
    assert sum(des.breakdown.values()) == pytest.approx(des.step_time_s, rel=1e-6)


def test_contention_makes_the_des_slower_but_never_faster():
    """Across nodes the DP all-reduces of the pipeline stages share the NICs: the DES sees it."""
    cluster, model = load_cluster("dgx-a100", nodes=2), load_model("gpt3-350m").with_seq(1024)
    work = compile_step(cluster, model, Strategy(global_batch=32, micro_batch=1, dp=2, tp=2, pp=4))
    analytical, des = estimate_work(work), simulate(work, cluster, trace=False)
    assert des.step_time_s >= analytical.step_time_s * (1 - 1e-9)


def test_same_seed_same_timeline(setup):
    cluster, model = setup
    work = compile_step(cluster, model, Strategy(**CASES["3d"]))
    first, second = simulate(work, cluster, seed=3), simulate(work, cluster, seed=3)
    assert first.timeline.equals(second.timeline)
