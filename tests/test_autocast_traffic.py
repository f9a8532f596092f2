"""Eager autocast over fp32 parameters (simulator/workload/autocast.py): hand-worked bytes, and who gets it.

Per GPT block of ``T`` tokens and hidden ``h`` on one rank (e = 2), with ``W`` the elements of its four linear
weights, autocast adds to the bf16 kernels (module docstring):

    forward:  weight casts 6·W; norms 2·(8 − 4)·T·h more plus their output casts 2·6·T·h;
              residual adds 2·(10 − 6)·T·h more                                    = 6W + 28·T·h
    backward: weight-gradient casts 6·W; norms 1.5·2·(8 − 4)·T·h more plus 2·6·T·h of gradient casts;
              residual 2·(6 + 12)·T·h instead of 1.5·2·6·T·h                       = 6W + 42·T·h
"""

import dataclasses

import pytest

from simulator.cluster.io import load_cluster
from simulator.strategy import Framework, Strategy
from simulator.strategy.flat import strategy_from_flat
from simulator.strategy.kinds import MixedPrecision
from simulator.workload import DtypePolicy, load_model
from simulator.workload.autocast import autocast_block
from simulator.workload.blocks import block_work
from simulator.workload.ops import OpKind, edge_work


def _bytes(works, phase):
    return sum(k.bytes for w in works for k in getattr(w, phase))


def test_a_gpt_block_gains_the_hand_worked_bytes():
    spec = load_model("gpt3-1.3b")
    b, s, h = 8, 2048, spec.hidden
    th = b * s * h
    w = h * 3 * h + h * h + 2 * h * spec.ffn_size  # qkv, out, mlp in and out
    plain = block_work(spec, b, s)
    cast = autocast_block(plain, 2)
    assert _bytes(cast, "fwd") - _bytes(plain, "fwd") == pytest.approx(6 * w + 28 * th, rel=1e-12)
    assert _bytes(cast, "bwd") - _bytes(plain, "bwd") == pytest.approx(6 * w + 42 * th, rel=1e-12)
    # no GEMM changes: only memory-bound kernels are added or grown
    gemms = lambda works: [k for x in works for k in x.fwd + x.bwd if k.gemm]  # noqa: E731
    assert gemms(cast) == gemms(plain)


def test_every_biased_linear_gets_a_bias_cast_each_way():
    """``cached_cast`` casts every fp32 leaf argument of ``linear``, the bias too [src: torch-autocast-cache]: GPT-3
    1.3B's block (biases on all four linears) gets 10 casts each way, as the H200 trace runs per block
    [src: own-h200-2026-11-24] (4 weights, 4 biases, the norm outputs: one kernel for the block's two norms here);
    the biases' bytes by hand: (4 + 2) · (3h + h + 4h + h) each way."""
    from simulator.workload.kinds import BiasKind
    from simulator.workload.ops import biased_ops

    spec = load_model("gpt3-1.3b")
    h = spec.hidden
    plain = block_work(spec, 8, 2048)
    cast_op = lambda works: next(w for w in works if w.op is OpKind.CAST)  # noqa: E731
    with_bias, without = cast_op(autocast_block(plain, 2, BiasKind.ALL)), cast_op(autocast_block(plain, 2))
    assert spec.bias is BiasKind.ALL and spec.ffn_size == 4 * h
    assert (len(with_bias.fwd), len(with_bias.bwd)) == (9, 9) and (len(without.fwd), len(without.bwd)) == (5, 5)
    biases = [k for k in with_bias.fwd + with_bias.bwd if ".cast_bias" in k.name]
    assert sum(k.bytes for k in biases) == 2 * 6 * (3 * h + h + 4 * h + h) == 2 * 6 * 18_432
    assert biased_ops(BiasKind.QKV) == (OpKind.QKV,) and biased_ops(BiasKind.NONE) == ()


