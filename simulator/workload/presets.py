"""Embedded model presets with their published shapes, each citing where the shapes come from.

Every preset's parameter count is checked in ``tests/test_workload_presets.py`` against the size
its authors publish. Notes on the sources:

- GPT-3 (Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1): l, h, heads,
  head size; all trained at s = 2048 with the GPT-2 BPE vocabulary (V = 50257), learned positions,
  tied embeddings. Table 2.1 is inconsistent for two rows: GPT-3 XL lists 24 heads of 128 for
  h = 2048 and GPT-3 13B lists h = 5140 with 40 heads of 128. We use heads × head size = h
  (16 heads for XL, h = 5120 for 13B); parameter counts and FLOPs do not depend on the head split.
- Megatron-LM GPT (Narayanan et al. SC'21, "Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM", Table 1): heads, h, l; V = 51200 (padded), s = 2048.
- Llama 2 (Touvron et al. 2023, "Llama 2", Table 1 for context 4096 and GQA on 70B; the widths
  from the released ``meta-llama/Llama-2-*-hf`` config.json files).
- Llama 3 / 3.1 (Llama Team 2024, "The Llama 3 Herd of Models", Table 3: layers, model and FFN
  dimension, heads, 8 KV heads; vocabulary 128256 from the released config.json). Llama 3.1 has the
  same shapes as Llama 3 (longer RoPE context only); presets use the 8192-token pre-training length.
- Megatron-LM GPT-3 175B (Narayanan et al. SC'21, §5.2 and Table 2: the 174.6B model compared with
  ZeRO-3): GPT-3 175B's l = 96, h = 12288, 96 heads, with Megatron's padded V = 51200.
- MPT (MosaicML llm-foundry ``scripts/train/yamls/pretrain/mpt-{size}.yaml``: d_model, n_heads,
  n_layers, expansion_ratio 4, vocab 50368; the benchmark table of ``scripts/train/benchmarking/README.md``
  lists the exact NumParams, which match GELU MLPs with biases, LayerNorm, learned positions and tied
  embeddings, as counted here). Heads: the yamls give 20 (3B) and 56 (30B); 1B, 7B, 13B and 70B take
  d_head = 128 as those yamls do; heads change neither params nor FLOPs.
- Dropout (:data:`GPT_DROPOUT`, :data:`LLAMA_DROPOUT`): only the memory model reads it (dropout masks).
- Mixture of experts (:mod:`simulator.workload.moe`), shapes from the released config.json files:
  Mixtral 8x7B (``mistralai/Mixtral-8x7B-v0.1``: Mistral 7B's attention, 8 SwiGLU experts of 14336,
  top-2 [src: mixtral-2024]); Qwen1.5-MoE-A2.7B (``Qwen/Qwen1.5-MoE-A2.7B``: 60 experts of 1408, top-4,
  one gated shared expert of 5632, Q/K/V biases [src: qwen-moe-2024]); DeepSeek-V2-Lite, V2 and V3
  (``deepseek-ai/DeepSeek-V2-Lite``, ``DeepSeek-V2``, ``DeepSeek-V3`` configs: Multi-head Latent
  Attention, :mod:`simulator.workload.mla`; routed experts with 2 (V3: 1) shared, the first layer (V3:
  three) dense [src: deepseek-v2, deepseek-v3]). Sequence length: Mixtral's 32k training context
  (Mixtral paper §2), Qwen's ``max_position_embeddings`` 8192, DeepSeek's 4K pre-training length (V2
  §3.2.1, V3 §4.2; longer contexts came after, by YaRN). V3's multi-token-prediction module (14B,
  not part of the 671B) is not modelled.
"""

from __future__ import annotations

from simulator.errors import SpecError
from simulator.workload.mla import MLASpec
from simulator.workload.moe import MoESpec
from simulator.workload.transformer import (ActivationKind, BiasKind, NormKind, PositionKind,
                                            TransformerSpec)

