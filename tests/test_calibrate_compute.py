"""``trainplan calibrate --compute``: the measured device fields, how the compute model uses them, the CLI.

- ``device.kernel_launch_overhead_us`` round-trips through a cluster file and is charged once per kernel of
  the op list: hand-counted, a llama block has 9 forward and 13 backward kernels (norm, qkv, flash
  attention, out_proj, 2 MLP GEMMs, residual, activation, rotary; a GEMM's backward is 2 GEMMs);
- the fields are derived from measurements as ``executor.calibrate_compute`` documents (synthetic rows,
  exact arithmetic), and the compute model then reproduces the measured block exactly;
- the measuring code runs for real on a tiny grid (a few seconds), and the CLI checks its inputs first.
"""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest
import torch

from executor.calibrate_compute import (ComputeGrid, GemmRow, MemoryRow, calibrate_compute, curve_points,
                                        device_fields, host_cores, run_shapes, tiny_model)
from executor.calibrate_calls import step_call_overheads
from executor.compute_bench import MemoryKernel, Timing, model_bytes
from executor.compute_grid import executed
from simulator.analytical import estimate
from simulator.cluster.io import load_cluster, save_cluster
from simulator.compute import achievable_hbm_Bps, layer_times, microbatch_time, total_time
from simulator.errors import SpecError
from simulator.gemm_shape import GemmShape
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import DtypePolicy, load_model
from simulator.workload.ops import edge_work, layer_work
from trainplan.__main__ import main

LLAMA_TINY = tiny_model(load_model("llama2-7b"), DtypePolicy.FP32)


def _with_overhead(cluster, overhead_us: float):
    """``cluster`` with one host figure per call, forward and backward alike."""
    return dataclasses.replace(cluster, device=dataclasses.replace(cluster.device, kernel_launch_overhead_us=overhead_us,
                                                                   backward_call_overhead_us=None))


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_overhead_round_trips_through_a_cluster_file(suffix, tmp_path):
    cluster = _with_overhead(load_cluster("localhost-cpu"), 37.25)
    loaded = load_cluster(str(save_cluster(cluster, tmp_path / f"c{suffix}")))
    assert loaded == cluster
    assert loaded.device.kernel_launch_overhead_us == 37.25


def test_a_file_without_the_key_has_no_overhead_and_a_negative_one_names_the_field(tmp_path):
    from simulator.cluster.io import cluster_to_dict
    from simulator.cluster._schema import cluster_from_dict

    d = cluster_to_dict(load_cluster("localhost-cpu"))
    del d["device"]["kernel_launch_overhead_us"]
    assert cluster_from_dict(d).device.kernel_launch_overhead_us == 0.0
    d["device"]["kernel_launch_overhead_us"] = -1.0
    with pytest.raises(SpecError, match="device.kernel_launch_overhead_us"):
        cluster_from_dict(d)


def test_llama_block_kernels_are_counted_by_hand():
    works = layer_work(LLAMA_TINY, 2)  # eager SwiGLU: F.silu then the multiply, two kernels each way
    assert sum(len(w.fwd) for w in works) == 10
    assert sum(len(w.bwd) for w in works) == 14


LLAMA_BLOCK_CALLS = 73 + 111
"""Operators eager torch dispatches for llama2-7b's tiny block, forward + backward (tests/test_eager_dispatch.py
counts them), for its 10 + 14 kernels."""


def test_overhead_is_charged_once_per_dispatched_operator():
    """Per block: +184·o; per micro-batch of the whole model: +(layers·184 + edge operators)·o."""
    base = _with_overhead(load_cluster("localhost-cpu"), 0.0)
    o_us = 25.0
    slow = _with_overhead(base, o_us).device
    layer0 = total_time(layer_times(LLAMA_TINY, base.device, 2))
    layer1 = total_time(layer_times(LLAMA_TINY, slow, 2))
    assert layer1 - layer0 == pytest.approx(LLAMA_BLOCK_CALLS * o_us * 1e-6, rel=1e-9)
    edge = sum(k.dispatches for w in edge_work(LLAMA_TINY, 2) for k in w.fwd + w.bwd)
    step0, step1 = microbatch_time(LLAMA_TINY, base.device, 2), microbatch_time(LLAMA_TINY, slow, 2)
    assert step1 - step0 == pytest.approx((LLAMA_TINY.layers * LLAMA_BLOCK_CALLS + edge) * o_us * 1e-6, rel=1e-9)


