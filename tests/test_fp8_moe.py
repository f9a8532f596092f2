"""FP8 with mixture-of-experts and latent attention (issue 14 §3 with §1): Transformer Engine's recipes run
the experts' grouped GEMMs in FP8 (``GroupedLinear``) and cache the local experts' FP8 weights; the block
scaling recipe ``te-blockwise`` (TE ``Float8BlockScaling``, DeepSeek-V3's 1×128 / 128×128 scales) casts
each GEMM input in its own pass; the dispatch stays BF16; torchao is refused for MoE.

Hand-worked numbers use Mixtral 8x7B (h 4096, 32 heads, 8 KV heads of 128, 8 experts of f_e 14336,
top-2, SwiGLU, every layer MoE) [src: mixtral-2024], bf16 activations (e = 2)."""

import pytest

from simulator.cluster.io import load_cluster
from simulator.compile import compile_step
from simulator.compute import memory_kernel_s
from simulator.dtypes import Dtype
from simulator.errors import SpecError
from simulator.memory import memory_report
from simulator.strategy import build_layout
from simulator.strategy.flat import strategy_from_flat
from simulator.work import CommKind
from simulator.workload import get_preset
from simulator.workload.blocks import block_work
from simulator.workload.fp8 import Fp8Recipe, fp8_block, fp8_linear_weights
from simulator.workload.ops import OpKind

H100 = load_cluster("dgx-h100", nodes=1)
MIXTRAL = get_preset("mixtral-8x7b").with_seq(4096)
T = 4096
ATTN = 4096 * (4096 + 2 * 1024) + 4096 * 4096     # Q/K/V and output projection weights
EXPERT = 3 * 4096 * 14336                          # gate, up and down of one expert


def _moe_block(recipe, tp=1, ep=1):
    works = block_work(MIXTRAL, 1, T, tp, moe_layer=True, ep=ep)
    return {w.op: w for w in fp8_block(works, recipe, 2)}


def _named(kernels):
    return {k.name: k for k in kernels}


def test_blockwise_cast_bytes():
    # one pass reads 2 bytes and writes the rowwise and columnwise FP8 copies, each with one FP32 scale per 128
    assert Fp8Recipe.TE_BLOCKWISE.cast_bytes_per_element(2) == pytest.approx(2 + 2 + 2 * 4 / 128)
    assert Fp8Recipe.TE_BLOCKWISE.caches_weights and Fp8Recipe.TE.caches_weights
    assert not Fp8Recipe.TORCHAO.caches_weights
    assert Fp8Recipe.TE.fuses_input_casts and not Fp8Recipe.TE_BLOCKWISE.fuses_input_casts


@pytest.mark.parametrize("ep", [1, 4])
def test_expert_grouped_gemms_run_in_fp8_with_per_expert_casts(ep):
    """E/ep local experts, each on T·k·ep/E rows (balanced routing: the ep ranks' T·k copies each spread
    over the E experts, simulator.workload.moe_ops): the grouped GEMMs become FP8 (same FLOPs, 1-byte operands) and every
    expert casts its own input and output gradient: batch × m × k elements."""
    block = _moe_block(Fp8Recipe.TE_BLOCKWISE, ep=ep)
    local = 8 / ep
    rows = T * 2 * ep / 8          # each local expert's rows: T·k copies from each of the ep ranks ÷ E/ep·ep
    mlp = _named(block[OpKind.MLP].fwd)
    exp_in = mlp["experts_in"]
    assert exp_in.dtype is Dtype.FP8 and exp_in.shape.batch == local and exp_in.shape.m == pytest.approx(rows)
    assert exp_in.flops == pytest.approx(2 * local * rows * 2 * 14336 * 4096)
    assert exp_in.bytes == pytest.approx(local * (rows * 4096 + 4096 * 2 * 14336 + 2 * rows * 2 * 14336))
    per = 2 + 2 + 8 / 128
    assert mlp["experts_in.cast_input"].bytes == pytest.approx(per * local * rows * 4096)
    assert mlp["experts_out.cast_input"].bytes == pytest.approx(per * local * rows * 14336)
    bwd = _named(block[OpKind.MLP].bwd)
    assert bwd["experts_in.cast_grad_output"].bytes == pytest.approx(per * local * rows * 2 * 14336)
    assert all(k.dtype is Dtype.FP8 for k in block[OpKind.MLP].bwd if k.gemm)
    # the router stays BF16, and no weight is cast per micro-batch (cached over the step)
    assert all(k.dtype is None for k in block[OpKind.ROUTER].fwd + block[OpKind.ROUTER].bwd)
    assert not any("cast_weight" in k.name for w in block.values() for k in w.fwd)
    # block scaling casts the Q/K/V input itself (no norm-fused quantize), TE delayed scaling does not
    assert "qkv.cast_input" in _named(block[OpKind.QKV].fwd)
    assert "qkv.cast_input" not in _named(_moe_block(Fp8Recipe.TE, ep=ep)[OpKind.QKV].fwd)


