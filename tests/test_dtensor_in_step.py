"""The DTensor surcharge per optimizer call, taken from FSDP2 ZeRO-3 steps of the rank-step probe (val27, issue 11).

The suite's FSDP2 cases (zero2, zero3, zero3-offload) measured their AdamW step 1.3-1.9x the estimate in every quiet
suite of 2026-11-26; the per-call surcharge had been read from a fake group's tight loop, the plain calls from a
rank's step (docs/validation.md, "val27")."""

from __future__ import annotations

import dataclasses

import pytest

from executor.calibrate_host import with_step_dtensor_calls
from executor.compute_bench import Timing
from executor.compute_grid import executed, tiny_model
from executor.step_timing import RankStepTiming
from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import DtypePolicy, load_model

GPT_TINY = executed(tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32))


def _ms(x: float) -> Timing:
    return Timing(median_s=x * 1e-3, p10_s=x * 1e-3, p90_s=x * 1e-3)


def _steps(fsdp2=(9.80, 10.20), tensors: int = 28) -> RankStepTiming:
    """Plain AdamW 1.40 / 1.60 ms on the two ranks, over FSDP2's shards ``fsdp2`` ms."""
    one = (_ms(0.5), _ms(0.5))
    return RankStepTiming(processes=2, micro_batches=2, forward=one, backward=one, outside=one,
                          optimizer=(_ms(1.40), _ms(1.60)), fsdp2_optimizer=tuple(_ms(x) for x in fsdp2),
                          optimizer_tensors=tensors)


def test_the_in_step_surcharge_is_the_shards_step_less_the_plain_one_per_call():
    """(mean(9.80, 10.20) − mean(1.40, 1.60)) ms / (10 calls × 28 tensors) = 8.5 ms / 280 = 30.357 µs per call."""
    assert _steps().dtensor_call_us == pytest.approx(8.5e3 / 280, rel=1e-12)
    assert _steps(fsdp2=(1.0, 1.2)).dtensor_call_us == 0.0  # faster than the plain step: 0, never negative
    assert _steps(fsdp2=()).dtensor_call_us is None  # FSDP2 not run
    assert _steps(tensors=0).dtensor_call_us is None


def test_the_calibration_writes_the_in_step_figure_and_keeps_the_base_without_one():
    device = load_cluster("localhost-cpu").device
    assert with_step_dtensor_calls(device, _steps()).dtensor_call_overhead_us == pytest.approx(8.5e3 / 280)
    assert with_step_dtensor_calls(device, _steps(fsdp2=())) == device
    assert with_step_dtensor_calls(device, None) == device


def test_the_surcharge_moves_the_zero3_optimizer_by_its_calls():
    """ZeRO-3 under FSDP2 on 2 ranks of the 2-core host: the step's 280 AdamW calls (28 tensors) each pay the
    surcharge once; 17.7 → 30.357 µs adds 280 × 12.657 µs = 3.544 ms to the step, in both engines' common path."""
    base = load_cluster("localhost-cpu")
    strategy = strategy_from_flat({"dp": 2, "zero": 3, "framework": "fsdp2", "global_batch": 8, "micro_batch": 2})
    times = []
    for us in (17.7, 8.5e3 / 280):
        cluster = dataclasses.replace(base, device=dataclasses.replace(base.device, dtensor_call_overhead_us=us))
        times.append(estimate(cluster, GPT_TINY, strategy).step_time_s)
    assert times[1] - times[0] == pytest.approx(280 * (8.5e3 / 280 - 17.7) * 1e-6, rel=1e-6)



def test_the_suite_note_names_the_written_figure_and_the_tight_loop_it_replaced():
    from types import SimpleNamespace

    from executor.suite_calibration import _dtensor_call_note

    fields = SimpleNamespace(dtensor_call_overhead_us=8.5e3 / 280)
    compute = SimpleNamespace(fields=fields, fsdp2_optimizer=SimpleNamespace(dtensor_call_us=17.2), rank_steps=_steps())
    assert _dtensor_call_note(compute) == ("per DTensor optimizer call 30.4 us more (in a rank's FSDP2 step; tight loop "
                                           "17.2 us), ")
    assert _dtensor_call_note(SimpleNamespace(fields=fields, fsdp2_optimizer=None, rank_steps=None)) == (
        "per DTensor optimizer call 30.4 us more, ")