def test_the_edges_gain_the_embedding_the_final_norm_and_the_logits_weight_cast():
    spec = load_model("gpt3-1.3b")
    b, s, h, v = 8, 2048, spec.hidden, spec.vocab
    th = b * s * h
    plain = edge_work(spec, b, s)
    cast = autocast_block(plain, 2)
    emb = next(w for w in plain if w.op is OpKind.EMBEDDING).fwd[0].bytes  # learned positions: 3·T·h·e
    # embedding in fp32 (its bytes again), the final norm in fp32 (2·T·h·2 more) and its output cast (6·T·h),
    # the tied output layer's weight cast (6·V·h)
    assert _bytes(cast, "fwd") - _bytes(plain, "fwd") == pytest.approx(emb + 4 * th + 6 * th + 6 * v * h, rel=1e-12)


@pytest.mark.parametrize("framework, expected", [
    (Framework.TORCH_DDP, MixedPrecision.AUTOCAST), (Framework.FSDP2, MixedPrecision.PARAM_DTYPE),
    (Framework.MEGATRON, MixedPrecision.PARAM_DTYPE), (Framework.DEEPSPEED, MixedPrecision.PARAM_DTYPE)])
def test_framework_defaults(framework, expected):
    assert framework.mixed_precision is expected
    zero = 3 if framework is Framework.FSDP2 else 0
    s = strategy_from_flat({"global_batch": 8, "framework": framework.value, "zero": zero})
    assert s.resolved_mixed_precision is expected
    given = strategy_from_flat({"global_batch": 8, "framework": framework.value, "zero": zero,
                                "mixed_precision": "autocast"})
    assert given.resolved_mixed_precision is MixedPrecision.AUTOCAST


def test_autocast_slows_a_bf16_step_and_leaves_an_fp32_one_alone():
    from simulator.analytical import estimate

    cluster = load_cluster("hgx-h200")
    base = {"global_batch": 64, "micro_batch": 8}  # 8 GPUs of hgx-h200: dp 8
    times = {}
    for name in ("gpt3-1.3b",):
        model = load_model(name)
        for mp in ("autocast", "param-dtype"):
            times[mp] = estimate(cluster, model, strategy_from_flat({**base, "mixed_precision": mp})).step_time_s
    assert times["autocast"] > times["param-dtype"] * 1.02
    fp32 = dataclasses.replace(load_model("gpt3-1.3b"), dtype=DtypePolicy.FP32)
    a = estimate(cluster, fp32, strategy_from_flat({**base, "mixed_precision": "autocast"})).step_time_s
    p = estimate(cluster, fp32, strategy_from_flat({**base, "mixed_precision": "param-dtype"})).step_time_s
    assert a == p


def test_an_unknown_mixed_precision_is_refused_naming_the_field():
    from simulator.errors import SpecError

    with pytest.raises(SpecError, match="mixed_precision"):
        strategy_from_flat({"global_batch": 8, "mixed_precision": "amp"})
    with pytest.raises(SpecError, match="mixed_precision"):
        Strategy(global_batch=8, mixed_precision="autocast")


def test_eager_bias_gradients_read_each_biased_output_gradient_once():
    """GPT-3 1.3B (biases on every linear): Q/K/V 3h + output h + MLP in 4h + MLP out h = 9h elements per token,
    read once in bf16 by the bias-gradient reductions; Qwen2 (biases on Q/K/V only): q + 2·kv; Llama (none) and
    Megatron's fusion: nothing added (simulator.workload.ops._bias_grads)."""
    from simulator.workload.kinds import BiasKind, KernelFusion

    def bias_bytes(spec, fusion=KernelFusion.EAGER):
        works = block_work(spec, 2, 1024, fusion=fusion)
        return sum(k.bytes for w in works for k in w.bwd if k.name.endswith(".bias_grad"))

    gpt, llama = load_model("gpt3-1.3b"), load_model("llama3-8b")
    qkv_only = dataclasses.replace(llama, bias=BiasKind.QKV)  # Qwen2's layout, on Llama 3's GQA shape
    assert bias_bytes(gpt) == pytest.approx(2 * 2 * 1024 * 9 * gpt.hidden, rel=1e-12)
    assert bias_bytes(qkv_only) == pytest.approx(2 * 2 * 1024 * (llama.q_dim + 2 * llama.kv_dim), rel=1e-12)
    assert bias_bytes(llama) == 0
    assert bias_bytes(gpt, KernelFusion.MEGATRON) == 0
