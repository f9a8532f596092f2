"""The mixture-of-experts keys of a Hugging Face ``config.json`` (the families :mod:`simulator.workload.hf` reads).

- Mixtral (``model_type: mixtral``, transformers ``MixtralConfig``): ``num_local_experts`` experts of
  ``intermediate_size`` each, ``num_experts_per_tok`` per token; every layer is MoE; no shared expert.
- Qwen2-MoE (``qwen2_moe``, ``Qwen2MoeConfig`` [src: qwen-moe-2024]): ``num_experts`` of ``moe_intermediate_size``,
  ``num_experts_per_tok``; one shared expert of ``shared_expert_intermediate_size`` with a sigmoid gate
  (``shared_expert_gate``, h → 1); layer i is MoE unless it is in ``mlp_only_layers`` or
  ``(i + 1) % decoder_sparse_step != 0`` (``Qwen2MoeDecoderLayer``); dense layers use ``intermediate_size``.
- DeepSeek-V2/V3 (``deepseek_v2``, ``deepseek_v3``, transformers' ``DeepseekV2Config`` / ``DeepseekV3Config``
  [src: deepseek-v2]): ``n_routed_experts`` of ``moe_intermediate_size``, ``num_experts_per_tok``,
  ``n_shared_experts`` of the same size; layer i is MoE when ``i >= first_k_dense_replace`` and
  ``i % moe_layer_freq == 0``; Multi-head Latent Attention from ``kv_lora_rank``, ``q_lora_rank`` (null:
  none), ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim`` (:func:`mla_from_hf`). V3's router
  score-correction bias is a buffer, not a parameter, and its multi-token-prediction layers are not part
  of the model transformers builds; neither is counted.

Capacity: none of these configs sets one (dropless training), so ``capacity_factor`` stays None.
"""

from __future__ import annotations

from simulator.errors import SpecError
from simulator.workload.mla import MLASpec
from simulator.workload.moe import MoESpec

MOE_MODEL_TYPES = ("mixtral", "qwen2_moe", "deepseek_v2", "deepseek_v3")


def _int_list(cfg: dict, key: str, where: str) -> tuple[int, ...]:
    value = cfg.get(key) or []
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise SpecError(f"{where}: {key}", f"must be a list of layer indices, got {value!r}")
    return tuple(value)


def moe_from_hf(cfg: dict, model_type: str, get, layers: int, where: str) -> MoESpec | None:
    """The :class:`MoESpec` of a parsed config (``get`` reads a positive int key, naming it when missing)."""
    if model_type == "mixtral":
        return MoESpec(experts=get("num_local_experts"), top_k=get("num_experts_per_tok"),
                       expert_ffn=get("intermediate_size"))
    if model_type == "qwen2_moe":
        step = get("decoder_sparse_step", default=1, required=False)
        only_dense = set(_int_list(cfg, "mlp_only_layers", where))
        dense = tuple(i for i in range(layers) if i in only_dense or (i + 1) % step)
        shared = get("shared_expert_intermediate_size", required=False)
        return MoESpec(experts=get("num_experts"), top_k=get("num_experts_per_tok"),
                       expert_ffn=get("moe_intermediate_size"), shared_experts=1 if shared else 0,
                       shared_ffn=shared, shared_gate=bool(shared), dense_layers=dense)
    if model_type in ("deepseek_v2", "deepseek_v3"):
        first = cfg.get("first_k_dense_replace") or 0
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise SpecError(f"{where}: first_k_dense_replace", f"must be a non-negative integer, got {first!r}")
        freq = get("moe_layer_freq", default=1, required=False)
        groups = get("n_group", default=1, required=False)
        per_token = get("topk_group", required=False)
        return MoESpec(experts=get("n_routed_experts"), top_k=get("num_experts_per_tok"),
                       expert_ffn=get("moe_intermediate_size"),
                       shared_experts=get("n_shared_experts", default=0, required=False) or 0,
                       dense_layers=tuple(i for i in range(layers) if i < first or i % freq),
                       expert_groups=groups, groups_per_token=None if per_token == groups else per_token)
    return None


def mla_from_hf(cfg: dict, model_type: str, get) -> MLASpec | None:
    """The :class:`MLASpec` of a DeepSeek config (None for the other families)."""
    if model_type not in ("deepseek_v2", "deepseek_v3"):
        return None
    return MLASpec(kv_lora_rank=get("kv_lora_rank"), qk_nope_head_dim=get("qk_nope_head_dim"),
                   qk_rope_head_dim=get("qk_rope_head_dim"), v_head_dim=get("v_head_dim"),
                   q_lora_rank=get("q_lora_rank", required=False))