_GPT3 = "Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1"
_MEGATRON = "Narayanan et al. SC'21, Megatron-LM, Table 1"
_LLAMA2 = "Touvron et al. 2023, Llama 2, Table 1; widths from meta-llama/Llama-2-{size}-hf config.json"
_MEGATRON_175B = "Narayanan et al. SC'21, Megatron-LM, §5.2 and Table 2 (GPT-3 175B shape, V = 51200)"
# MPT shapes and exact counts [src: llm-foundry-bench]
_MPT = "MosaicML llm-foundry scripts/train/yamls/pretrain/mpt-{size}.yaml; NumParams in scripts/train/benchmarking/README.md"
_LLAMA3 = "Llama Team 2024, The Llama 3 Herd of Models, Table 3; vocab from meta-llama config.json"
_MIXTRAL = "Mistral AI 2024, Mixtral of Experts (arXiv:2401.04088), Table 1; mistralai/Mixtral-8x7B-v0.1 config.json"
_QWEN_MOE = "Qwen/Qwen1.5-MoE-A2.7B config.json (Qwen team 2024, Qwen1.5-MoE blog)"
_DEEPSEEK = "DeepSeek-AI 2024, {paper}; deepseek-ai/{repo} config.json"


GPT_DROPOUT = 0.1
"""GPT-2/3 and Megatron GPT: 0.1. Brown et al. 2020 do not list it; GPT-2's released config (resid,
embd and attn pdrop 0.1, Radford et al. 2019), Megatron-LM's ``--hidden-dropout``/``--attention-dropout``
defaults (0.1) and Korthikanti et al. 2022's activation count (which keeps the masks) all use it."""
LLAMA_DROPOUT = 0.0
"""Llama 2/3: no dropout. The papers (Touvron et al. 2023 §2.2; Llama Team 2024 §3) list none, Meta's
reference ``llama/model.py`` has no dropout layer, and Hugging Face's Llama config defaults
``attention_dropout`` to 0.0."""


MPT_DROPOUT = 0.0
"""MPT: no dropout. llm-foundry's ``MPTConfig`` defaults ``resid_pdrop``, ``emb_pdrop`` and the attention
config's ``attn_pdrop`` to 0.0 (``llmfoundry/models/mpt/configuration_mpt.py``) and the pretraining
yamls leave them unset."""


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int, source: str,
         dropout: float = GPT_DROPOUT) -> TransformerSpec:
    return TransformerSpec(name=name, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                           seq_len=2048, activation=ActivationKind.GELU, norm=NormKind.LAYERNORM,
                           position=PositionKind.LEARNED, bias=BiasKind.ALL, tied_embeddings=True,
                           dropout=dropout, source=source)


def _llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int,
           seq: int, source: str) -> TransformerSpec:
    return TransformerSpec(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                           ffn=ffn, vocab=vocab, seq_len=seq, activation=ActivationKind.SWIGLU,
                           norm=NormKind.RMSNORM, position=PositionKind.ROTARY, bias=BiasKind.NONE,
                           tied_embeddings=False, dropout=LLAMA_DROPOUT, source=source)


def _moe_presets() -> list[TransformerSpec]:
    mixtral = TransformerSpec(name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                              vocab=32000, seq_len=32768, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                              position=PositionKind.ROTARY, bias=BiasKind.NONE, tied_embeddings=False,
                              dropout=LLAMA_DROPOUT, source=_MIXTRAL,
                              moe=MoESpec(experts=8, top_k=2, expert_ffn=14336))
    qwen = TransformerSpec(name="qwen1.5-moe-a2.7b", layers=24, hidden=2048, heads=16, kv_heads=16, ffn=5632,
                           vocab=151936, seq_len=8192, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                           position=PositionKind.ROTARY, bias=BiasKind.QKV, tied_embeddings=False,
                           dropout=LLAMA_DROPOUT, source=_QWEN_MOE,
                           moe=MoESpec(experts=60, top_k=4, expert_ffn=1408, shared_experts=1, shared_ffn=5632,
                                       shared_gate=True))
    return [mixtral, qwen, *_deepseek_presets()]


def _deepseek(name: str, layers: int, hidden: int, heads: int, ffn: int, vocab: int, mla: MLASpec,
              moe: MoESpec, source: str) -> TransformerSpec:
    return TransformerSpec(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=heads, ffn=ffn,
                           vocab=vocab, seq_len=4096, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                           position=PositionKind.ROTARY, bias=BiasKind.NONE, tied_embeddings=False,
                           dropout=LLAMA_DROPOUT, source=source, mla=mla, moe=moe)