def test_a_larger_overhead_gives_a_longer_step_estimate():
    base = load_cluster("localhost-cpu")
    strategy = strategy_from_flat({"dp": 2, "global_batch": 8, "micro_batch": 2})
    times = [estimate(_with_overhead(base, o), LLAMA_TINY, strategy).step_time_s for o in (0.0, 10.0, 40.0)]
    assert times[0] < times[1] < times[2]
    # 4 micro-batches per rank, each at least its compute: the forward alone adds 4·(2·9 + 2)·30 µs
    assert times[2] - times[1] >= 4 * (2 * 9 + 2) * 30e-6


def _timing(seconds: float) -> Timing:
    return Timing(median_s=seconds, p10_s=seconds, p90_s=seconds)


def test_fields_from_synthetic_measurements():
    """Peak raised to the best rate; curve = rate / peak per FLOP count (median over equal FLOPs);
    hbm efficiency = median bandwidth at the largest size / hbm_bw; overhead reproduces the block."""
    base = load_cluster("localhost-cpu").device  # fp32 peak 0.078 TFLOP/s, 9.7 GB/s
    a, b, c = GemmShape(32, 32, 32), GemmShape(64, 64, 64), GemmShape(32, 128, 64)  # b and c: equal FLOPs
    gemms = (GemmRow(shape=a, timing=_timing(a.flops / 20e9)), GemmRow(shape=b, timing=_timing(b.flops / 100e9)),
             GemmRow(shape=c, timing=_timing(c.flops / 60e9)))
    points = curve_points(gemms, 0.1)
    assert [f for f, _ in points] == [a.flops, b.flops]
    assert [e for _, e in points] == pytest.approx([0.2, 0.8])
    rates = {MemoryKernel.ADD: 4.0, MemoryKernel.GELU: 5.0, MemoryKernel.ADAM: 6.0}  # GB/s at the largest size
    memory = tuple(MemoryRow(kernel=k, elements=n, bytes=model_bytes(k, n, DtypePolicy.FP32),
                             timing=_timing(model_bytes(k, n, DtypePolicy.FP32) / (gbps * 1e9 if n > 10 else 1e6)))
                   for k, gbps in rates.items() for n in (10, 1000))
    grid = ComputeGrid(shapes=(a, b, c), elements=(10, 1000), block=LLAMA_TINY, micro_batch=2)
    block = _timing(1e-3)
    device, kernels, roofline = device_fields(base, grid, gemms, memory, block, DtypePolicy.FP32, "synthetic")
    assert device.peak_tflops[DtypePolicy.FP32.compute_dtype] == pytest.approx(0.1)
    assert device.hbm_bw_GBps == base.hbm_bw_GBps
    assert device.gemm_efficiency.hbm_efficiency == pytest.approx(5.0 / 9.7)
    assert kernels == LLAMA_BLOCK_CALLS + 1  # the block's operators and the bench's leaf input's .grad add_
    assert device.kernel_launch_overhead_us == pytest.approx((1e-3 - roofline) / (LLAMA_BLOCK_CALLS + 1) * 1e6)
    assert device.backward_call_overhead_us is None  # one figure for both phases without the phases timed apart
    bench = total_time(layer_times(LLAMA_TINY, device, 2)) + device.kernel_launch_overhead_us * 1e-6
    assert bench == pytest.approx(1e-3, rel=1e-9)


def test_bare_call_and_dispatch_fields_from_synthetic_measurements():
    """The bare call becomes ``op_call_overhead_us``; on an async device (a GPU) a host-bound block gives
    o = t_block / kernels, a device-bound one keeps the base's o (it only bounds it)."""
    from simulator.cluster.spec import KernelDispatch

    base = dataclasses.replace(load_cluster("localhost-cpu").device, kernel_launch_overhead_us=3.0)
    shape = GemmShape(64, 64, 64)
    gemms = (GemmRow(shape=shape, timing=_timing(shape.flops / 50e9)),)
    memory = tuple(MemoryRow(kernel=k, elements=1000, bytes=model_bytes(k, 1000, DtypePolicy.FP32),
                             timing=_timing(model_bytes(k, 1000, DtypePolicy.FP32) / 5e9)) for k in MemoryKernel)
    grid = ComputeGrid(shapes=(shape,), elements=(1000,), block=LLAMA_TINY, micro_batch=2)
    inline, kernels, roofline = device_fields(base, grid, gemms, memory, _timing(1e-3), DtypePolicy.FP32, "s",
                                              bare=_timing(2.5e-6))
    assert inline.op_call_overhead_us == pytest.approx(2.5) and inline.kernel_dispatch is KernelDispatch.INLINE
    host_bound, launches, _ = device_fields(base, grid, gemms, memory, _timing(1e-3), DtypePolicy.FP32, "s",
                                            dispatch=KernelDispatch.ASYNC)
    assert (kernels, launches) == (LLAMA_BLOCK_CALLS + 1, 10 + 14)  # a GPU counts the block's kernel launches
    assert roofline < 1e-3 and host_bound.kernel_launch_overhead_us == pytest.approx(1e-3 / launches * 1e6)
    assert host_bound.op_call_overhead_us == base.op_call_overhead_us  # no bare call measured: kept
    device_bound, _, _ = device_fields(base, grid, gemms, memory, _timing(roofline / 2), DtypePolicy.FP32, "s",
                                       dispatch=KernelDispatch.ASYNC)
    assert device_bound.kernel_launch_overhead_us == 3.0


