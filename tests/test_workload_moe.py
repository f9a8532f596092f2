"""Mixture-of-experts workloads: parameter counts (total and active) against the published figures and
hand-worked sums, FLOPs per token, the Hugging Face config keys, and the input checks.

Published figures (rounded to 0.1B by their authors, so the exact counts are checked to round to them):
Mixtral 8x7B 46.7B total / 12.9B active [src: mixtral-2024]; Qwen1.5-MoE-A2.7B 14.3B / 2.7B
[src: qwen-moe-2024]; DeepSeek-V2-Lite 15.7B / 2.4B and V2 236B / 21B [src: deepseek-v2], V3 671B /
37B [src: deepseek-v3] (activated counts without the token-embedding table, see below).
"""

import pytest

from simulator.errors import SpecError
from simulator.workload import get_preset, spec_from_hf_config
from simulator.workload.flops import fwd_flops_per_token, layer_fwd_flops_per_token
from simulator.workload.moe import MoESpec, expert_tokens
from simulator.workload.presets import PUBLISHED_ACTIVE_PARAMS, PUBLISHED_PARAMS

MIXTRAL_CONFIG = {  # mistralai/Mixtral-8x7B-v0.1 config.json (the keys read)
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32000,
    "attention_dropout": 0.0}
QWEN_MOE_CONFIG = {  # Qwen/Qwen1.5-MoE-A2.7B config.json (the keys read)
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192,
    "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 16, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 151936, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60, "mlp_only_layers": []}
DEEPSEEK_V2_LITE_CONFIG = {  # deepseek-ai/DeepSeek-V2-Lite config.json (the keys read)
    "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "moe_intermediate_size": 1408, "moe_layer_freq": 1, "first_k_dense_replace": 1,
    "n_routed_experts": 64, "n_shared_experts": 2, "num_attention_heads": 16, "num_experts_per_tok": 6,
    "num_hidden_layers": 27, "num_key_value_heads": 16, "q_lora_rank": None, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "v_head_dim": 128,
    "vocab_size": 102400}


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen1.5-moe-a2.7b"])
def test_published_total_and_active_round_to_ours(name):
    spec = get_preset(name)
    assert round(spec.params / 1e9, 1) == PUBLISHED_PARAMS[name] / 1e9
    assert round(spec.active_params / 1e9, 1) == PUBLISHED_ACTIVE_PARAMS[name] / 1e9


def test_mixtral_hand_worked_counts():
    h, kv, f, l, v = 4096, 1024, 14336, 32, 32000
    attention = 2 * h * h + 2 * h * kv                      # Q, O: h×h; K, V: h×1024 (8 KV heads of 128)
    expert = 3 * h * f                                      # SwiGLU gate, up, down
    block = attention + 8 * expert + h * 8 + 2 * h          # 8 experts, router h×8, two RMSNorms
    total = l * block + 2 * v * h + h                       # untied embedding and head, final norm
    active = l * (attention + 2 * expert + h * 8 + 2 * h) + 2 * v * h + h
    spec = get_preset("mixtral-8x7b")
    assert (spec.params, spec.active_params) == (total, active) == (46_702_792_704, 12_879_925_248)
    assert spec.expert_params == l * 8 * expert


def test_qwen_moe_hand_worked_counts():
    h, l, v = 2048, 24, 151936
    attention = 4 * h * h + 3 * h                           # MHA, Q/K/V biases
    expert, shared = 3 * h * 1408, 3 * h * 5632
    mlp = 60 * expert + shared + h + h * 60                 # experts, shared expert, its gate h×1, router
    spec = get_preset("qwen1.5-moe-a2.7b")
    assert spec.params == l * (attention + mlp + 2 * h) + 2 * v * h + h == 14_315_784_192
    assert spec.active_params == l * (attention + 4 * expert + shared + h + 60 * h + 2 * h) + 2 * v * h + h


@pytest.mark.parametrize("name,cfg", [("mixtral-8x7b", MIXTRAL_CONFIG), ("qwen1.5-moe-a2.7b", QWEN_MOE_CONFIG),
                                      ("deepseek-v2-lite", DEEPSEEK_V2_LITE_CONFIG)])
def test_hf_config_reads_as_the_preset(name, cfg):
    spec = spec_from_hf_config(cfg, name)
    preset = get_preset(name)
    assert spec.moe == preset.moe
    assert (spec.params, spec.active_params) == (preset.params, preset.active_params)


def test_qwen_sparse_step_and_mlp_only_layers_make_dense_layers():
    cfg = QWEN_MOE_CONFIG | {"decoder_sparse_step": 2, "mlp_only_layers": [1]}
    spec = spec_from_hf_config(cfg, "q")
    # layer i is MoE when (i + 1) % 2 == 0 and i is not in mlp_only_layers (Qwen2MoeDecoderLayer)
    assert spec.moe.dense_layers == tuple(i for i in range(24) if i % 2 == 0 or i == 1)
    dense_block = spec.attention_params + spec.mlp_params + 2 * spec.norm_params
    assert spec.block_params(0) == dense_block and spec.block_params(3) > dense_block


def test_deepseek_config_missing_a_latent_key_is_named():
    cfg = {k: v for k, v in DEEPSEEK_V2_LITE_CONFIG.items() if k != "kv_lora_rank"}
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(cfg, "d", "cfg.json")
    assert err.value.field == "cfg.json: kv_lora_rank"


def test_missing_expert_key_is_named():
    cfg = {k: v for k, v in MIXTRAL_CONFIG.items() if k != "num_local_experts"}
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(cfg, "m", "cfg.json")
    assert "num_local_experts" in err.value.field


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen1.5-moe-a2.7b"])
def test_matmul_flops_are_twice_the_active_weights(name):
    # Every active weight is one multiply-add per token; the attention scores (4·s·q) and the
    # embedding lookup (no matmul) are the only differences; norms have no matmul.
    spec = get_preset(name)
    s = spec.seq_len
    norms = (2 * spec.layers + 1) * spec.norm_params
    biases = spec.layers * 3 * spec.hidden if name.startswith("qwen") else 0  # Q/K/V biases: adds, not matmuls
    weights = spec.active_params - spec.vocab * spec.hidden - norms - biases
    assert fwd_flops_per_token(spec, s) - spec.layers * 4 * s * spec.q_dim == pytest.approx(2 * weights, rel=1e-12)
    assert layer_fwd_flops_per_token(spec, s, moe_layer=True)["router"] > 0


def test_dense_models_count_as_before():
    spec = get_preset("llama2-7b")
    assert spec.active_params == spec.params and spec.expert_params == 0 and spec.blocks_params == 32 * spec.layer_params


@pytest.mark.parametrize("kwargs,field", [
    ({"experts": 8, "top_k": 9, "expert_ffn": 16}, "model.moe.top_k"),
    ({"experts": 0, "top_k": 1, "expert_ffn": 16}, "model.moe.experts"),
    ({"experts": 8, "top_k": 2, "expert_ffn": 16, "capacity_factor": 0}, "model.moe.capacity_factor"),
    ({"experts": 8, "top_k": 2, "expert_ffn": 16, "shared_experts": -1}, "model.moe.shared_experts"),
])
def test_bad_moe_fields_are_named(kwargs, field):
    with pytest.raises(SpecError) as err:
        MoESpec(**kwargs)
    assert err.value.field == field


def test_expert_tokens_skew_and_capacity():
    moe = MoESpec(experts=8, top_k=2, expert_ffn=16)
    assert expert_tokens(moe, 1000, 1.0, 4) == 2000        # balanced: tokens · k pairs per ep rank
    assert expert_tokens(moe, 1000, 1.5, 4) == 3000        # the busiest rank gets 1.5× its share
    assert expert_tokens(moe, 1000, 1.5, 1) == 2000        # ep 1: every copy is local, whatever the routing
    assert expert_tokens(moe, 1000, 3.0, 2) == 4000        # at most the whole group's tokens
    capped = MoESpec(experts=8, top_k=2, expert_ffn=16, capacity_factor=1.25)
    assert expert_tokens(capped, 1000, 1.5, 4) == 2500     # dropped beyond cf · tokens · k


def test_deepseek_v2_lite_hand_worked_count():
    h, n, layers, v = 2048, 16, 27, 102400
    attention = (h * n * 192                 # q: h × n·(128 + 64), no query latent
                 + h * (512 + 64) + 512      # kv down to the 512 latent and the shared 64-wide rotary key; its norm
                 + 512 * n * (128 + 128)     # kv up: per head a 128 non-rotary key and a 128 value
                 + n * 128 * h)              # out
    expert = 3 * h * 1408
    dense = attention + 3 * h * 10944 + 2 * h                        # layer 0
    moe = attention + 64 * expert + 2 * expert + 64 * h + 2 * h      # 64 routed, 2 shared, router
    spec = get_preset("deepseek-v2-lite")
    assert spec.params == dense + (layers - 1) * moe + 2 * v * h + h == 15_706_484_224


@pytest.mark.parametrize("name", ["deepseek-v2-lite", "deepseek-v2", "deepseek-v3"])
def test_deepseek_activated_counts_leave_the_embedding_out(name):
    # DeepSeek's activated parameters leave out the token-embedding table (a lookup): ours without it are
    # 2.451B, 20.85B, 36.63B against the published 2.4B, 21B, 37B — rounded to two significant figures
    # (V2-Lite's rounded down), hence 2.5 %.
    spec = get_preset(name)
    assert spec.active_params - spec.vocab * spec.hidden == pytest.approx(PUBLISHED_ACTIVE_PARAMS[name], rel=0.025)


def test_mla_flops_and_saved_activations_hand_worked():
    spec, s = get_preset("deepseek-v2-lite"), 4096
    per_layer = layer_fwd_flops_per_token(spec, s)
    assert per_layer["qkv"] == 2 * (2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256)
    assert per_layer["attention"] == 2 * s * 16 * (192 + 128)
    assert per_layer["out_proj"] == 2 * 16 * 128 * 2048
    # Q, K (192 per head), V, O (128 per head), rotated q parts and the shared rotary key, the latent twice
    assert spec.mla.saved_elements(16) == 16 * (2 * 192 + 2 * 128) + 17 * 64 + 2 * 512


def test_a_plan_file_carries_experts_and_latent_attention():
    import json

    from simulator.plan_file import model_from_dict, model_to_dict

    spec = spec_from_hf_config(DEEPSEEK_V2_LITE_CONFIG, "ds-lite-from-config")
    data = json.loads(json.dumps(model_to_dict(spec)))   # not a preset: the full shape is written
    assert data["transformer"]["moe"]["dense_layers"] == [0] and data["transformer"]["mla"]["kv_lora_rank"] == 512
    assert model_from_dict(data) == spec
    data["transformer"]["moe"]["experts_per_rank"] = 8
    with pytest.raises(SpecError) as err:
        model_from_dict(data)
    assert err.value.field == "plan.model.transformer.moe.experts_per_rank"


def test_scaling_a_plan_down_keeps_only_the_dense_layers_it_still_has():
    from simulator.cluster.io import load_cluster
    from simulator.plan_file import Plan
    from simulator.plan_scale import Scale, scale_plan
    from simulator.strategy import Strategy

    plan = Plan(model=get_preset("deepseek-v3"), cluster=load_cluster("dgx-h100"), gpus=8,
                strategy=Strategy(global_batch=16, dp=4, pp=2))
    tiny = scale_plan(plan, Scale.parse("tiny"), 8).run.model   # 2 layers: of V3's dense 0-2, 0 and 1 remain
    assert tiny.layers == 2 and tiny.moe.dense_layers == (0, 1) and tiny.moe.experts == 256
