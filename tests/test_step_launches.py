"""The rank-step probe's plain-model fields as the median over independent launches (cal30, issue 11).

One launch of the probe read the per-operator forward 17-24 % below every other calibration and moved every
host-bound case of a suite (docs/validation.md, "Quiet suites after the twentieth session's merges"). Here the probe
is stubbed (no processes launched): three launches with different timings, and the fields written are their medians,
each launch's value and the min..max reported."""

from __future__ import annotations

import dataclasses

import pytest

import executor.calibrate_compute as cc
from executor.calibrate_calls import step_call_overheads
from executor.compute_bench import Timing
from executor.compute_grid import default_grid, executed
from executor.host_bench import AdamwTiming
from executor.step_launches import STEP_PROBE_LAUNCHES, with_launch_loop, with_launch_medians
from executor.step_timing import RankStepTiming
from simulator.cluster.io import load_cluster
from simulator.workload import DtypePolicy, load_model

GRID = default_grid(load_model("gpt3-125m"), DtypePolicy.FP32)
CLUSTER = load_cluster("localhost-cpu")
ADAMW = AdamwTiming(step=Timing(median_s=1e-3, p10_s=1e-3, p90_s=1e-3), tensors=28, params=10_000)


def _ms(x: float) -> Timing:
    return Timing(median_s=x * 1e-3, p10_s=x * 1e-3, p90_s=x * 1e-3)


def _launch(forward_ms: float, backward_ms: float, optimizer_ms: float, outside_ms: float) -> RankStepTiming:
    """Both ranks alike; the first micro-batch 0.1 ms colder than the later ones."""
    two = lambda x: (_ms(x), _ms(x))  # noqa: E731
    return RankStepTiming(processes=2, micro_batches=2, forward=two(forward_ms), backward=two(backward_ms),
                          outside=two(outside_ms), optimizer=two(optimizer_ms), first_cold=two(0.1))


# launch 2 reads low in every field (as the twentieth session's r1), launch 3 high: the medians are launch 1's
LAUNCHES = (_launch(0.60, 1.20, 1.50, 0.40), _launch(0.45, 0.90, 1.10, 0.30), _launch(0.70, 1.40, 1.80, 0.50))


@pytest.fixture
def measured(monkeypatch):
    calls, queue = [], list(LAUNCHES)

    def probe(spec, micro_batch, **kwargs):
        calls.append(kwargs)
        return queue.pop(0)

    monkeypatch.setattr(cc, "time_rank_steps", probe)
    first, launches = cc.measure_step_launches(GRID, CLUSTER.device, ADAMW, repeats=3, warmup=1)
    return calls, first, launches


def test_three_launches_the_first_with_its_wrapped_steps(measured):
    calls, first, launches = measured
    assert STEP_PROBE_LAUNCHES == 3 and len(calls) == 3 and len(launches.launches) == 3
    assert first is LAUNCHES[0]  # DDP's and FSDP2's paired terms come from the first launch's processes
    assert [(c["ddp"], c["fsdp2"]) for c in calls] == [(True, True), (False, False), (False, False)]


def test_the_written_fields_are_the_medians_and_the_spread_is_reported(measured):
    _, _, launches = measured
    device = with_launch_medians(CLUSTER.device, launches)
    spec = executed(GRID.block)

    def per_call(steps):  # the probe's formula, one launch at a time
        return step_call_overheads(CLUSTER.device, spec, GRID.micro_batch, steps.warm_forward_s, steps.backward_s)

    own = [per_call(s) for s in LAUNCHES]
    assert [f.forward_us for f in launches.launches] == pytest.approx([d.kernel_launch_overhead_us for d in own])
    forwards = sorted(d.kernel_launch_overhead_us for d in own)
    assert forwards[0] < forwards[1] < forwards[2]  # three different readings
    assert device.kernel_launch_overhead_us == pytest.approx(own[0].kernel_launch_overhead_us)  # the middle one
    assert device.backward_call_overhead_us == pytest.approx(own[0].backward_call_overhead_us)
    ops = [f.op_call_us for f in launches.launches]
    assert ops[1] < ops[0] < ops[2] and device.op_call_overhead_us == pytest.approx(ops[0])
    host = with_launch_loop(CLUSTER.node, launches).host
    assert host.step_loop_us == pytest.approx(400.0) and host.first_microbatch_cold_us == pytest.approx(100.0)
    assert launches.spread("step_loop_us") == pytest.approx((300.0, 500.0))
    report = launches.as_dict()
    assert report["launches"] == 3 and report["forward_us"]["per_launch"] == pytest.approx(
        [d.kernel_launch_overhead_us for d in own])
    assert (report["forward_us"]["min"], report["forward_us"]["max"]) == pytest.approx((forwards[0], forwards[2]))
    note = launches.note()
    assert note.startswith("median of 3 rank-step probe launches: forward ")
    assert f"min..max {forwards[0]:.2f}..{forwards[2]:.2f}" in note


def test_one_launch_low_moves_no_field():
    """The point of the median: the second launch alone reading 25 % low leaves every field at the others'."""
    from executor.step_launches import LaunchFields, StepLaunches

    good = LaunchFields(forward_us=10.0, backward_us=12.0, op_call_us=4.0, step_loop_us=400.0, first_cold_us=100.0)
    low = LaunchFields(forward_us=7.5, backward_us=9.0, op_call_us=3.0, step_loop_us=300.0, first_cold_us=75.0)
    near = dataclasses.replace(good, forward_us=10.5)
    assert StepLaunches((good, low, near)).median == good