def test_run_shapes_are_the_gemms_the_tiny_run_plans():
    shapes = run_shapes(LLAMA_TINY, 2)
    T, h = 2 * LLAMA_TINY.seq_len, LLAMA_TINY.hidden
    assert GemmShape(T, LLAMA_TINY.q_dim + 2 * LLAMA_TINY.kv_dim, h) in shapes  # qkv forward
    assert GemmShape(T, LLAMA_TINY.vocab, h) in shapes  # logits forward
    assert len(shapes) == len(set(shapes))


def test_run_shapes_cover_the_tensor_parallel_tiny_runs():
    """At tp 2 the tiny model is twice as wide and each rank holds half the heads and FFN."""
    from executor.calibrate_compute import default_grid

    shapes = default_grid(load_model("llama2-7b"), DtypePolicy.FP32).shapes
    wide = tiny_model(load_model("llama2-7b"), DtypePolicy.FP32, tp=2)
    assert wide.hidden == 2 * LLAMA_TINY.hidden
    T = 2 * wide.seq_len
    assert GemmShape(T, (wide.q_dim + 2 * wide.kv_dim) / 2, wide.hidden) in shapes  # qkv on one of 2 ranks
    assert len(shapes) == len(set(shapes))


@pytest.mark.parametrize("model", ["llama2-7b", "gpt3-125m"])
def test_calibrate_measures_a_tiny_grid_and_keeps_the_network(model, tmp_path):
    base = load_cluster("localhost-cpu")
    block = tiny_model(load_model(model), DtypePolicy.FP32)
    grid = ComputeGrid(shapes=(GemmShape(32, 32, 32), GemmShape(64, 64, 64)), elements=(1024,), block=block,
                       micro_batch=2)
    cluster, report = calibrate_compute(base, load_model(model), grid=grid, repeats=3, warmup=1, nproc=2)
    # the table prints a GPU-shaped report too (nccl: no host probes, no rank step, no tight-loop figures)
    from trainplan.cmd_calibrate import _print_compute
    _print_compute(dataclasses.replace(report, tp_modules=None, ddp=None, adamw=None, checkpoint=None, fsdp2=None,
                                       pipeline=None, fsdp2_zero2=None, rank_steps=None, block_call_us=None,
                                       step_checkpoint=None))
    assert report.threads == max(1, (torch.multiprocessing.cpu_count()) // 2)
    assert len(report.gemms) == 2 and len(report.memory) == len(MemoryKernel)
    assert len(cluster.device.gemm_efficiency.points) == 2
    assert cluster.device.kernel_launch_overhead_us >= 0
    steps = report.rank_steps  # the per-operator fields: the whole model in a rank's step, not the block's loop
    expected = step_call_overheads(cluster.device, executed(block), 2, steps.warm_forward_s, steps.backward_s)
    assert (cluster.device.kernel_launch_overhead_us, cluster.device.backward_call_overhead_us) == pytest.approx(
        (expected.kernel_launch_overhead_us, expected.backward_call_overhead_us), rel=1e-12)
    assert steps.processes == 2 and len(report.block_call_us) == 3
    assert "calibrate --compute" in cluster.device.gemm_efficiency.source
    # the step less its update, per call; the CPU runs torch's for-loop AdamW (no foreach kernels on an inline
    # device), whose unfused passes move 80 B per fp32 parameter (simulator/compile/offload_part.py), at the
    # device's achievable bandwidth. (28 B, one fused pass, made this check pass only while both sides were 0.)
    adamw = report.adamw
    update_s = adamw.params * 80 / achievable_hbm_Bps(cluster.device)
    assert adamw.tensors == (15 if model == "llama2-7b" else 28)  # 2 blocks' tensors + embeddings, final norm
    in_step = report.rank_steps.optimizer_timing  # the AdamW step as a rank's step runs it, not its tight loop
    assert cluster.device.op_call_overhead_us == pytest.approx(
        max(0.0, (in_step.median_s - update_s) / (10 * adamw.tensors) * 1e6))
    assert report.block_call_us[2] == pytest.approx(max(0.0, (adamw.step.median_s - update_s) / (10 * adamw.tensors) * 1e6))
    tp = report.tp_modules  # the tp = 2 tiny model (2 blocks): 4 modules per block + embedding + output layer
    assert tp.modules == 10
    assert tp.forward_module_us == pytest.approx(max(0.0, (tp.tp_forward.p10_s - tp.plain_forward.p10_s) / 10 * 1e6))
    assert tp.forward_module_us + tp.backward_module_us == pytest.approx(max(
        tp.forward_module_us, (tp.tp_step.p10_s - tp.plain_step.p10_s) / 10 * 1e6))
    host = dataclasses.replace(base.node.host, cpu_cores=host_cores(),  # this machine's cores and tp terms
                               tp_forward_module_us=tp.forward_module_us, tp_backward_module_us=tp.backward_module_us,
                               # DDP's terms from its steps in the rank-step probe, the bucket passes left out
                               ddp_forward_call_us=steps.ddp_forward_call_us,
                               ddp_sync_backward_us=max(0.0, steps.ddp_sync_extra_s - report.ddp.bucket_passes_s) * 1e6,
                               # the checkpoint's terms from checkpointed blocks in a rank's DDP step
                               checkpoint_forward_region_us=report.step_checkpoint.forward_region_us,
                               checkpoint_backward_region_us=report.step_checkpoint.backward_region_us,
                               fsdp2_forward_module_us=report.fsdp2.forward_module_us,
                               fsdp2_backward_module_us=report.fsdp2.backward_module_us,
                               fsdp2_zero2_backward_module_us=report.fsdp2_zero2.backward_module_us,
                               pipeline_action_us=report.pipeline.action_us,
                               pipeline_p2p_post_us=report.pipeline.post_us,
                               pipeline_chunk_us=report.pipeline.chunk_us,  # the stages' bookkeeping
                               step_loop_us=max(0.0, steps.outside_s * 1e6),  # the loop's own time per step
                               first_microbatch_cold_us=max(0.0, steps.first_cold_s * 1e6))
    from simulator.compute import Phase
    from simulator.workload import Recompute
    # the model's recompute of a block on the calibrated device, left out of the checkpoint's backward term
    assert report.step_checkpoint.recompute_region_s == pytest.approx(total_time(layer_times(
        executed(block), cluster.device, 2, recompute=Recompute.FULL), Phase.RECOMPUTE), rel=1e-12)
    assert report.step_checkpoint.blocks == block.layers
    assert report.fsdp2.dp == 2 and report.fsdp2.modules == block.layers + 1  # blocks and the root, fake 2-rank group
    assert report.fsdp2.reshard_after_forward and not report.fsdp2_zero2.reshard_after_forward  # ZeRO-3, ZeRO-2
    # the DTensor surcharge per optimizer call, measured through FSDP2's shards (executor.fsdp2_host_bench)
    assert cluster.device.dtensor_call_overhead_us == report.fsdp2_optimizer.dtensor_call_us
    assert report.fsdp2_optimizer.tensors == (15 if model == "llama2-7b" else 28)
    pipe = report.pipeline  # 2 processes, GPipe over 4 micro-batches: 19 actions per rank (tests/test_pipeline_runtime.py)
    assert pipe.actions == (19, 19) and pipe.action_us == pytest.approx(
        sum(o.median_s for o in pipe.outside) / 38 * 1e6, rel=1e-12)
    assert pipe.p2p == (8, 8) and pipe.post_us == pytest.approx(sum(o.median_s for o in pipe.post) / 16 * 1e6,
                                                                 rel=1e-12)
    assert pipe.compute == (8, 8) and pipe.chunk_us == pytest.approx(
        max(0.0, sum(o.median_s for o in pipe.chunk) / 16 * 1e6), rel=1e-12)
    ck = report.checkpoint  # per checkpointed block, the backward less the model's own recompute of the block
    assert ck.regions == 2 and ck.recompute_region_s > 0
    assert ck.forward_region_us == pytest.approx(max(0.0, (ck.checkpointed_forward.p10_s - ck.plain_forward.p10_s)
                                                     / 2 * 1e6))
    assert ck.backward_region_us == pytest.approx(max(0.0, (ck.checkpointed_step.p10_s - ck.plain_step.p10_s) / 2 * 1e6
                                                      - ck.forward_region_us - ck.recompute_region_s * 1e6))
    ddp = report.ddp  # DDP's terms: the wrapped model's extra time per forward, and per synchronising backward
    assert ddp.forward_call_us == pytest.approx(max(0.0, (ddp.ddp_forward.p10_s - ddp.plain_forward.p10_s) * 1e6))
    # the reducer's bucket passes are the step's kernel (simulator.compile.ddp_copies), not host time: subtracted
    from executor.calibrate_host import ddp_bucket_passes_s
    assert ddp.bucket_passes_s == pytest.approx(ddp_bucket_passes_s(cluster.device, block))
    assert ddp.bucket_passes_s > 0
    assert ddp.forward_call_us + ddp.sync_backward_us == pytest.approx(max(
        ddp.forward_call_us, (ddp.ddp_step.p10_s - ddp.plain_step.p10_s - ddp.bucket_passes_s) * 1e6))
    assert cluster.node == dataclasses.replace(base.node, host=host)
    assert cluster.comm == base.comm and cluster.name == "localhost-cpu-calibrated"
    assert load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml"))) == cluster


def test_cli_compute_writes_a_file_that_loads(tmp_path, monkeypatch, capsys):
    import executor.compute_grid as cg

    monkeypatch.setattr(cg, "SQUARE_SIDES", (32,))
    monkeypatch.setattr(cg, "ELEMENTS", (1024,))
    out = tmp_path / "cpu.yaml"
    assert main(["calibrate", "--compute", "--out", str(out), "--repeats", "2", "--warmup", "1", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    loaded = load_cluster(str(out))
    assert loaded.device.kernel_launch_overhead_us == pytest.approx(printed["kernel_launch_overhead_us"])
    assert loaded.device.backward_call_overhead_us == pytest.approx(printed["backward_call_overhead_us"])
    assert printed["rank_steps"]["processes"] == 2 and len(printed["rank_steps"]["forward"]) == 2
    assert len(printed["rank_steps"]["first_cold"]) == 2
    assert "save_steps" not in printed and "step_after_save" not in loaded.source  # cal19: retired
    assert loaded.node.host.checkpoint_forward_region_us == pytest.approx(
        printed["step_checkpoint"]["checkpoint_forward_region_us"])
    assert loaded.node.host.step_loop_us == pytest.approx(max(0.0, statistics.fmean(
        t["median_s"] for t in printed["rank_steps"]["outside"]) * 1e6))
    assert [list(p) for p in loaded.device.gemm_efficiency.points] == printed["gemm_efficiency"]
    assert loaded.node.host.tp_forward_module_us == pytest.approx(printed["tp_modules"]["tp_forward_module_us"])
    assert loaded.node.host.tp_backward_module_us == pytest.approx(printed["tp_modules"]["tp_backward_module_us"])
    steps = printed["rank_steps"]  # DDP's terms: from its steps in the probe (the tight loop's stay in "ddp")
    assert len(steps["ddp_forward"]) == len(steps["ddp_last_backward"]) == len(steps["last_backward"]) == 2
    assert loaded.node.host.ddp_forward_call_us == pytest.approx(steps["ddp_forward_call_us"])
    assert loaded.node.host.ddp_sync_backward_us <= steps["ddp_sync_extra_s"] * 1e6 + 1e-9
    assert loaded.node.host.fsdp2_forward_module_us == pytest.approx(printed["fsdp2"]["fsdp2_forward_module_us"])
    assert loaded.node.host.pipeline_action_us == pytest.approx(printed["pipeline"]["pipeline_action_us"])
    assert loaded.node.host.pipeline_action_us > 0
    assert loaded.node.host.pipeline_p2p_post_us == pytest.approx(printed["pipeline"]["pipeline_p2p_post_us"])
    assert loaded.node.host.pipeline_p2p_post_us > 0
    assert loaded.node.host.pipeline_chunk_us == pytest.approx(printed["pipeline"]["pipeline_chunk_us"])
    assert loaded.node.host.fsdp2_zero2_backward_module_us == pytest.approx(
        printed["fsdp2_zero2"]["fsdp2_zero2_backward_module_us"])


@pytest.mark.parametrize("argv, needle", [
    (["--out", "x.txt"], "out"),
    (["--out", "{tmp}/c.yaml", "--threads", "0"], "threads"),
    (["--out", "{tmp}/c.yaml", "--model", "nope"], "model"),
    (["--out", "{tmp}/c.yaml", "--precision", "fp16"], "precision"),
])
def test_cli_compute_refuses_bad_input_in_one_line(argv, needle, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        code = main(["calibrate", "--compute", *argv])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: nccl would measure it")
def test_cli_compute_nccl_without_a_gpu_is_one_line_exit_2(tmp_path, capsys):
    assert main(["calibrate", "--compute", "--backend", "nccl", "--out", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "backend" in err and not (tmp_path / "c.yaml").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: nccl would measure it")
def test_the_function_refuses_nccl_without_a_gpu_before_measuring():
    with pytest.raises(SpecError, match="backend"):
        calibrate_compute(load_cluster("localhost-cpu"), load_model("llama2-7b"), backend="nccl")


def test_adamw_call_overhead_by_hand():
    """1e6 fp32 parameters in 100 tensors on a 10 GB/s CPU device: torch's for-loop AdamW (its default on the
    CPU) moves 80 B per parameter (20 fp32 passes, simulator.compile.offload_part.UNFUSED_ADAMW_PASSES), 8 ms;
    a 10.8 ms step leaves 2.8 ms over 10 × 100 calls: 2.8 µs per call; a step faster than its update gives 0."""
    from executor.calibrate_compute import adamw_call_us
    from executor.compute_bench import Timing
    from executor.host_bench import AdamwTiming

    device = dataclasses.replace(load_cluster("localhost-cpu").device, hbm_bw_GBps=10.0, hbm_efficiency=1.0)

    def timing(s):
        return AdamwTiming(step=Timing(median_s=s, p10_s=s, p90_s=s), tensors=100, params=1_000_000)

    assert adamw_call_us(device, timing(10.8e-3), DtypePolicy.FP32) == pytest.approx(2.8)
    assert adamw_call_us(device, timing(7e-3), DtypePolicy.FP32) == 0.0


def test_per_unit_us_takes_the_p10_differences_per_unit():
    """host_bench's one rule for the framework terms (hand-worked): forward (1.5 − 1.0 ms) / 10 modules = 50 µs;
    step (4.0 − 2.5 ms) / 10 = 150 µs; a wrapped forward faster than the plain one clamps to 0, the step not."""
    from executor.host_bench import per_unit_us

    def t(p10_s):
        return Timing(median_s=p10_s, p10_s=p10_s, p90_s=p10_s)
    timings = {("plain", "forward"): t(1.0e-3), ("tp", "forward"): t(1.5e-3),
               ("plain", "step"): t(2.5e-3), ("tp", "step"): t(4.0e-3)}
    assert per_unit_us(timings, "tp", 10) == pytest.approx((50.0, 150.0), rel=1e-12)
    timings["tp", "forward"], timings["tp", "step"] = t(0.9e-3), t(2.4e-3)
    fwd, step = per_unit_us(timings, "tp", 10)
    assert fwd == 0.0 and step == pytest.approx(-10.0, rel=1e-12)


def test_gpu_grid_measures_the_model_as_planned_not_tiny():
    """On a GPU the tiny run's GEMMs are launch-bound (measured 2026-11-24 on an H200: every tiny shape
    ~25 µs, a 7 % curve that made a 1.3B step 7× too slow); the GPU grid holds the model's own GEMMs."""
    from executor.compute_grid import GPU_MAX_GEMM_BYTES, GPU_SQUARE_SIDES, gpu_grid, run_shapes
    from simulator.gemm_shape import GemmShape
    from simulator.workload import get_preset

    spec = get_preset("gpt3-1.3b")
    grid = gpu_grid(spec, DtypePolicy.BF16_MIXED)
    assert GemmShape(GPU_SQUARE_SIDES[-1], GPU_SQUARE_SIDES[-1], GPU_SQUARE_SIDES[-1]) in grid.shapes
    qkv = GemmShape(spec.seq_len, 3 * spec.hidden, spec.hidden)  # micro-batch 1, tp 1
    assert qkv in run_shapes(spec, 1, 1) and qkv in grid.shapes
    assert all(2 * s.batch * (s.m * s.k + s.k * s.n + s.m * s.n) <= GPU_MAX_GEMM_BYTES for s in grid.shapes)
    assert max(grid.elements) >= 2 ** 28 and min(s.flops for s in grid.shapes) >= 2 * 256 ** 3
