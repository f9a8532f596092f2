"""Transformer spec: validation, parameter and FLOP formulas against hand-worked and published forms."""

import pytest
from hypothesis import given, settings, strategies as st

from simulator.dtypes import Dtype
from simulator.errors import SpecError
from simulator.workload import (ActivationKind, BiasKind, DtypePolicy, LayerListWorkload, NormKind,
                                ParamCountModel, PositionKind, Recompute, TransformerSpec, fwd_flops_per_token,
                                layer_fwd_flops_per_token, layer_list_from_dict, narayanan_flops_per_iteration,
                                parse_param_count, train_flops_per_token, transformer_layers)


def gpt(l=2, h=64, a=4, v=100, s=32, **kw):
    return TransformerSpec(name="t", layers=l, hidden=h, heads=a, vocab=v, seq_len=s, **kw)


gpt_shapes = st.builds(
    lambda l, heads, d, v, s: gpt(l=l, h=heads * d, a=heads, v=v, s=s),
    st.integers(1, 64), st.integers(1, 32), st.sampled_from([16, 64, 128]), st.integers(1, 200_000),
    st.integers(1, 8192))


@settings(max_examples=60, deadline=None)
@given(gpt_shapes)
def test_gpt_params_equal_narayanan_eq2_plus_final_norm(spec):
    # Narayanan et al. SC'21 eq. 2 (exact for GPT shapes), plus the final LayerNorm's 2h.
    l, h, v, s = spec.layers, spec.hidden, spec.vocab, spec.seq_len
    eq2 = 12 * l * h * h + 13 * l * h + (v + s) * h
    assert spec.params == eq2 + 2 * h


@settings(max_examples=60, deadline=None)
@given(gpt_shapes, st.integers(1, 16))
def test_train_flops_equal_narayanan_closed_form(spec, batch):
    # 72·B·s·l·h²(1 + s/(6h) + V/(12lh)) without recompute, 96·…(… + V/(16lh)) with full recompute.
    tokens = batch * spec.seq_len
    for recompute, full in ((Recompute.NONE, False), (Recompute.FULL, True)):
        ours = tokens * train_flops_per_token(spec, recompute)
        assert ours == pytest.approx(narayanan_flops_per_iteration(spec, batch, full), rel=1e-9)


def test_train_flops_are_6n_plus_attention_plus_logits_hand_worked():
    # GPT-3 175B per token: 6·(12lh²) + 12·l·h·s (attention) + 6·h·V (logits), all exact for GPT shapes.
    s = gpt(l=96, h=12288, a=96, v=50257, s=2048)
    expected = 6 * 12 * 96 * 12288**2 + 12 * 96 * 12288 * 2048 + 6 * 12288 * 50257
    assert train_flops_per_token(s) == expected
    assert train_flops_per_token(s) == pytest.approx(6 * s.params, rel=0.05)  # 6N rule within 5 %


def test_gqa_and_swiglu_flops_hand_worked():
    # Llama-3-8B block: QKV 2·4096·(4096 + 2·1024), out 2·4096², MLP 6·4096·14336, attention 4·s·4096.
    s = TransformerSpec(name="l3", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                        seq_len=8192, activation=ActivationKind.SWIGLU)
    f = layer_fwd_flops_per_token(s)
    assert f["qkv"] == 2 * 4096 * (4096 + 2 * 1024)
    assert f["out_proj"] == 2 * 4096 * 4096
    assert f["mlp"] == 6 * 4096 * 14336
    assert f["attention"] == 4 * 8192 * 4096
    assert fwd_flops_per_token(s) == 32 * sum(f.values()) + 2 * 4096 * 128256


def test_recompute_adds_forward_work():
    s = gpt()
    base = train_flops_per_token(s)
    attn = layer_fwd_flops_per_token(s)["attention"]
    assert train_flops_per_token(s, Recompute.SELECTIVE) == base + s.layers * attn
    assert train_flops_per_token(s, Recompute.FULL) == base + s.layers * sum(layer_fwd_flops_per_token(s).values())


