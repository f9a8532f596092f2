"""Stragglers, asynchronous parameter server staleness, and failures in the step DES.

Hand-worked: pp=1 pipelines with m micro-batches of F+B seconds; one slow replica (factor 2)
makes a synchronous step twice as long; an asynchronous PS lets the fast workers go on.
Failures: Daly's (2006) closed form against seeded sampling of the same process (within 5 %).
"""

import math
from dataclasses import replace

import pytest

from simulator.engine.faults import expected_time_to_train_s, sampled_time_to_train_s
from simulator.engine.step import simulate
from simulator.errors import SpecError
from simulator.results import Category
from simulator.strategy import AllReduceSync, FailureModel, ParamServerMode, ParamServerSync, Strategy, StragglerModel
from simulator.workload.presets import get_preset
from compiled_work import compiled, switched

SMALL = get_preset("gpt3-125m")
CLUSTER = switched(nodes=4, gpus=1)  # dp=4, one GPU per node


def _ps_work(mode, slow: float, staleness=None, push_s=0.05):
    sync = ParamServerSync(mode=mode, staleness_steps=staleness)
    strat = Strategy(global_batch=8, tp=1, pp=1, dp_sync=sync,
                     stragglers=StragglerModel(speed_factors=(1.0, 1.0, 1.0, slow)))
    work = compiled(CLUSTER, strat, SMALL, fwd_s=0.1, bwd_s=0.2)
    (ps,) = work.stages[0].grad_sync
    # one byte: its replay takes microseconds, so the call takes its compiled time, set to push_s
    push = replace(ps, nbytes=1, time_s=push_s)
    stage = replace(work.stages[0], grad_sync=(push,), grad_ready_fraction=(1.0,))
    return replace(work, stages=(stage,))


def test_slow_replica_stretches_sync_step_and_shows_as_straggler_wait():
    one_bucket = AllReduceSync(bucket_bytes=None, overlap_grad_reduce=False)  # ready at the end of backward
    strat = Strategy(global_batch=8, tp=1, pp=1, dp_sync=one_bucket,
                     stragglers=StragglerModel(speed_factors=(1.0, 2.0, 1.0, 1.0)))
    work = compiled(CLUSTER, strat, SMALL, fwd_s=0.1, bwd_s=0.2)
    res = simulate(work, CLUSTER)
    call_s = work.stages[0].grad_sync[0].time_s
    assert res.step_time_s == pytest.approx(2 * 0.6 + call_s, rel=1e-6)  # m=2: 2·(F+B)·2 + all-reduce
    fast = res.per_rank.set_index("replica").loc["dp0"]
    assert fast[Category.STRAGGLER.value] == pytest.approx(0.6, rel=1e-6)
    assert res.breakdown[Category.STRAGGLER] == pytest.approx(0.0, abs=1e-12)  # the slowest rank's view


def test_async_ps_hides_a_straggler_that_sync_ps_and_allreduce_expose():
    steps = 8
    sync = simulate(_ps_work(ParamServerMode.SYNC, 2.0), CLUSTER, steps=steps)
    asyn = simulate(_ps_work(ParamServerMode.ASYNC, 2.0), CLUSTER, steps=steps)
    fast_step, slow_step = 0.6 + 0.05, 1.2 + 0.05
    assert sync.step_time_s == pytest.approx(slow_step, rel=1e-6)
    # async: 4·steps worker-steps at rates 3/fast + 1/slow (per second), divided by steps
    expected = 4 / (3 / fast_step + 1 / slow_step)
    assert asyn.step_time_s == pytest.approx(expected, rel=0.1)
    assert asyn.step_time_s < 0.7 * sync.step_time_s
    st = asyn.extras["staleness"]
    assert max(st["per_worker"]["3"]) >= 2 and max(st["per_worker"]["0"]) == 0
    assert "staleness" not in sync.extras


def test_async_staleness_respects_the_bound():
    res = simulate(_ps_work(ParamServerMode.ASYNC, 3.0, staleness=1), CLUSTER, steps=6)
    assert 0 < res.extras["staleness"]["max"] <= 2  # ≤ bound + the step in flight
    unbounded = simulate(_ps_work(ParamServerMode.ASYNC, 3.0), CLUSTER, steps=6)
    assert unbounded.extras["staleness"]["max"] > res.extras["staleness"]["max"]


