"""FP8 (issue 14 §3): which GEMMs run in FP8 and at what peak, the recipes' cast bytes, the FP8
weights' memory, FSDP2's float8 all-gather, and the refusals.

Hand-worked numbers use Llama 3 8B (h 4096, q 4096, kv 1024, f 14336, SwiGLU) [src: llama3-2024]
with bf16 activations (e = 2), and the H100 SXM's dense peaks, 989 BF16 and 1979 FP8 TFLOP/s
[src: nvidia-h100-ds]."""

import pytest

from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.compile import compile_step
from simulator.compute import rates_for, memory_kernel_s
from simulator.kernel_roofline import Rates, kernel_time
from simulator.dtypes import Dtype
from simulator.errors import SpecError
from simulator.gemm_efficiency import efficiency_for
from simulator.memory import memory_report
from simulator.strategy import build_layout
from simulator.strategy.flat import strategy_from_flat
from simulator.work import CommKind
from simulator.workload import load_model
from simulator.workload.fp8 import Fp8Recipe, fp8_block, fp8_linear_weights, fp8_weight_cache_bytes
from simulator.workload.ops import OpKind, layer_work

LLAMA = load_model("llama3-8b")
H100 = load_cluster("dgx-h100", nodes=1)
T = 4096  # one sample of 4096 tokens
LINEAR = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336   # Q/K/V, output, gate+up+down weights


def _block(recipe, shards=1):
    return {w.op: w for w in fp8_block(layer_work(LLAMA, 1, T), recipe, 2, shards)}


def _named(kernels):
    return {k.name: k for k in kernels}


def test_cast_bytes_per_element():
    # TE: one fused cast+transpose reads 2 bytes, writes 1 + 1; torchao: amax read 2, cast read 2 write 1, copy 1 + 1
    assert Fp8Recipe.TE.cast_bytes_per_element(2) == 4
    assert Fp8Recipe.TORCHAO.cast_bytes_per_element(2) == 7


def test_linear_gemms_run_in_fp8_and_the_rest_does_not():
    block = _block(Fp8Recipe.TE)
    qkv = _named(block[OpKind.QKV].fwd)["qkv"]
    assert qkv.dtype is Dtype.FP8
    assert qkv.flops == 2 * T * 4096 * 6144                          # the FLOPs do not change
    assert qkv.bytes == 1 * (T * 4096 + 4096 * 6144) + 2 * T * 6144  # 1-byte operands, bf16 output
    for kind in (OpKind.QKV, OpKind.OUT_PROJ, OpKind.MLP):
        gemms = [k for k in block[kind].fwd + block[kind].bwd if k.gemm]
        assert len(gemms) == 3 * (2 if kind is OpKind.MLP else 1) and all(k.dtype is Dtype.FP8 for k in gemms)
    assert all(k.dtype is None for k in block[OpKind.ATTENTION].fwd + block[OpKind.ATTENTION].bwd)
    assert all(k.dtype is None for k in block[OpKind.NORM].fwd)
    assert fp8_linear_weights(LLAMA, 1) == LINEAR


def test_te_casts():
    block = _block(Fp8Recipe.TE)
    # Q/K/V, MLP-in and MLP-out inputs are cast by the norm or the activation: no kernel of their own
    assert [k.name for k in block[OpKind.QKV].fwd] == ["qkv"]
    assert [k.name for k in block[OpKind.MLP].fwd] == ["mlp_in", "mlp_out"]
    # the output projection's input (the attention output, T × q) is cast: 4 bytes per element
    assert _named(block[OpKind.OUT_PROJ].fwd)["out_proj.cast_input"].bytes == 4 * T * 4096
    # every output gradient is cast in backward: MLP-in's is T × 2f
    assert _named(block[OpKind.MLP].bwd)["mlp_in.cast_grad_output"].bytes == 4 * T * 2 * 14336
    # no weight cast per micro-batch (cached over the step)
    assert not any("cast_weight" in k.name for w in block.values() for k in w.fwd)


def test_torchao_casts_weights_every_micro_batch_and_on_the_shard_with_fp8_all_gather():
    block = _block(Fp8Recipe.TORCHAO)
    qkv = _named(block[OpKind.QKV].fwd)
    assert qkv["qkv.cast_input"].bytes == 7 * T * 4096
    assert qkv["qkv.cast_weight"].bytes == 7 * 4096 * 6144
    sharded = _named(_block(Fp8Recipe.TORCHAO, shards=8)[OpKind.QKV].fwd)
    assert sharded["qkv.cast_weight"].bytes == pytest.approx(7 * 4096 * 6144 / 8)


