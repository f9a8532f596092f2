"""Activation offload (simulator.compile.act_offload_part): each block's full-recomputation checkpoint is
copied to the host in forward and back in backward over the GPU's host link, blocking the compute;
both engines charge the same copies, and the planner ranks it only where GPU memory demands it."""

from __future__ import annotations

import pytest

from simulator.strategy.kinds import MixedPrecision

import planner
from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.compile import compile_step
from simulator.engine.step import simulate
from simulator.memory import memory_report
from simulator.results import Category
from simulator.strategy import Framework, Recompute, Strategy, ZeroStage
from simulator.work import CommKind
from simulator.workload import get_preset

A100 = load_cluster("dgx-a100", nodes=1)   # host link: PCIe Gen4 x16, 24 GB/s, 10 µs per copy (the preset)


def _pair(**kw):
    """Without and with the offload; the bf16 stream of 16-bit parameters (param-dtype, as DeepSpeed and Megatron
    hold it; under torch's autocast the checkpoints are the fp32 stream, twice the bytes)."""
    kw = {"mixed_precision": MixedPrecision.PARAM_DTYPE, **kw}
    return (Strategy(recompute=Recompute.FULL, **kw),
            Strategy(recompute=Recompute.FULL, offload_activations=True, **kw))


def test_copy_time_against_the_hand_worked_number():
    """GPT-3 1.3B (24 layers, h 2048), seq 2048, mbs 1, tp 2 without sequence parallelism: a block's
    checkpoint is s·b·h·2 = 2048·1·2048·2 = 8,388,608 bytes (not split over tp); one copy takes
    10 µs + 8,388,608 / 24e9 s = 359.525 µs; pp 2 puts 12 blocks on a rank, one copy each way per
    block: 24 per micro-batch, 8 micro-batches (gbs 16, dp 2): 69.03 ms of offload per rank."""
    gpt = get_preset("gpt3-1.3b").with_seq(2048)
    # Megatron keeps a 16-bit residual stream; under torch DDP's autocast it is fp32 and the memory model
    # counts 4-byte checkpoints (simulator.memory.autocast.residual_bytes), which the compile side's
    # e-byte block boundary does not read yet
    off, on = _pair(global_batch=16, tp=2, pp=2, framework=Framework.MEGATRON)
    chunk = compile_step(A100, gpt, on).stages[0].chunks[0]
    copies = [c for c in chunk.tp_fwd + chunk.tp_bwd if c.kind is CommKind.OFFLOAD]
    assert len(copies) == 24 and {c.nbytes for c in copies} == {8_388_608}
    assert copies[0].time_s == pytest.approx(10e-6 + 8_388_608 / 24e9, rel=1e-12)
    assert copies[0].time_s == pytest.approx(359.525e-6, rel=1e-6)
    assert not [c for c in compile_step(A100, gpt, off).stages[0].chunks[0].tp_fwd if c.kind is CommKind.OFFLOAD]
    for engine in (lambda s: estimate(A100, gpt, s), lambda s: simulate(compile_step(A100, gpt, s), A100)):
        result = engine(on)
        assert result.breakdown[Category.OFFLOAD] == pytest.approx(8 * 24 * 359.525e-6, rel=1e-6)
        assert result.step_time_s > engine(off).step_time_s + 0.069
    # the bytes are the memory model's checkpoints: what it puts in host memory, per block and micro-batch
    report = memory_report(gpt, A100, on)
    assert report.stages[0].activations.host_checkpoint_bytes == pytest.approx(
        8_388_608 * 12 * report.stages[0].activations.micro_batches_in_flight, rel=1e-12)


def test_without_pipelining_the_step_grows_by_the_copies():
    """pp 1: the copies block the compute of every micro-batch, nothing else changes in the closed form;
    with sequence parallelism a rank copies its 1/tp of the checkpoint (hand-worked as above, ÷ 2)."""
    gpt = get_preset("gpt3-1.3b").with_seq(2048)
    off, on = _pair(global_batch=8, tp=2, sequence_parallel=True)   # dp 4, 2 micro-batches of 24 blocks
    copy_s = 10e-6 + 8_388_608 / 2 / 24e9
    a_off, a_on = estimate(A100, gpt, off), estimate(A100, gpt, on)
    assert a_on.step_time_s - a_off.step_time_s == pytest.approx(2 * 48 * copy_s, rel=1e-9)
    d_off, d_on = (simulate(compile_step(A100, gpt, s), A100) for s in (off, on))
    assert d_on.breakdown[Category.OFFLOAD] == pytest.approx(a_on.breakdown[Category.OFFLOAD], rel=1e-9)
    # the DES plays the tp calls and gradient buckets on shared links: the copies shift when they meet,
    # so the step grows by the copies give or take what that contention adds to the closed form
    contention = (d_off.breakdown[Category.TP] - a_off.breakdown[Category.TP]
                  + d_off.breakdown[Category.DP] - a_off.breakdown[Category.DP])
    assert 0 < contention < 0.1 * 2 * 48 * copy_s
    assert abs(d_on.step_time_s - d_off.step_time_s - 2 * 48 * copy_s) <= contention


GPT27 = get_preset("gpt3-2.7b").with_seq(65536)   # 32 layers, h 2560: 10.7 GB of checkpoints on one GPU


def test_the_planner_chooses_it_where_memory_demands():
    """With 25 GB of the A100's 80 kept free, no plan fits without activation offload: the best uses it
    (the planner ranks it as a rescue of the full-recomputation bases that miss GPU memory)."""
    result = planner.plan(GPT27, A100, gpus=1, global_batch=1, refine=0, reserve_gb=25)
    strategies = list(result.frame["strategy"])
    assert strategies and all(s.offload_activations for s in strategies)
    assert result.frame["memory_bytes"][0] <= 55e9
    # 32 blocks of 65536·2560·2 = 335,544,320 bytes, copied out and back: at least 0.895 s of offload
    assert result.frame["offload"][0] >= 32 * 2 * 335_544_320 / 24e9


def test_the_planner_leaves_it_out_where_memory_does_not_demand_it():
    gpt = get_preset("gpt3-1.3b").with_seq(2048)
    result = planner.plan(gpt, A100, gpus=8, global_batch=16, refine=0, pins={"zero": (ZeroStage.ZERO1,)})
    assert not any(s.offload_activations for s in result.frame["strategy"])
    roomy = planner.plan(GPT27, A100, gpus=1, global_batch=1, refine=0)   # without the reserve: ranked, slower
    first = [s.offload_activations for s in roomy.frame["strategy"]]
    assert not first[0] and any(first)


def test_a_pin_searches_only_offloaded_plans():
    gpt = get_preset("gpt3-1.3b").with_seq(2048)
    result = planner.plan(gpt, A100, gpus=8, global_batch=16, refine=0,
                          pins={"zero": (ZeroStage.ZERO1,), "offload_activations": (True,)})
    assert len(result.frame) and all(s.offload_activations and s.recompute is Recompute.FULL
                                     for s in result.frame["strategy"])
