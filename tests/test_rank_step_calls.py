"""The per-operator host fields from the whole tiny model in a rank's step (``executor.step_bench``,
``executor.calibrate_calls.step_call_overheads``): hand counts, exact arithmetic on synthetic timings, the
direction an estimate moves, and the probe itself on 2 gloo processes.

- the suite's tiny GPT dispatches 78 operators in a micro-batch's forward and 159 in its backward
  (2 blocks × 32 + 14 edges; 2 × 68 + 23: ``benchmarks/eager_dispatch_count.py``, docs/validation.md);
- the fields are (t − roofline) / calls per phase, the roofline without host time, and the compute model then
  charges the timed forward and backward back exactly;
- a slower step probe gives a longer step estimate; a timing below the roofline gives 0, not a negative field.
"""

from __future__ import annotations

import dataclasses

import pytest

from executor.calibrate_calls import model_calls_and_roofline, step_call_overheads
from executor.compute_grid import executed, tiny_model
from executor.step_bench import time_rank_steps
from executor.step_timing import RankStepTiming
from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.compute import Phase, edge_times, layer_times, total_time
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import DtypePolicy, load_model

GPT_TINY = executed(tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32))


def _device(forward_us: float = 0.0, backward_us: float | None = 0.0):
    return dataclasses.replace(load_cluster("localhost-cpu").device, kernel_launch_overhead_us=forward_us,
                               backward_call_overhead_us=backward_us)


def _model_phase_s(device, phase: Phase) -> float:
    """The compute model's seconds for one micro-batch of the whole tiny GPT in ``phase`` (host time included)."""
    return (GPT_TINY.layers * total_time(layer_times(GPT_TINY, device, 2), phase)
            + total_time(edge_times(GPT_TINY, device, 2), phase))


def test_the_whole_model_calls_are_the_eager_counts():
    (fwd, bwd), _ = model_calls_and_roofline(_device(), GPT_TINY, 2)
    assert (fwd, bwd) == (2 * 32 + 14, 2 * 68 + 23) == (78, 159)


def test_the_roofline_carries_no_host_time():
    _, bare = model_calls_and_roofline(_device(), GPT_TINY, 2)
    _, loaded = model_calls_and_roofline(_device(50.0, 20.0), GPT_TINY, 2)
    assert loaded == bare
    assert bare == pytest.approx((_model_phase_s(_device(), Phase.FWD), _model_phase_s(_device(), Phase.BWD)))


def test_the_fields_reproduce_the_timed_step_exactly():
    """forward 0.5 ms, backward 0.55 ms per micro-batch: o = (t − roofline) / calls, then charged back."""
    (n_fwd, n_bwd), (r_fwd, r_bwd) = model_calls_and_roofline(_device(), GPT_TINY, 2)
    device = step_call_overheads(_device(7.0, 7.0), GPT_TINY, 2, 0.5e-3, 0.55e-3)
    assert device.kernel_launch_overhead_us == pytest.approx((0.5e-3 - r_fwd) / n_fwd * 1e6)
    assert device.backward_call_overhead_us == pytest.approx((0.55e-3 - r_bwd) / n_bwd * 1e6)
    assert _model_phase_s(device, Phase.FWD) == pytest.approx(0.5e-3, rel=1e-9)
    assert _model_phase_s(device, Phase.BWD) == pytest.approx(0.55e-3, rel=1e-9)


def test_a_step_faster_than_the_roofline_gives_zero_not_a_negative_field():
    device = step_call_overheads(_device(), GPT_TINY, 2, 1e-9, 1e-9)
    assert device.kernel_launch_overhead_us == 0.0 and device.backward_call_overhead_us == 0.0


def test_a_slower_rank_step_gives_a_longer_estimate():
    base = load_cluster("localhost-cpu")
    strategy = strategy_from_flat({"dp": 2, "global_batch": 8, "micro_batch": 2})
    times = []
    for forward_s in (0.3e-3, 0.6e-3):
        device = step_call_overheads(base.device, GPT_TINY, 2, forward_s, 0.5e-3)
        times.append(estimate(dataclasses.replace(base, device=device), GPT_TINY, strategy).step_time_s)
    # 2 micro-batches per rank (8 / (2 · 2)), each forward 0.3 ms longer; time-sharing 2 ranks on the host's cores
    assert times[1] - times[0] >= 2 * 0.3e-3 * (1 - 1e-9)


def test_the_probe_runs_two_ranks_in_lockstep():
    timing = time_rank_steps(GPT_TINY, 2, processes=2, micro_batches=2, repeats=3, warmup=1)
    assert isinstance(timing, RankStepTiming) and (timing.processes, timing.micro_batches) == (2, 2)
    assert not timing.fsdp2_optimizer and timing.dtensor_call_us is None  # FSDP2 steps only when asked
    assert len(timing.forward) == len(timing.backward) == len(timing.outside) == len(timing.optimizer) == 2
    assert len(timing.first_cold) == 2  # the first micro-batch's forward less the second's, per rank
    assert timing.warm_forward_s == pytest.approx(timing.forward_s - timing.first_cold_s / 2, rel=1e-12)
    every = timing.forward + timing.backward + timing.outside + timing.optimizer
    assert all(t.p10_s <= t.median_s <= t.p90_s for t in every)
    assert timing.forward_s > 0 and timing.backward_s > 0 and timing.outside_s > 0
    mean = timing.optimizer_timing  # each statistic the mean over the two ranks
    assert mean.median_s == pytest.approx(sum(t.median_s for t in timing.optimizer) / 2, rel=1e-12)
    assert mean.p10_s <= mean.median_s <= mean.p90_s