def test_an_fp8_gemm_at_the_fp8_peak_and_the_same_duration_efficiency():
    # dgx-b200 gives no fp8_gemm_efficiency: the assumption (the measured FP8 plateaus of dgx-h100 and
    # hgx-h200: tests/test_fp8_gemm_efficiency.py)
    b200 = load_cluster("dgx-b200", nodes=1).device
    assert b200.fp8_gemm_efficiency is None
    rates = rates_for(LLAMA.dtype, b200)
    assert rates.fp8_peak_flops == 4500e12 and rates.peak_flops == 2250e12
    fp8 = _named(_block(Fp8Recipe.TE)[OpKind.MLP].fwd)["mlp_in"]
    curve = efficiency_for(b200)
    want = kernel_time(fp8, 4500e12, rates.hbm_Bps, curve, rates.sm_count, rates.clock_ratio,
                       curve_flops_scale=2250 / 4500)
    assert rates.time(fp8) == want
    bf16 = _named(layer_work(LLAMA, 1, T)[4].fwd)["mlp_in"]
    # a large GEMM: compute-bound in both formats, so the FP8 one takes about half the time
    assert 0.45 < rates.time(fp8)[0] / rates.time(bf16)[0] < 0.55
    with pytest.raises(SpecError, match="precision"):
        Rates(peak_flops=1.0, hbm_Bps=1.0, curve=curve, sm_count=None).time(fp8)


def test_te_weight_cast_once_per_step_and_its_cache_in_memory():
    base = dict(global_batch=16, dp=8, zero=1, framework="megatron")
    plain = compile_step(H100, LLAMA, strategy_from_flat(base), memory=False)
    fp8 = compile_step(H100, LLAMA, strategy_from_flat(dict(base, precision="fp8")), memory=False)
    cast_s = memory_kernel_s(H100.device, LLAMA.dtype, 32 * 4 * LINEAR)  # 32 blocks, e + 2 bytes per weight
    assert fp8.stages[0].optimizer_s == pytest.approx(plain.stages[0].optimizer_s + cast_s, rel=1e-12)
    mem = memory_report(LLAMA, H100, strategy_from_flat(dict(base, precision="fp8")))
    assert mem.worst.buffers.fp8_weights_bytes == 32 * 2 * LINEAR == 32 * fp8_weight_cache_bytes(LLAMA, 1)
    plain_mem = memory_report(LLAMA, H100, strategy_from_flat(base))
    assert mem.worst.total_bytes - plain_mem.worst.total_bytes == pytest.approx(32 * 2 * LINEAR * 1.1, rel=1e-9)


def test_fsdp2_float8_all_gather_moves_one_byte_per_linear_weight():
    base = dict(global_batch=16, dp=8, zero=3, framework="fsdp2", precision="fp8")
    plain = compile_step(H100, LLAMA, strategy_from_flat(base), memory=False).stages[0].chunks[0]
    fp8 = compile_step(H100, LLAMA, strategy_from_flat(dict(base, fp8_all_gather=True)),
                       memory=False).stages[0].chunks[0]
    block = LLAMA.layer_params
    assert plain.zero_fwd[1].nbytes == 2 * block
    assert fp8.zero_fwd[1].nbytes == LINEAR + 2 * (block - LINEAR)
    assert fp8.zero_fwd[1].kind is CommKind.ZERO


def test_fp8_is_faster_and_mfu_keeps_the_bf16_peak():
    base = dict(global_batch=16, dp=8, zero=1, framework="megatron")
    plain = estimate(H100, LLAMA, strategy_from_flat(base))
    fp8 = estimate(H100, LLAMA, strategy_from_flat(dict(base, precision="fp8")))
    assert fp8.step_time_s < plain.step_time_s
    assert fp8.peak_flops_per_gpu == plain.peak_flops_per_gpu == 989e12


@pytest.mark.parametrize("cluster", ["dgx-a100", "dgx-v100", "pcie-a100"])
def test_devices_without_fp8_refuse_it(cluster):
    c = load_cluster(cluster, nodes=1)
    with pytest.raises(SpecError, match="has no FP8 tensor cores") as err:
        build_layout(strategy_from_flat(dict(global_batch=8, precision="fp8")), c, LLAMA)
    assert err.value.field == "precision" and "\n" not in str(err.value)


@pytest.mark.parametrize("cluster", ["dgx-h100", "h100-roce", "hgx-h200", "dgx-b200", "pcie-l40s"])
def test_devices_with_an_fp8_peak_accept_it(cluster):
    c = load_cluster(cluster, nodes=1)
    assert build_layout(strategy_from_flat(dict(global_batch=8, precision="fp8")), c, LLAMA).world_size > 0