def test_linear_weights_of_a_moe_block():
    # attention ÷ tp, the E/ep local experts ÷ tp (expert tp = tp), the router (h × E) left in BF16
    assert fp8_linear_weights(MIXTRAL, 1) == ATTN + 3 * 4096 * 14336      # a dense block's formula (f = 14336)
    assert fp8_linear_weights(MIXTRAL, 1, 1, moe_layer=True) == ATTN + 8 * EXPERT
    assert fp8_linear_weights(MIXTRAL, 2, 4, moe_layer=True) == (ATTN + 2 * EXPERT) / 2


def test_latent_attention_linears():
    """DeepSeek-V3's MLA projections (q 1536 latent, kv 512 + 64 rope, 128 heads of 192 / 128): the head-split
    up-projections and output ÷ tp, the down-projections replicated; one shared expert of 2048 ÷ tp,
    256/ep routed experts of 2048 ÷ tp [src: deepseek-v3]."""
    v3 = get_preset("deepseek-v3")
    h = 7168
    split = 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * h
    replicated = h * 1536 + h * (512 + 64)
    assert fp8_linear_weights(v3, 2, 64, moe_layer=True) == pytest.approx(
        replicated + split / 2 + (256 / 64 + 1) * 3 * h * 2048 / 2)
    assert fp8_linear_weights(v3, 2) == pytest.approx(replicated + split / 2 + 3 * h * 18432 / 2)


def test_weight_cache_and_once_per_step_cast_cover_the_local_experts():
    """Megatron, dp 8 with ep 4 (2 of 8 experts per rank), 32 MoE blocks: TE keeps 2 bytes per FP8 weight,
    and casts them once per step (e + 2 + 1/16 bytes per weight under block scaling)."""
    base = dict(global_batch=8, dp=8, ep=4, zero=1, framework="megatron", precision="fp8", fp8_recipe="te-blockwise")
    weights = 32 * (ATTN + 2 * EXPERT)
    mem = memory_report(MIXTRAL, H100, strategy_from_flat(base))
    assert mem.worst.buffers.fp8_weights_bytes == 2 * weights
    plain = compile_step(H100, MIXTRAL, strategy_from_flat({**base, "precision": "model", "fp8_recipe": None}),
                         memory=False)
    fp8 = compile_step(H100, MIXTRAL, strategy_from_flat(base), memory=False)
    cast_s = memory_kernel_s(H100.device, MIXTRAL.dtype, (4 + 8 / 128) * weights)
    assert fp8.stages[0].optimizer_s == pytest.approx(plain.stages[0].optimizer_s + cast_s, rel=1e-12)


def test_dispatch_stays_bf16_and_fp8_is_faster():
    """Megatron-Core's dispatchers move the BF16 hidden states (TE quantizes inside GroupedLinear): the ep
    all-to-alls are the same bytes with and without FP8; the compute is shorter."""
    base = dict(global_batch=8, dp=8, ep=4, zero=1, framework="megatron")
    plain = compile_step(H100, MIXTRAL, strategy_from_flat(base), memory=False)
    for recipe in ("te", "te-blockwise"):
        fp8 = compile_step(H100, MIXTRAL, strategy_from_flat({**base, "precision": "fp8", "fp8_recipe": recipe}),
                           memory=False)
        a2a = [[c.nbytes for w in s.chunks for c in w.tp_fwd + w.tp_bwd if c.kind is CommKind.EP]
               for s in (plain.stages[0], fp8.stages[0])]
        assert a2a[0] and a2a[0] == a2a[1]
        assert fp8.stages[0].chunks[0].fwd_s < 0.8 * plain.stages[0].chunks[0].fwd_s


def test_refusals():
    with pytest.raises(SpecError, match="te-blockwise") as err:  # L40S is SM 8.9: no block-scaled GEMMs
        build_layout(strategy_from_flat(dict(global_batch=8, precision="fp8", fp8_recipe="te-blockwise")),
                     load_cluster("pcie-l40s", nodes=1), get_preset("llama3-8b"))
    assert err.value.field == "fp8_recipe" and "\n" not in str(err.value)
    with pytest.raises(SpecError, match="torchao") as err:
        build_layout(strategy_from_flat(dict(global_batch=8, precision="fp8", framework="fsdp2", zero=3)), H100,
                     MIXTRAL)
    assert err.value.field == "fp8_recipe"