def _timing(ms: float):
    from executor.compute_bench import Timing

    return Timing(median_s=ms * 1e-3, p10_s=ms * 1e-3, p90_s=ms * 1e-3)


def _steps(ddp: bool = True) -> RankStepTiming:
    """Synthetic probe: plain forward 0.45 / 0.47 ms per micro-batch on the two ranks, 0.66 / 0.70 under DDP; the last
    backward 0.50 / 0.52 plain, 0.80 / 0.78 under DDP."""
    t = [_timing(x) for x in (0.45, 0.47, 0.66, 0.70, 0.50, 0.52, 0.80, 0.78)]
    return RankStepTiming(processes=2, micro_batches=2, forward=(t[0], t[1]), backward=(t[4], t[5]),
                          outside=(t[0], t[0]), last_backward=(t[4], t[5]),
                          ddp_forward=(t[2], t[3]) if ddp else (), ddp_last_backward=(t[6], t[7]) if ddp else ())


def test_ddp_terms_in_the_step_are_the_wrapped_less_the_plain_per_call():
    """DDP per forward call: mean(0.66, 0.70) − mean(0.45, 0.47) = 0.22 ms; its synchronising backward
    mean(0.80, 0.78) − mean(0.50, 0.52) = 0.28 ms, of which the bucket passes' 0.05 ms are a kernel of their own."""
    from executor.calibrate_host import with_step_ddp

    steps = _steps()
    assert steps.ddp_forward_call_us == pytest.approx(220.0, rel=1e-9)
    assert steps.ddp_sync_extra_s == pytest.approx(0.28e-3, rel=1e-9)
    node = with_step_ddp(load_cluster("localhost-cpu").node, steps, bucket_passes_s=0.05e-3)
    assert node.host.ddp_forward_call_us == pytest.approx(220.0, rel=1e-9)
    assert node.host.ddp_sync_backward_us == pytest.approx(230.0, rel=1e-9)
    base = load_cluster("localhost-cpu").node  # no DDP steps (a probe without them): the tight loop's terms stay
    assert _steps(ddp=False).ddp_forward_call_us is None and with_step_ddp(base, _steps(ddp=False)) == base
    assert with_step_ddp(base, None) == base


def test_the_in_step_ddp_forward_lengthens_ddp_plans_only():
    """+200 µs per forward call: a dp 2 DDP step (2 micro-batches per rank) grows by at least 2 × 0.2 ms; a pipeline
    plan, which DDP does not wrap, does not move."""
    base = load_cluster("localhost-cpu")
    times = {}
    for us in (0.0, 200.0):
        host = dataclasses.replace(base.node.host, ddp_forward_call_us=us)
        cluster = dataclasses.replace(base, node=dataclasses.replace(base.node, host=host))
        for name, flat in (("ddp", {"dp": 2}), ("pp", {"pp": 2})):
            strategy = strategy_from_flat({**flat, "global_batch": 8, "micro_batch": 2})
            times[name, us] = estimate(cluster, GPT_TINY, strategy).step_time_s
    assert times["ddp", 200.0] - times["ddp", 0.0] >= 2 * 0.2e-3 * (1 - 1e-9)
    assert times["pp", 200.0] == times["pp", 0.0]


def test_the_probe_times_ddp_and_fsdp2_steps_too():
    timing = time_rank_steps(GPT_TINY, 2, processes=2, micro_batches=2, repeats=3, warmup=1, ddp=True, fsdp2=True)
    # FSDP2 ZeRO-3 on the probe's own 2-rank gloo group: its AdamW over the shards, less the plain one, per call
    assert len(timing.fsdp2_optimizer) == 2 and timing.optimizer_tensors == 28
    assert all(t.p10_s <= t.median_s <= t.p90_s for t in timing.fsdp2_optimizer)
    assert timing.dtensor_call_us == pytest.approx(max(0.0, (
        sum(t.median_s for t in timing.fsdp2_optimizer) - sum(t.median_s for t in timing.optimizer)) / 2 / 280 * 1e6))
    assert len(timing.ddp_forward) == len(timing.ddp_last_backward) == len(timing.last_backward) == 2
    assert all(t.p10_s <= t.median_s <= t.p90_s for t in timing.ddp_forward + timing.ddp_last_backward)
    assert timing.ddp_forward_call_us == pytest.approx(max(0.0, (
        sum(t.median_s for t in timing.ddp_forward) / 2 - timing.forward_s) * 1e6), rel=1e-12)
    assert timing.ddp_sync_extra_s >= 0
    # the FSDP2 steps' loop: the switch per micro-batch timed apart, the rest beyond the plain steps' outside
    assert len(timing.fsdp2_outside) == len(timing.fsdp2_switch) == 2
    assert timing.fsdp2_sync_switch_us == pytest.approx(sum(t.median_s for t in timing.fsdp2_switch) / 2 / 2 * 1e6)
    assert timing.fsdp2_sync_switch_us > 0 and timing.fsdp2_zero_grad_us >= 0