@pytest.mark.parametrize("keys, field", [
    (dict(fp8_recipe="te"), "fp8_recipe"),                                   # without precision fp8
    (dict(precision="fp8", zero=2, framework="deepspeed"), "fp8_recipe"),      # DeepSpeed: say which recipe
    (dict(precision="fp8", fp8_all_gather=True, framework="megatron"), "fp8_all_gather"),
    (dict(precision="fp8", fp8_all_gather=True, framework="fsdp2", zero=2, fp8_recipe="te"), "fp8_all_gather"),
])
def test_fp8_field_rules(keys, field):
    with pytest.raises(SpecError) as err:
        strategy_from_flat(dict(global_batch=8, **keys))
    assert err.value.field == field


def test_recipe_implied_by_the_framework():
    def recipe(**keys):
        return strategy_from_flat(dict(global_batch=8, precision="fp8", **keys)).resolved_fp8_recipe
    assert recipe(framework="megatron") is Fp8Recipe.TE
    assert recipe(framework="fsdp2", zero=3) is Fp8Recipe.TORCHAO and recipe() is Fp8Recipe.TORCHAO
    assert recipe(framework="deepspeed", zero=2, fp8_recipe="te") is Fp8Recipe.TE


def test_fp8_needs_a_bf16_transformer():
    from dataclasses import replace

    from simulator.workload import DtypePolicy
    with pytest.raises(SpecError, match="the model is fp32"):
        build_layout(strategy_from_flat(dict(global_batch=8, precision="fp8")), H100,
                     replace(LLAMA, dtype=DtypePolicy.FP32))


def test_estimate_many_agrees_with_estimate_under_fp8():
    from simulator.analytical_vec import estimate_many

    keys = [dict(global_batch=16, dp=8, zero=1, framework="megatron", precision="fp8"),
            dict(global_batch=16, dp=8, zero=3, framework="fsdp2", precision="fp8", fp8_all_gather=True),
            dict(global_batch=16, dp=4, tp=2, precision="fp8")]
    strategies = [strategy_from_flat(k) for k in keys]
    many = estimate_many(H100, LLAMA, strategies).step_time_s.tolist()
    assert many == pytest.approx([estimate(H100, LLAMA, s).step_time_s for s in strategies], rel=1e-12)


def test_transformer_engine_recipes_cast_bytes_and_generations():
    """Per BF16 element (e = 2): current scaling reads it twice (amax, then cast) and writes FP8 and its
    transpose, 2·2 + 2 = 6 [src: te-fp8-current]; MXFP8 one pass writing two copies with an E8M0 scale per 32
    elements each, 2 + 2 + 2/32 [src: te-mxfp8]; block scaling the same with an FP32 scale per 128,
    2 + 2 + 8/128 [src: te-fp8-blockwise]. All keep the FP8 weights over the step; only delayed scaling's
    inputs come out of the norm or activation already in FP8. Block scaling needs Hopper, MXFP8 Blackwell."""
    assert Fp8Recipe.TE_CURRENT.cast_bytes_per_element(2) == 6
    assert Fp8Recipe.TE_MXFP8.cast_bytes_per_element(2) == Fp8Recipe.TE_BLOCKWISE.cast_bytes_per_element(2) == 4.0625
    te = [r for r in Fp8Recipe if not r.is_torchao]
    assert all(r.caches_weights for r in te) and [r for r in Fp8Recipe if r.fuses_input_casts] == [Fp8Recipe.TE]
    current = _block(Fp8Recipe.TE_CURRENT)
    assert _named(current[OpKind.QKV].fwd)["qkv.cast_input"].bytes == 6 * T * 4096
    b200, h100_mx = load_cluster("dgx-b200", nodes=1), dict(global_batch=8, precision="fp8", fp8_recipe="te-mxfp8")
    build_layout(strategy_from_flat(h100_mx), b200, LLAMA)
    with pytest.raises(SpecError, match="te-mxfp8: Transformer Engine runs it on SM 10 or later") as err:
        build_layout(strategy_from_flat(h100_mx), H100, LLAMA)
    assert err.value.field == "fp8_recipe"