def _deepseek_presets() -> list[TransformerSpec]:
    v2_paper = "DeepSeek-V2 (arXiv:2405.04434)"
    lite = _deepseek("deepseek-v2-lite", 27, 2048, 16, 10944, 102400,
                     MLASpec(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
                     MoESpec(experts=64, top_k=6, expert_ffn=1408, shared_experts=2, dense_layers=(0,)),
                     _DEEPSEEK.format(paper=v2_paper, repo="DeepSeek-V2-Lite"))
    v2 = _deepseek("deepseek-v2", 60, 5120, 128, 12288, 102400,
                   MLASpec(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                           q_lora_rank=1536),
                   MoESpec(experts=160, top_k=6, expert_ffn=1536, shared_experts=2, dense_layers=(0,),
                           expert_groups=8, groups_per_token=3),
                   _DEEPSEEK.format(paper=v2_paper, repo="DeepSeek-V2"))
    v3 = _deepseek("deepseek-v3", 61, 7168, 128, 18432, 129280,
                   MLASpec(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                           q_lora_rank=1536),
                   MoESpec(experts=256, top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=(0, 1, 2),
                           expert_groups=8, groups_per_token=4),
                   _DEEPSEEK.format(paper="DeepSeek-V3 Technical Report (arXiv:2412.19437)", repo="DeepSeek-V3"))
    return [lite, v2, v3]


def _build() -> dict[str, TransformerSpec]:
    specs = [
        # GPT-3 family: (name, l, h, heads)
        _gpt("gpt3-125m", 12, 768, 12, 50257, _GPT3),
        _gpt("gpt3-350m", 24, 1024, 16, 50257, _GPT3),
        _gpt("gpt3-760m", 24, 1536, 16, 50257, _GPT3),
        _gpt("gpt3-1.3b", 24, 2048, 16, 50257, _GPT3),
        _gpt("gpt3-2.7b", 32, 2560, 32, 50257, _GPT3),
        _gpt("gpt3-6.7b", 32, 4096, 32, 50257, _GPT3),
        _gpt("gpt3-13b", 40, 5120, 40, 50257, _GPT3),
        _gpt("gpt3-175b", 96, 12288, 96, 50257, _GPT3),
        # Megatron-LM paper GPT models, named by their published size.
        _gpt("megatron-1.7b", 24, 2304, 24, 51200, _MEGATRON),
        _gpt("megatron-3.6b", 30, 3072, 32, 51200, _MEGATRON),
        _gpt("megatron-7.5b", 36, 4096, 32, 51200, _MEGATRON),
        _gpt("megatron-18.4b", 40, 6144, 48, 51200, _MEGATRON),
        _gpt("megatron-39.1b", 48, 8192, 64, 51200, _MEGATRON),
        _gpt("megatron-76.1b", 60, 10240, 80, 51200, _MEGATRON),
        _gpt("megatron-145.6b", 80, 12288, 96, 51200, _MEGATRON),
        _gpt("megatron-310.1b", 96, 16384, 128, 51200, _MEGATRON),
        _gpt("megatron-529.6b", 105, 20480, 128, 51200, _MEGATRON),
        _gpt("megatron-1t", 128, 25600, 160, 51200, _MEGATRON),
        _gpt("megatron-174.6b", 96, 12288, 96, 51200, _MEGATRON_175B),
        # MPT (llm-foundry benchmark models): GPT blocks, V = 50368, no dropout (MPT_DROPOUT)
        _gpt("mpt-1b", 24, 2048, 16, 50368, _MPT.format(size="1b"), MPT_DROPOUT),
        _gpt("mpt-3b", 32, 2560, 20, 50368, _MPT.format(size="3b"), MPT_DROPOUT),
        _gpt("mpt-7b", 32, 4096, 32, 50368, _MPT.format(size="7b"), MPT_DROPOUT),
        _gpt("mpt-13b", 40, 5120, 40, 50368, _MPT.format(size="13b"), MPT_DROPOUT),
        _gpt("mpt-30b", 48, 7168, 56, 50368, _MPT.format(size="30b"), MPT_DROPOUT),
        _gpt("mpt-70b", 80, 8192, 64, 50368, _MPT.format(size="70b"), MPT_DROPOUT),
        # Llama 2: (name, l, h, heads, kv heads, ffn, V, s)
        _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, _LLAMA2.format(size="7b")),
        _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, _LLAMA2.format(size="13b")),
        _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, _LLAMA2.format(size="70b")),
        # Llama 3 and 3.1
        _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, _LLAMA3),
        _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, _LLAMA3),
        _llama("llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 8192, _LLAMA3),
        _llama("llama3.1-70b", 80, 8192, 64, 8, 28672, 128256, 8192, _LLAMA3),
        _llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 8192, _LLAMA3),
        *_moe_presets(),
    ]
    return {spec.name: spec for spec in specs}


