"""Eager torch's norm backward as two kernels (simulator/workload/eager_norm.py): hand-worked bytes, and who gets it.

GPT-3 1.3B, micro-batch 8 × 2048 tokens (T = 16,384), hidden 2,048, two LayerNorms per block. Forward: each norm
reads and writes T·h elements, 2·T·h·e bytes. Backward on a CUDA device under eager kernels: the input-gradient
kernel reads dy and x and writes dx (3·T·h·e) and the γ/β kernel reads dy and x again (2·T·h·e), as the H200
trace shows (``layer_norm_grad_input_kernel`` and ``GammaBetaBackwardCUDAKernelTemplate``, 49 calls each per step)
[src: own-h200-2026-11-24]:

    bf16 (e = 2):              2 norms × 5 · 16384 · 2048 · 2 =   671,088,640 B per block (was 402,653,184)
    fp32 under autocast (4):   2 norms × 5 · 16384 · 2048 · 4 = 1,342,177,280 B
"""

import dataclasses

import pytest

from simulator.cluster.io import load_cluster
from simulator.compute import Phase, layer_times, runs_cuda_kernels
from simulator.workload import DtypePolicy, load_model
from simulator.workload.kinds import KernelFusion
from simulator.workload.ops import OpKind

T, H = 8 * 2048, 2048


def _norm_bwd_bytes(cluster: str, dtype: DtypePolicy = DtypePolicy.BF16_MIXED, **kw) -> float:
    spec = dataclasses.replace(load_model("gpt3-1.3b"), dtype=dtype)
    rows = layer_times(spec, load_cluster(cluster).device, 8, 2048, **kw)
    return next(r.bytes for r in rows if r.op is OpKind.NORM and r.phase is Phase.BWD)


def test_eager_norm_backward_reads_its_inputs_twice_on_a_gpu():
    assert _norm_bwd_bytes("hgx-h200") == pytest.approx(2 * 5 * T * H * 2, rel=1e-12)
    assert _norm_bwd_bytes("dgx-a100") == pytest.approx(671_088_640, rel=1e-12)


def test_under_autocast_both_kernels_run_in_fp32_and_only_dx_is_cast_back():
    spec = load_model("gpt3-1.3b")
    rows = layer_times(spec, load_cluster("hgx-h200").device, 8, 2048, autocast=True)
    norm = next(r for r in rows if r.op is OpKind.NORM and r.phase is Phase.BWD)
    casts = next(r for r in rows if r.op is OpKind.CAST and r.phase is Phase.BWD)
    assert norm.bytes == pytest.approx(1_342_177_280, rel=1e-12)
    w = H * 3 * H + H * H + 2 * H * spec.ffn_size
    biases = 3 * H + H + spec.ffn_size + H  # each biased linear's bias gradient is cast back too (autocast.py)
    assert casts.bytes == pytest.approx(6 * w + 6 * biases + 2 * 6 * T * H, rel=1e-12)  # one cast per norm, not two


def test_fused_kernels_and_the_cpu_keep_one_backward_kernel():
    one_kernel = 2 * 3 * T * H * 2
    assert _norm_bwd_bytes("hgx-h200", fusion=KernelFusion.MEGATRON) == pytest.approx(one_kernel, rel=1e-12)
    assert _norm_bwd_bytes("hgx-h200", fusion=KernelFusion.COMPILED) == pytest.approx(one_kernel, rel=1e-12)
    assert not runs_cuda_kernels(load_cluster("localhost-cpu").device)
    assert _norm_bwd_bytes("localhost-cpu", DtypePolicy.FP32) == pytest.approx(one_kernel * 2, rel=1e-12)  # fp32


def test_the_chunk_path_charges_what_the_op_table_does():
    """The engines' chunk path (``ComputeOptions.cuda_kernels``, which the step compiler sets from the device)
    gains the same bytes per block as the op table: the two γ/β kernels, 2 × 2·T·h·e."""
    from simulator.workload.chunks import transformer_chunk_load
    from simulator.workload.protocol import ChunkSlice, ComputeOptions

    spec = load_model("gpt3-1.3b")
    chunk = ChunkSlice(index=0, count=1, start=0, layers=spec.layers)

    def block_bwd_bytes(cuda: bool) -> float:
        units = transformer_chunk_load(spec, chunk, ComputeOptions(micro_batch=8, cuda_kernels=cuda)).units
        count, unit = units[0]
        assert count == spec.layers
        return sum(k.bytes for kernels in unit.bwd for k in kernels)

    assert block_bwd_bytes(True) - block_bwd_bytes(False) == pytest.approx(2 * 2 * T * H * 2, rel=1e-12)
