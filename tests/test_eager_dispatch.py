"""The operators eager torch dispatches for the executor's model against what the compute model charges
(``Kernel.dispatches``, simulator/workload/eager_dispatch.py): counted exactly, so a change of the model,
of torch, or of the table fails here."""

from __future__ import annotations

import dataclasses

import pytest

from executor.compute_grid import executed, tiny_model
from executor.dispatch_count import count_block, count_model
from executor.model import build_gpt
from simulator.cluster.io import load_cluster
from simulator.cluster.spec import KernelDispatch
from simulator.compute import Phase, layer_times, total_time
from simulator.host_overhead import ADAMW_PER_TENSOR_CALLS, host_calls
from simulator.workload.eager_dispatch import block_dispatches, edge_dispatches, measured
from simulator.workload.kinds import BiasKind, DtypePolicy, KernelFusion
from simulator.workload.ops import edge_work, layer_work
from simulator.workload.registry import load_model

MICRO_BATCH = 2
GPT_TINY = executed(tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32))
"""The suite's model as the executor runs it at ``--scale tiny`` (no dropout layers)."""
VARIANTS = {
    "gpt3-125m": GPT_TINY,
    "no-bias-untied": dataclasses.replace(GPT_TINY, bias=BiasKind.NONE, tied_embeddings=False),
    "qkv-bias": dataclasses.replace(GPT_TINY, bias=BiasKind.QKV),
    "llama2-7b": executed(tiny_model(load_model("llama2-7b"), DtypePolicy.FP32)),
    "llama3-8b": executed(tiny_model(load_model("llama3-8b"), DtypePolicy.FP32)),
}
"""llama3-8b at ``--scale tiny`` has 2 query heads and one KV head (multi-query): K's gradient reshape is a view."""
LLAMA_TINY = VARIANTS["llama2-7b"]
HEADS = {"gqa-4-2": (4, 2), "one-head": (1, 1), "mqa-4-1": (4, 1)}
"""(heads, kv_heads) variants of the rotary block: one query head also saves the forward merge's copy."""


def _model_calls(spec, fusion=KernelFusion.EAGER) -> tuple[int, int, int, int]:
    """(block forward, block backward, edges forward, edges backward) calls the model charges on a CPU."""
    block, edges = layer_work(spec, MICRO_BATCH, fusion=fusion), edge_work(spec, MICRO_BATCH, fusion=fusion)
    return (sum(k.dispatches for w in block for k in w.fwd), sum(k.dispatches for w in block for k in w.bwd),
            sum(k.dispatches for w in edges for k in w.fwd), sum(k.dispatches for w in edges for k in w.bwd))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_block_dispatches_equal_what_torch_runs(name):
    spec = VARIANTS[name]
    counted = count_block(spec, MICRO_BATCH)
    block_fwd, block_bwd, _, _ = _model_calls(spec)
    assert counted.totals == (block_fwd, block_bwd)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_model_dispatches_equal_what_torch_runs(name):
    """Forward with the loss, backward, and AdamW's per-tensor loop: exact."""
    spec = VARIANTS[name]
    counted = count_model(spec, MICRO_BATCH)
    block_fwd, block_bwd, edge_fwd, edge_bwd = _model_calls(spec)
    tensors = len(list(build_gpt(spec).parameters()))
    assert counted.totals == (spec.layers * block_fwd + edge_fwd, spec.layers * block_bwd + edge_bwd,
                              ADAMW_PER_TENSOR_CALLS * tensors)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_head_counts_of_a_rotary_block(name):
    """Single-head Q or K (multi-query attention) reshape by a view instead of a copy: still exact."""
    heads, kv_heads = HEADS[name]
    spec = dataclasses.replace(LLAMA_TINY, heads=heads, kv_heads=kv_heads)
    assert count_block(spec, MICRO_BATCH).totals == _model_calls(spec)[:2]


def test_single_heads_in_numbers():
    """Counted once by hand from the operator lists (executor.model, 2026-11-25): llama2-7b's tiny block 73 / 111;
    one KV head 73 / 110; one query and one KV head 72 / 109."""
    assert _model_calls(LLAMA_TINY)[:2] == (73, 111)
    assert _model_calls(VARIANTS["llama3-8b"])[:2] == (73, 110)
    assert _model_calls(dataclasses.replace(LLAMA_TINY, heads=1, kv_heads=1))[:2] == (72, 109)