PUBLISHED_PARAMS: dict[str, float] = {
    "gpt3-125m": 125e6, "gpt3-350m": 350e6, "gpt3-760m": 760e6, "gpt3-1.3b": 1.3e9,
    "gpt3-2.7b": 2.7e9, "gpt3-6.7b": 6.7e9, "gpt3-13b": 13.0e9, "gpt3-175b": 175.0e9,
    "megatron-1.7b": 1.7e9, "megatron-3.6b": 3.6e9, "megatron-7.5b": 7.5e9, "megatron-18.4b": 18.4e9,
    "megatron-39.1b": 39.1e9, "megatron-76.1b": 76.1e9, "megatron-145.6b": 145.6e9,
    "megatron-310.1b": 310.1e9, "megatron-529.6b": 529.6e9, "megatron-1t": 1008.0e9,
    "megatron-174.6b": 174.6e9,
    "mpt-1b": 1_315_950_592, "mpt-3b": 2_651_837_440, "mpt-7b": 6_658_859_008, "mpt-13b": 12_853_954_560,
    "mpt-30b": 29_975_214_080, "mpt-70b": 64_862_437_376,
    "llama2-7b": 6.74e9, "llama2-13b": 13.0e9, "llama2-70b": 69.0e9,
    "llama3-8b": 8.03e9, "llama3-70b": 70.6e9, "llama3.1-8b": 8.03e9, "llama3.1-70b": 70.6e9,
    "llama3.1-405b": 405.8e9,
    "mixtral-8x7b": 46.7e9, "qwen1.5-moe-a2.7b": 14.3e9,
    "deepseek-v2-lite": 15.7e9, "deepseek-v2": 236e9, "deepseek-v3": 671e9,
}
"""Sizes as their authors state them (paper tables; Hugging Face model cards for the Llama 2 7B
6.74e9, Llama 3 8B 8.03e9, 70B 70.6e9 and 3.1 405B 405.8e9 exact counts; MPT: llm-foundry's benchmark
table's NumParams at s = 2048, exact; Mixtral 46.7B from Mistral AI's release [src: mixtral-2024],
Qwen1.5-MoE 14.3B from its model card [src: qwen-moe-2024]; DeepSeek-V2-Lite 15.7B from its model
card and V2 236B from the paper's abstract [src: deepseek-v2], V3 671B from its report's abstract
[src: deepseek-v3]). The GPT-3 and Megatron
sizes are rounded in the papers, so the tests compare them with a tolerance."""


PUBLISHED_ACTIVE_PARAMS: dict[str, float] = {"mixtral-8x7b": 12.9e9, "qwen1.5-moe-a2.7b": 2.7e9,
                                             "deepseek-v2-lite": 2.4e9, "deepseek-v2": 21e9, "deepseek-v3": 37e9}
"""Parameters one token uses, as the MoE models' authors state them (same sources as above). DeepSeek's
"activated parameters" leave the token-embedding table out (a lookup, not a matmul): ours less V·h
is 2.45B, 20.85B and 36.63B, where the figures with it are 2.66B, 21.38B and 37.55B."""


_PRESETS = _build()


def model_names() -> list[str]:
    """Names of the embedded presets, in the order above (families, then size)."""
    return list(_PRESETS)


def get_preset(name: str) -> TransformerSpec:
    """The preset called ``name`` (case-insensitive); an unknown name lists the known ones."""
    key = name.strip().lower()
    if key not in _PRESETS:
        raise SpecError("model", f"unknown model {name!r}; known: {', '.join(_PRESETS)} "
                        "(or give a path to a Hugging Face config.json)")
    return _PRESETS[key]
