"""``trainplan calibrate --compute``: the measured device fields, how the compute model uses them, the CLI.

- ``device.kernel_launch_overhead_us`` round-trips through a cluster file and is charged once per kernel of
  the op list: hand-counted, a llama block has 9 forward and 13 backward kernels (norm, qkv, flash
  attention, out_proj, 2 MLP GEMMs, residual, activation, rotary; a GEMM's backward is 2 GEMMs);
- the fields are derived from measurements as ``executor.calibrate_compute`` documents (synthetic rows,
  exact arithmetic), and the compute model then reproduces the measured block exactly;
- the measuring code runs for real on a tiny grid and the CLI checks its inputs first:
  tests/test_calibrate_compute_run.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from executor.calibrate_compute import (ComputeGrid, GemmRow, MemoryRow, curve_points, device_fields, run_shapes,
                                        tiny_model)
from executor.compute_bench import MemoryKernel, Timing, model_bytes
from simulator.analytical import estimate
from simulator.cluster.io import load_cluster, save_cluster
from simulator.compute import layer_times, microbatch_time, total_time
from simulator.errors import SpecError
from simulator.gemm_shape import GemmShape
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import DtypePolicy, load_model
from simulator.workload.ops import edge_work, layer_work

LLAMA_TINY = tiny_model(load_model("llama2-7b"), DtypePolicy.FP32)


def _with_overhead(cluster, overhead_us: float):
    """``cluster`` with one host figure per call, forward and backward alike."""
    device = dataclasses.replace(cluster.device, kernel_launch_overhead_us=overhead_us, backward_call_overhead_us=None)
    return dataclasses.replace(cluster, device=device)


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