def test_parameter_breakdown_llama_style_hand_worked():
    # Qwen2-0.5B-like: RMSNorm h, Q/K/V biases, GQA 14/2 heads of 64, SwiGLU, tied.
    s = TransformerSpec(name="q", layers=24, hidden=896, heads=14, kv_heads=2, ffn=4864, vocab=151936,
                        seq_len=4096, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                        position=PositionKind.ROTARY, bias=BiasKind.QKV, tied_embeddings=True)
    assert s.attention_params == 896 * 896 * 2 + 2 * 896 * 128 + 896 + 2 * 128
    assert s.mlp_params == 3 * 896 * 4864
    assert s.embedding_params == 151936 * 896
    assert s.head_params == 896
    assert s.params == 494_032_768  # Qwen2-0.5B's published total


def test_untied_head_and_learned_positions():
    tied, untied = gpt(), gpt(tied_embeddings=False)
    assert untied.params - tied.params == tied.vocab * tied.hidden
    rotary = gpt(position=PositionKind.ROTARY)
    assert tied.params - rotary.params == tied.seq_len * tied.hidden


def test_with_seq_keeps_the_learned_position_table():
    s = gpt(s=32)
    longer = s.with_seq(64)
    assert longer.seq_len == 64 and longer.params == s.params
    assert layer_fwd_flops_per_token(longer)["attention"] == 2 * layer_fwd_flops_per_token(s)["attention"]


@pytest.mark.parametrize("kw,field", [
    ({"heads": 5}, "model.heads"),
    ({"kv_heads": 3}, "model.kv_heads"),
    ({"layers": 0}, "model.layers"),
    ({"ffn": -1}, "model.ffn"),
    ({"activation": "gelu"}, "model.activation"),
])
def test_invalid_specs_name_the_field(kw, field):
    base = dict(name="t", layers=2, hidden=64, heads=4, vocab=100, seq_len=32)
    with pytest.raises(SpecError) as err:
        TransformerSpec(**(base | kw))
    assert err.value.field == field


def test_dtype_policies():
    assert DtypePolicy.BF16_MIXED.compute_dtype is Dtype.BF16
    assert (DtypePolicy.BF16_MIXED.param_bytes, DtypePolicy.BF16_MIXED.master_bytes) == (2, 4)
    assert (DtypePolicy.FP32.param_bytes, DtypePolicy.FP32.master_bytes) == (4, 0)


def test_transformer_as_layer_list_keeps_params_and_flops():
    s = gpt()
    layers = transformer_layers(s)
    assert layers.params == s.params
    assert layers.fwd_flops_per_sample == pytest.approx(s.seq_len * fwd_flops_per_token(s))
    assert len(layers.layers) == s.layers + 2


def test_layer_list_round_trip_and_errors():
    d = {"name": "mlp", "layers": [{"name": "fc", "params": 10, "fwd_flops": 20, "activation_bytes": 4}]}
    w = layer_list_from_dict(d)
    assert isinstance(w, LayerListWorkload) and w.params == 10 and w.train_flops_per_sample == 60
    assert layer_list_from_dict(w.to_dict()) == w
    with pytest.raises(SpecError, match="fwd_flops"):
        layer_list_from_dict({"layers": [{"params": 1, "activation_bytes": 1}]})
    with pytest.raises(SpecError, match="params"):
        layer_list_from_dict({"layers": [{"params": -1, "fwd_flops": 1, "activation_bytes": 1}]})


@pytest.mark.parametrize("text,count", [("7.5e9", 7_500_000_000), ("7.5B", 7_500_000_000), ("350M", 350_000_000),
                                        ("1t", 10**12), ("125000", 125000)])
def test_parse_param_count(text, count):
    assert parse_param_count(text) == count
    assert ParamCountModel(params=count).params == count


@pytest.mark.parametrize("text", ["", "abc", "7.5GB", "-3", "0"])
def test_parse_param_count_rejects(text):
    with pytest.raises(SpecError):
        parse_param_count(text)