def test_the_suite_block_in_numbers():
    """The figures docs/validation.md quotes: 32 / 68 operators per block, 14 / 23 on the edges, against 8 / 16
    and 4 / 5 kernels (dropout-free)."""
    block, edges = layer_work(GPT_TINY, MICRO_BATCH), edge_work(GPT_TINY, MICRO_BATCH)
    assert _model_calls(GPT_TINY) == (32, 68, 14, 23)
    assert (sum(len(w.fwd) for w in block), sum(len(w.bwd) for w in block)) == (8, 16)
    assert (sum(len(w.fwd) for w in edges), sum(len(w.bwd) for w in edges)) == (4, 5)


def test_other_blocks_and_fusions_keep_one_call_per_kernel():
    """Not measured: each kernel one call, as before (the module docstring says so)."""
    moe = tiny_model(load_model("mixtral-8x7b"), DtypePolicy.FP32)
    assert not measured(moe) and block_dispatches(moe) == {} and edge_dispatches(moe) == {}
    for fusion in (KernelFusion.MEGATRON, KernelFusion.COMPILED):
        block = layer_work(GPT_TINY, MICRO_BATCH, fusion=fusion)
        assert all(k.dispatches == 1 for w in block for k in w.fwd + w.bwd)


def test_a_gpu_counts_launches_and_a_cpu_dispatches():
    cpu = load_cluster("localhost-cpu").device
    gpu = load_cluster("dgx-h100").device
    block = layer_work(GPT_TINY, MICRO_BATCH)
    fwd = tuple(w.fwd for w in block)
    assert cpu.kernel_dispatch is KernelDispatch.INLINE and gpu.kernel_dispatch is KernelDispatch.ASYNC
    assert host_calls(cpu, fwd) == 32 and host_calls(gpu, fwd) == 8


def test_backward_calls_cost_the_backward_figure():
    """Forward rows carry ``kernel_launch_overhead_us`` per call, backward rows ``backward_call_overhead_us``."""
    base = dataclasses.replace(load_cluster("localhost-cpu").device, kernel_launch_overhead_us=0.0,
                               backward_call_overhead_us=0.0)
    both = dataclasses.replace(base, kernel_launch_overhead_us=7.0, backward_call_overhead_us=3.0)
    f0, f1 = (total_time(layer_times(GPT_TINY, d, MICRO_BATCH), Phase.FWD) for d in (base, both))
    b0, b1 = (total_time(layer_times(GPT_TINY, d, MICRO_BATCH), Phase.BWD) for d in (base, both))
    assert f1 - f0 == pytest.approx(32 * 7.0e-6, rel=1e-9)
    assert b1 - b0 == pytest.approx(68 * 3.0e-6, rel=1e-9)
    same = dataclasses.replace(both, backward_call_overhead_us=None)  # None: the forward's figure in backward
    assert total_time(layer_times(GPT_TINY, same, MICRO_BATCH), Phase.BWD) - b0 == pytest.approx(68 * 7.0e-6, rel=1e-9)


def test_calibration_reproduces_each_phase_of_the_timed_block():
    """``device_fields`` with the block's forward and backward timed apart: per call of each phase, so the
    compute model gives back the bench's forward and its backward (which has one more call: the bench's leaf
    input's ``.grad``)."""
    from executor.calibrate_compute import GemmRow, MemoryRow, device_fields
    from executor.compute_bench import MemoryKernel, Timing, model_bytes
    from executor.compute_grid import ComputeGrid
    from simulator.gemm_shape import GemmShape

    def timing(seconds):
        return Timing(median_s=seconds, p10_s=seconds, p90_s=seconds)

    base = load_cluster("localhost-cpu").device
    shape = GemmShape(64, 64, 64)
    gemms = (GemmRow(shape=shape, timing=timing(shape.flops / 50e9)),)
    memory = tuple(MemoryRow(kernel=k, elements=1000, bytes=model_bytes(k, 1000, DtypePolicy.FP32),
                             timing=timing(model_bytes(k, 1000, DtypePolicy.FP32) / 5e9)) for k in MemoryKernel)
    grid = ComputeGrid(shapes=(shape,), elements=(1000,), block=tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32),
                       micro_batch=MICRO_BATCH)
    fwd, bwd = timing(0.4e-3), timing(0.6e-3)
    device, calls, _ = device_fields(base, grid, gemms, memory, timing(1e-3), DtypePolicy.FP32, "s", phases=(fwd, bwd))
    assert calls == 32 + 68 + 1
    rows = layer_times(GPT_TINY, device, MICRO_BATCH)
    assert total_time(rows, Phase.FWD) == pytest.approx(0.4e-3, rel=1e-9)
    assert total_time(rows, Phase.BWD) + device.backward_call_overhead_us * 1e-6 == pytest.approx(0.6e-3, rel=1e-9)
    assert device.kernel_launch_overhead_us > device.backward_call_overhead_us > 0
