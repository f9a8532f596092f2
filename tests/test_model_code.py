"""torchtitan's eager element-wise code (simulator/workload/model_code.py) against hand-worked bytes.

Llama 3.1 8B, micro-batch 2 at s = 8192 on one rank: T = 16,384 tokens, h = 4,096, q = 4,096, kv = 1,024 (8 KV
heads for 32 query heads: r = 4), bf16 (e = 2). Per element, from the module's operator lists (checked operator by
operator by benchmarks/torchtitan_eager_ops.py): ATen's composite rms_norm 2e + 36 = 40 B forward, 2e + 100 = 104
B backward; torchtitan's RMSNorm class 4e + 28 = 36 and 8e + 76 = 92; rotary 2e + 16 = 20 each way; repeat_kv
(1 + r)·e = 10 per K or V element each way.
"""

import dataclasses

import pytest

from simulator.workload import get_preset
from simulator.workload.chunks import transformer_units
from simulator.workload.flops import Recompute
from simulator.workload.kinds import KernelFusion, ModelCode
from simulator.workload.model_code import (ATEN_COMPOSITE_RMS_NORM, TORCHTITAN_RMSNORM_CLASS, kv_repeat,
                                           rotary_bytes_per_element, with_model_code)
from simulator.workload.ops import OpKind, edge_work, layer_work
from simulator.workload.protocol import ChunkSlice, ComputeOptions

T, H = 16384, 4096


@pytest.fixture(scope="module")
def llama8b():
    return get_preset("llama3.1-8b").with_seq(8192)


def _op(works, op):
    return next(w for w in works if w.op is op)


def test_chains_per_element():
    assert (ATEN_COMPOSITE_RMS_NORM.fwd_bytes(2), ATEN_COMPOSITE_RMS_NORM.bwd_bytes(2)) == (40, 104)
    assert (TORCHTITAN_RMSNORM_CLASS.fwd_bytes(2), TORCHTITAN_RMSNORM_CLASS.bwd_bytes(2)) == (36, 92)
    assert rotary_bytes_per_element(2) == 20


def test_block_bytes_hand_worked(llama8b):
    works = layer_work(llama8b, 2, 8192)
    kv_elems, n_rep = kv_repeat(llama8b, T, 1)
    assert (kv_elems, n_rep) == (T * 1024, 4)
    out = with_model_code(works, ModelCode.TORCHTITAN_2024_12, KernelFusion.EAGER, 2, kv_elems, n_rep)
    norm = _op(out, OpKind.NORM)
    assert sum(k.bytes for k in norm.fwd) == 2 * T * H * 40 == 5_368_709_120  # two norms per block
    assert sum(k.bytes for k in norm.bwd) == 2 * T * H * 104 == 13_958_643_712
    assert all(k.copy_fraction == 1.0 for k in norm.fwd)
    elementwise = {k.name: k.bytes for k in _op(out, OpKind.ELEMENTWISE).fwd}
    assert elementwise["rotary.ops"] == T * (4096 + 1024) * 20 == 1_677_721_600
    assert elementwise["repeat_kv"] == 2 * T * 1024 * (1 + 4) * 2 == 335_544_320
    back = {k.name: k.bytes for k in _op(out, OpKind.ELEMENTWISE).bwd}
    assert back["rotary.ops.bwd"] == elementwise["rotary.ops"] and back["repeat_kv.bwd"] == elementwise["repeat_kv"]
    # the residual adds and SwiGLU are left as they were
    before = {k.name: k.bytes for k in _op(works, OpKind.ELEMENTWISE).fwd}
    assert {n: b for n, b in elementwise.items() if n in before} == {n: b for n, b in before.items() if n != "rotary"}


def test_final_norm_and_mid_2024_class(llama8b):
    out = with_model_code(edge_work(llama8b, 2, 8192), ModelCode.TORCHTITAN_2024_MID, KernelFusion.EAGER, 2)
    norm = _op(out, OpKind.NORM)
    assert sum(k.bytes for k in norm.fwd) == T * H * 36 and sum(k.bytes for k in norm.bwd) == T * H * 92


def test_unchanged_when_fused_or_compiled(llama8b):
    works = layer_work(llama8b, 2, 8192, fusion=KernelFusion.COMPILED)
    assert with_model_code(works, ModelCode.TORCHTITAN_2024_12, KernelFusion.COMPILED, 2, T * 1024, 4) == works
    eager = layer_work(llama8b, 2, 8192)
    assert with_model_code(eager, ModelCode.FUSED_OPS, KernelFusion.EAGER, 2, T * 1024, 4) == eager


def test_no_repeat_without_grouped_query_attention():
    spec = get_preset("llama2-13b").with_seq(4096)
    kv_elems, n_rep = kv_repeat(spec, 8192, 1)
    assert n_rep == 1
    out = with_model_code(layer_work(spec, 2, 4096), ModelCode.TORCHTITAN_2024_MID, KernelFusion.EAGER, 2, kv_elems,
                          n_rep)
    assert "repeat_kv" not in {k.name for k in _op(out, OpKind.ELEMENTWISE).fwd}


def test_op_level_recompute_repeats_the_chains(llama8b):
    """Selective op-level recompute reruns both norms, rotary and repeat_kv (none is in torchtitan's save list)."""
    options = ComputeOptions(micro_batch=2, recompute=Recompute.SELECTIVE_OP, cuda_kernels=True,
                             model_code=ModelCode.TORCHTITAN_2024_12)
    chunk = ChunkSlice(index=0, count=1, start=0, layers=llama8b.layers)
    (_, unit), *_ = transformer_units(llama8b, chunk, options)
    again = {k.name: k.bytes for ks in unit.recompute for k in ks}
    assert again["norm.ops"] == 2 * T * H * 40 and again["repeat_kv"] == 335_544_320 and "rotary.ops" in again
    (_, base), *_ = transformer_units(llama8b, chunk, dataclasses.replace(options, model_code=ModelCode.FUSED_OPS))
    assert "norm.ops" not in {k.name for ks in base.recompute for k in ks}
