"""Transformer Engine's per-tensor FP8 casts write no transposed copy on Blackwell (:func:`fp8_needs_transpose`,
``is_non_tn_fp8_gemm_supported``: 10.0 ≤ cc < 12.0 or cc ≥ 13.0 [src: te-non-tn-fp8]).

Hand-worked on one Llama 3 8B block (h 4096, q 4096, kv 1024, f 14336, SwiGLU) [src: llama3-2024] of T = 4096 tokens,
bf16 (e = 2): one byte less per cast element. ``te`` (norm/activation-fused input casts) casts in forward only the
output projection's input, T·q = 16,777,216 elements; both recipes cast in backward the four GEMMs' output gradients,
T·(q + 2kv) + T·h + T·2f + T·h = 176,160,768; ``te-current`` casts every GEMM input in forward, T·(h + q + h + f) =
109,051,904. The once-per-step weight cast covers the block's 218,103,808 linear weights."""

from dataclasses import replace

import pytest

from simulator.cluster.io import load_cluster
from simulator.compile import compile_step
from simulator.compute import achievable_hbm_Bps
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import load_model
from simulator.workload.fp8 import Fp8Recipe, fp8_block, fp8_needs_transpose, te_weight_cast_bytes
from simulator.workload.ops import layer_work

LLAMA = load_model("llama3-8b")
T = 4096
LINEAR = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336


def _bytes(recipe: Fp8Recipe, transpose: bool) -> tuple[float, float]:
    works = fp8_block(layer_work(LLAMA, 1, T), recipe, 2, 1, transpose)
    return sum(k.bytes for w in works for k in w.fwd), sum(k.bytes for w in works for k in w.bwd)


@pytest.mark.parametrize("cc, needs", [(8.9, True), (9.0, True), (10.0, False), (10.3, False), (12.0, True),
                                       (13.0, False), (None, True)])
def test_which_devices_need_the_transpose(cc, needs):
    assert fp8_needs_transpose(cc) is needs


def test_cast_bytes_without_the_transpose():
    assert Fp8Recipe.TE.cast_bytes_per_element(2, transpose=False) == 3
    assert Fp8Recipe.TE_CURRENT.cast_bytes_per_element(2, transpose=False) == 5
    for recipe in (Fp8Recipe.TE_BLOCKWISE, Fp8Recipe.TE_MXFP8, Fp8Recipe.TORCHAO):  # both copies from the source
        assert recipe.cast_bytes_per_element(2, transpose=False) == recipe.cast_bytes_per_element(2)


@pytest.mark.parametrize("recipe, fwd_elements", [(Fp8Recipe.TE, 16_777_216), (Fp8Recipe.TE_CURRENT, 109_051_904)])
def test_one_byte_less_per_cast_element(recipe, fwd_elements):
    (f1, b1), (f0, b0) = _bytes(recipe, True), _bytes(recipe, False)
    assert f1 - f0 == fwd_elements
    assert b1 - b0 == 176_160_768
    assert (te_weight_cast_bytes(LLAMA, 1, recipe) - te_weight_cast_bytes(LLAMA, 1, recipe, transpose=False)
            == LINEAR == 218_103_808)


def test_b200_compiles_without_the_transpose():
    """The compiled chunk on dgx-b200 (SM 10.0) against the same cluster stated as SM 9.0: forward faster by the
    32 blocks' 16,777,216 bytes at the B200's achievable HBM bandwidth (te)."""
    b200 = load_cluster("dgx-b200", nodes=1)
    hopper_like = replace(b200, device=replace(b200.device, compute_capability=9.0))
    s = strategy_from_flat({"global_batch": 8, "dp": 8, "framework": "megatron", "zero": 1, "precision": "fp8",
                            "fp8_recipe": "te", "kernel_fusion": "megatron"})
    model = LLAMA.with_seq(T)
    fast = compile_step(b200, model, s, memory=False).stages[0].chunks[0]
    slow = compile_step(hopper_like, model, s, memory=False).stages[0].chunks[0]
    assert slow.fwd_s - fast.fwd_s == pytest.approx(32 * 16_777_216 / achievable_hbm_Bps(b200.device), rel=1e-9)
    assert slow.bwd_s > fast.bwd_s