def test_torchao_rowwise_casts_each_operand_twice_and_has_no_float8_all_gather():
    """torchao's rowwise recipe quantizes every operand from its BF16 source once per GEMM axis (torchao 0.18
    ``float8_linear.py``: input and weight in forward, again for the weight and input gradients) [src:
    torchao-float8-rowwise]: 2·(2·2 + 1) = 10 bytes per BF16 element; weights every micro-batch; it is a torchao
    recipe (refused for MoE, no weight cache) and the float8 all-gather (tensorwise only) is refused with it."""
    rowwise = Fp8Recipe.TORCHAO_ROWWISE
    assert rowwise.cast_bytes_per_element(2) == rowwise.cast_bytes_per_element(2, transpose=False) == 10
    assert rowwise.is_torchao and not rowwise.caches_weights and not rowwise.fuses_input_casts
    qkv = _named(_block(rowwise)[OpKind.QKV].fwd)
    assert qkv["qkv.cast_input"].bytes == 10 * T * 4096 and qkv["qkv.cast_weight"].bytes == 10 * 4096 * 6144
    base = dict(global_batch=8, dp=8, zero=3, framework="fsdp2", precision="fp8", fp8_recipe="torchao-rowwise",
                kernel_fusion="compiled")  # the fused casts the bytes above describe (eager: the next test)
    tensorwise = estimate(H100, LLAMA, strategy_from_flat(dict(base, fp8_recipe="torchao"))).step_time_s
    assert estimate(H100, LLAMA, strategy_from_flat(base)).step_time_s > tensorwise  # more cast bytes
    with pytest.raises(SpecError, match="fp8_all_gather"):
        strategy_from_flat(dict(base, fp8_all_gather=True))
    with pytest.raises(SpecError, match="fp8_recipe: torchao-rowwise: torchao's float8 converter swaps nn.Linear"):
        build_layout(strategy_from_flat(dict(global_batch=8, precision="fp8", fp8_recipe="torchao-rowwise")), H100,
                     load_model("qwen1.5-moe-a2.7b"))


def test_eager_torchao_casts_each_pass_as_its_own_kernel():
    """torchao tensorwise without torch.compile (kernel_fusion eager), per linear and micro-batch, as the H200
    trace counts the passes (docs/measured/h200-2026-11-25/call8): amax (abs + max, 3e B/elt) on x, w and twice
    on dy; scale-and-cast (e + 25 B/elt) of x and w twice, dy twice; an FP8 transpose (2 B/elt) of each.
    Hand-worked for m=4, n=8, k=16, e=2: x=64, w=128, dy=32 elements."""
    from simulator.workload.fp8 import _casts
    from simulator.workload.ops import gemm
    g = gemm("qkv", 4, 8, 16, 2)
    fwd, bwd = _casts(g, Fp8Recipe.TORCHAO, 2, 1, True, eager=True)
    assert [k.bytes for k in fwd] == [(6 + 27) * 64, (6 + 27) * 128]
    assert [k.bytes for k in bwd] == [2 * (6 + 27) * 32, 27 * (64 + 128), 2 * (64 + 128 + 32)]
    compiled_f, compiled_b = _casts(g, Fp8Recipe.TORCHAO, 2, 1, True)
    assert sum(k.bytes for k in compiled_f + compiled_b) == 7 * (64 + 128 + 32)  # 2e + 3 per element, once each
    te_f, te_b = _casts(g, Fp8Recipe.TE, 2, 1, True, eager=True)  # eager changes torchao's casts only
    assert (te_f, te_b) == _casts(g, Fp8Recipe.TE, 2, 1, True)
    row_f, row_b = _casts(g, Fp8Recipe.TORCHAO_ROWWISE, 2, 1, True, eager=True)  # an amax and a cast per use
    assert sum(k.bytes for k in row_f + row_b) == 2 * 33 * (64 + 128 + 32)


@pytest.mark.parametrize("recipe, copies", [("te", 1), ("te-current", 1), ("te-blockwise", 2), ("te-mxfp8", 2)])
def test_fp8_weight_cache_keeps_one_copy_where_the_gemms_take_every_layout(recipe, copies):
    """Transformer Engine's per-tensor recipes keep one FP8 copy of each cached weight on SM 10.x (B200), where
    ``is_non_tn_fp8_gemm_supported`` holds, two (the transpose) on Hopper [src: te-non-tn-fp8]; block scaling and
    MXFP8 keep both copies everywhere. Llama 3 8B on 8 GPUs, ZeRO-1: the cache is 32 blocks × LINEAR × copies bytes,
    and the H100's (same strategy, same model) is 32 × LINEAR × 2."""
    s = strategy_from_flat(dict(global_batch=16, dp=8, zero=1, framework="megatron", precision="fp8",
                                fp8_recipe=recipe))
    b200 = memory_report(LLAMA, load_cluster("dgx-b200", nodes=1), s).worst.buffers.fp8_weights_bytes
    assert b200 == 32 * copies * LINEAR
    if recipe != "te-mxfp8":  # MXFP8 needs SM 10
        assert memory_report(LLAMA, H100, s).worst.buffers.fp8_weights_bytes == 32 * 2 * LINEAR