def test_daly_formula_limits_and_sampling():
    fm = FailureModel(mtbf_gpu_hours=1e12, checkpoint_interval_steps=10, checkpoint_cost_s=5.0, restart_cost_s=60.0)
    # no failures: wall = solve · (1 + δ/τ) = 1000·1 s · (1 + 5/10)
    assert expected_time_to_train_s(fm, 8, 1.0, 1000) == pytest.approx(1500.0, rel=1e-6)
    fm = FailureModel(mtbf_gpu_hours=50.0, checkpoint_interval_steps=100, checkpoint_cost_s=30.0, restart_cost_s=300.0)
    exp = expected_time_to_train_s(fm, 64, 2.0, 5000)  # job MTBF 2812.5 s, τ = 200 s
    m = 50 * 3600 / 64
    assert exp == pytest.approx(m * math.exp(300 / m) * math.expm1(230 / m) * 10000 / 200, rel=1e-12)
    assert sampled_time_to_train_s(fm, 64, 2.0, 5000, seed=1, trials=400) == pytest.approx(exp, rel=0.05)


def test_simulate_reports_goodput_and_time_to_train():
    fm = FailureModel(mtbf_gpu_hours=1000.0, checkpoint_interval_steps=50, checkpoint_cost_s=10.0, restart_cost_s=120.0)
    strat = Strategy(global_batch=8, tp=1, pp=1, failures=fm)
    work = compiled(CLUSTER, strat, SMALL, fwd_s=0.1, bwd_s=0.2)
    res = simulate(work, CLUSTER, train_steps=10_000)
    assert 0 < res.extras["goodput"] < 1
    assert res.extras["time_to_train_s"] == pytest.approx(10_000 * res.step_time_s / res.extras["goodput"])
    assert res.extras["young_interval_s"] == pytest.approx(math.sqrt(2 * 10.0 * 1000 * 3600 / 4))


def test_a_job_that_cannot_finish_is_refused_not_sampled_forever():
    """MTBF 1e-6 GPU-hours on 8 GPUs: the job fails every 0.45 ms, so a 31 s segment would be retried
    ~e^(31/0.00045) times; sampling used to hang (issue 15). It is a SpecError naming the MTBF; a
    short MTBF that still finishes (4.5 s against a 1 s segment and 2 s restarts) is sampled."""
    hopeless = FailureModel(mtbf_gpu_hours=1e-6, checkpoint_interval_steps=100, checkpoint_cost_s=30.0,
                            restart_cost_s=600.0)
    with pytest.raises(SpecError, match=r"^mtbf_gpu_hours: the job fails every 0\.00045 s on 8 GPUs"):
        sampled_time_to_train_s(hopeless, gpus=8, step_time_s=0.01, train_steps=1000)
    short = FailureModel(mtbf_gpu_hours=0.01, checkpoint_interval_steps=100, checkpoint_cost_s=0.0,
                         restart_cost_s=2.0)
    sampled = sampled_time_to_train_s(short, gpus=8, step_time_s=0.01, train_steps=1000)
    expected = expected_time_to_train_s(short, gpus=8, step_time_s=0.01, train_steps=1000)
    assert sampled == pytest.approx(expected, rel=0.15)


def test_async_ps_per_rank_rows_hold_complete_steps_only_and_the_slowest_is_a_real_rank():
    """Issue 15 §3: the run stops when the workers together finished steps × dp steps, with other
    workers mid-step; those truncated steps are not averaged into their rows. Identical workers:
    every step takes m·(F+B) + push = 2·0.3 + 0.05 s, so every row sums to that; one worker at half
    speed: its row sums to 2·0.6 + 0.05 and it is the slowest rank, whose row the breakdown shares."""
    same = simulate(_ps_work(ParamServerMode.ASYNC, 1.0), CLUSTER, steps=4)
    totals = same.per_rank[[c.value for c in Category]].sum(axis=1)
    assert list(totals) == pytest.approx([0.65] * 4, rel=1e-6)
    slow = simulate(_ps_work(ParamServerMode.ASYNC, 2.0), CLUSTER, steps=4)
    rows = slow.per_rank.set_index("rank")
    assert slow.extras["slowest_rank"] == 3
    assert rows[[c.value for c in Category]].sum(axis=1).loc[3] == pytest.approx(1.25, rel=1e-6)
    row, scale = rows.loc[3], slow.step_time_s / 1.25
    for cat, seconds in slow.breakdown.items():
        assert seconds == pytest.approx(float(row[cat.value]) * scale, rel=1e-6, abs=1e-12), cat
