"""The mixture-of-experts keys of a Hugging Face ``config.json`` (the families :mod:`simulator.workload.hf` reads).

- Mixtral (``model_type: mixtral``, transformers ``MixtralConfig``): ``num_local_experts`` experts of
  ``intermediate_size`` each, ``num_experts_per_tok`` per token; every layer is MoE; no shared expert.
- Qwen2-MoE (``qwen2_moe``, ``Qwen2MoeConfig`` [src: qwen-moe-2024]): ``num_experts`` of ``moe_intermediate_size``,
  ``num_experts_per_tok``; one shared expert of ``shared_expert_intermediate_size`` with a sigmoid gate
  (``shared_expert_gate``, h → 1); layer i is MoE unless it is in ``mlp_only_layers`` or
  ``(i + 1) % decoder_sparse_step != 0`` (``Qwen2MoeDecoderLayer``); dense layers use ``intermediate_size``.
- DeepSeek-V2/V3 (``deepseek_v2``, ``deepseek_v3``) are refused: their Multi-head Latent Attention is not
  a shape this simulator models (:mod:`simulator.workload.presets`).

Capacity: none of these configs sets one (dropless training), so ``capacity_factor`` stays None.
"""

from __future__ import annotations

from simulator.errors import SpecError
from simulator.workload.moe import MoESpec

MOE_MODEL_TYPES = ("mixtral", "qwen2_moe")
UNSUPPORTED_MLA = ("deepseek_v2", "deepseek_v3")


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
    return None


def refuse_mla(model_type: str, where: str) -> None:
    """A DeepSeek config: one error that says why it is not read."""
    if model_type in UNSUPPORTED_MLA:
        raise SpecError(f"{where}: model_type", f"{model_type!r} uses Multi-head Latent Attention (low-rank K/V "
                        "and Q projections), which this simulator does not model; its parameter count and attention "
                        "FLOPs would be wrong. Supported MoE families: " + ", ".join(MOE_MODEL_TYPES))
