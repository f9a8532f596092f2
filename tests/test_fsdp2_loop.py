"""FSDP2's loop outside every phase (fsdp29, issue 11): ``host.fsdp2_sync_switch_us`` per micro-batch and
``host.fsdp2_zero_grad_us`` per step, measured in the rank-step probe's FSDP2 steps and charged by
:func:`simulator.step_loop.step_loop_s` where FSDP2 wraps the model.

The executor's FSDP2 cases spent 1.1-1.4 ms per step outside every phase against DDP's 0.5-0.65 ms; the plain
loop's ``host.step_loop_us`` covered DDP only (docs/validation.md, "val27" and "fsdp29")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from executor.calibrate_host import with_step_loop
from executor.compute_bench import Timing
from executor.step_timing import RankStepTiming
from recorded_step import recorded_step, with_host
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.io import cluster_to_dict, load_cluster, save_cluster
from simulator.run_results import load_results
from simulator.validate import run_cluster

RUNS = Path(__file__).resolve().parent / "data" / "suite_quick"


def _ms(x: float) -> Timing:
    return Timing(median_s=x * 1e-3, p10_s=x * 1e-3, p90_s=x * 1e-3)


def _steps(fsdp2_zero=(0.30, 0.28), plain_zero=(0.09, 0.11), switch=(0.20, 0.22)) -> RankStepTiming:
    one = (_ms(0.5), _ms(0.5))
    return RankStepTiming(processes=2, micro_batches=2, forward=one, backward=one, outside=(_ms(0.30), _ms(0.34)),
                          fsdp2_outside=(_ms(0.9), _ms(0.9)), fsdp2_switch=tuple(_ms(x) for x in switch),
                          fsdp2_zero_grad=tuple(_ms(x) for x in fsdp2_zero),
                          zero_grad=tuple(_ms(x) for x in plain_zero))


def test_the_probe_terms_hand_worked():
    """switch: mean(0.20, 0.22) ms per step / 2 micro-batches = 105 µs per call; zero_grad: mean(0.30, 0.28) −
    mean(0.09, 0.11) ms = 0.29 − 0.10 = 190 µs per step; never negative; None without FSDP2 steps."""
    assert _steps().fsdp2_sync_switch_us == pytest.approx(105.0, rel=1e-12)
    assert _steps().fsdp2_zero_grad_us == pytest.approx(190.0, rel=1e-12)
    assert _steps(fsdp2_zero=(0.05, 0.05)).fsdp2_zero_grad_us == 0.0
    bare = dataclasses.replace(_steps(), fsdp2_switch=(), fsdp2_zero_grad=(), zero_grad=())
    assert bare.fsdp2_sync_switch_us is None and bare.fsdp2_zero_grad_us is None


def test_the_calibration_writes_them_beside_the_plain_loop():
    node = load_cluster("localhost-cpu").node
    host = with_step_loop(node, _steps()).host
    assert (host.step_loop_us, host.fsdp2_sync_switch_us, host.fsdp2_zero_grad_us) == pytest.approx((320, 105, 190))
    bare = dataclasses.replace(_steps(), fsdp2_switch=(), fsdp2_zero_grad=(), zero_grad=())
    host = with_step_loop(node, bare).host
    assert (host.fsdp2_sync_switch_us, host.fsdp2_zero_grad_us) == (0.0, 0.0)


def _with(cluster, switch_us: float, zero_us: float):
    return with_host(cluster, fsdp2_sync_switch_us=switch_us, fsdp2_zero_grad_us=zero_us)


def _step(case: str, cluster):
    work, _, analytical, des = recorded_step(case, cluster)
    return work, analytical, des


def _base(case: str):
    return run_cluster(load_results(RUNS / f"{case}.results.json"), "localhost-cpu")


def test_fsdp2_steps_grow_by_m_switches_and_the_zeroing_in_both_engines():
    """The recorded zero3 case: 2 processes on 2 cores (share 1), m = 2: 2 × 100 + 200 = 400 µs per step, once
    (before the slowest-rank gain, 0 on localhost-cpu); fails without the term."""
    base = _base("zero3")
    bare, analytical0, des0 = _step("zero3", base)
    work, analytical1, des1 = _step("zero3", _with(base, 100.0, 200.0))
    assert work.micro_batches == 2
    assert work.stages[0].optimizer_s == pytest.approx(bare.stages[0].optimizer_s + 400e-6, rel=1e-12)
    assert analytical1 - analytical0 == pytest.approx(400e-6, rel=1e-6)
    assert des1 - des0 == pytest.approx(400e-6, rel=1e-6)


def test_a_ddp_step_is_not_charged_them():
    base = _base("ddp-overlap")
    assert _step("ddp-overlap", _with(base, 100.0, 200.0))[1:] == _step("ddp-overlap", base)[1:]


def test_the_terms_read_from_a_file_and_written_back(tmp_path):
    d = cluster_to_dict(_base("zero3"))
    d["host"].update(fsdp2_sync_switch_us=98.2, fsdp2_zero_grad_us=198.1)
    cluster = cluster_from_dict(d)
    assert (cluster.node.host.fsdp2_sync_switch_us, cluster.node.host.fsdp2_zero_grad_us) == (98.2, 198.1)
    assert load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml"))).node.host == cluster.node.host
