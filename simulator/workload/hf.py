"""Read a Hugging Face ``config.json`` (a local file; no network) as a :class:`TransformerSpec`.

Families and the keys read (a missing required key is an error that names it):

- GPT-2 (``model_type: gpt2``): ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``, ``vocab_size``;
  ``n_inner`` (null: 4h). GELU MLP, LayerNorm, learned positions, biases, tied embeddings.
- GPT-NeoX (``gpt_neox``): ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
  ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``; ``tie_word_embeddings``
  (default false). GELU, LayerNorm, rotary, biases.
- Llama / Mistral / Qwen2 (``llama``, ``mistral``, ``qwen2``), and the MoE families Mixtral, Qwen2-MoE
  and DeepSeek-V2/V3 (``mixtral``, ``qwen2_moe``, ``deepseek_v2``, ``deepseek_v3``; their expert and
  latent-attention keys in :mod:`simulator.workload.hf_moe`): the NeoX keys plus
  ``num_key_value_heads`` (default: MHA), ``head_dim`` (optional), ``tie_word_embeddings``.
  SwiGLU, RMSNorm, rotary; no biases, except Qwen2's Q/K/V biases (and Llama's
  ``attention_bias: true``, counted as Q/K/V biases: the output-projection bias, h parameters,
  is left out).

Dropout (for the activation-memory model's masks): GPT-2 ``resid_pdrop`` (transformers' default
0.1), GPT-NeoX ``hidden_dropout``, Llama-like ``attention_dropout`` (transformers' defaults 0.0).

``torch_dtype`` picks the dtype policy (bfloat16, float16, float32; default bf16). The sequence
length is ``n_positions`` / ``max_position_embeddings``; callers override it with ``with_seq``.
"""

from __future__ import annotations

from pathlib import Path

from simulator.checks import positive_int
from simulator.errors import SpecError
from simulator.jsonio import read_json
from simulator.workload.hf_moe import MOE_MODEL_TYPES, mla_from_hf, moe_from_hf
from simulator.workload.layers import MAX_PARAMS
from simulator.workload.transformer import (ActivationKind, BiasKind, DtypePolicy, NormKind, PositionKind,
                                            TransformerSpec)

MAX_DIM = 2**31 - 1
"""The largest size a config.json may give (hidden, layers, heads, vocab, positions): int32's maximum,
over 10,000× Llama 3's 128K vocabulary and 128K context [src: llama3-2024]. With the parameter limit
(:data:`~simulator.workload.layers.MAX_PARAMS`) it keeps every FLOP count a finite float: a vocabulary
of 10**400 loaded, then overflowed in ``logits_fwd_flops``."""

_LLAMA_LIKE = ("llama", "mistral", "qwen2") + MOE_MODEL_TYPES
SUPPORTED_MODEL_TYPES = ("gpt2", "gpt_neox") + _LLAMA_LIKE
_DTYPES = {"bfloat16": DtypePolicy.BF16_MIXED, "float16": DtypePolicy.FP16_MIXED,
           "float32": DtypePolicy.FP32}


def _reader(cfg: dict, where: str, model_type: str):
    def get_int(key: str, default=None, required: bool = True) -> int | None:
        if key not in cfg or cfg[key] is None:
            if required and default is None:
                raise SpecError(f"{where}: {key}", f"missing from config.json (needed for model_type "
                                f"{model_type!r})")
            return default
        value = positive_int(f"{where}: {key}", cfg[key])
        if value > MAX_DIM:
            raise SpecError(f"{where}: {key}", f"must be at most {MAX_DIM:,}")
        return value
    return get_int


_DROPOUT_KEY = {"gpt2": ("resid_pdrop", 0.1), "gpt_neox": ("hidden_dropout", 0.0)}
"""Key holding the residual/hidden dropout per family, and transformers' default when it is absent
(``GPT2Config`` resid_pdrop=0.1; ``GPTNeoXConfig`` hidden_dropout=0.0; Llama-like attention_dropout=0.0)."""


def _dropout(cfg: dict, where: str, model_type: str) -> float:
    key, default = _DROPOUT_KEY.get(model_type, ("attention_dropout", 0.0))
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
        raise SpecError(f"{where}: {key}", f"must be a probability in [0, 1), got {value!r}")
    return float(value)


def _flag(cfg: dict, key: str, default: bool, where: str) -> bool:
    """A true/false key (absent: transformers' ``default``; null: false); anything else names the key."""
    value = cfg.get(key, default)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise SpecError(f"{where}: {key}", f"must be true or false, got {value!r}")
    return value


def spec_from_hf_config(cfg: dict, name: str, where: str = "config.json") -> TransformerSpec:
    """Build a spec from a parsed config dict; ``where`` prefixes error fields (the file path)."""
    spec = _spec(cfg, name, where)
    if spec.params > MAX_PARAMS:
        raise SpecError(where, f"{spec.params:.3g} parameters, more than the limit of {MAX_PARAMS:.0e}")
    return spec


def _spec(cfg: dict, name: str, where: str) -> TransformerSpec:
    if not isinstance(cfg, dict):
        raise SpecError(where, "must be a JSON object")
    model_type = cfg.get("model_type") or ("gpt2" if "n_embd" in cfg else "")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise SpecError(f"{where}: model_type", f"unsupported {model_type or '(missing)'!r}; supported: "
                        f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    get = _reader(cfg, where, model_type)
    dtype_text = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if not isinstance(dtype_text, str) or dtype_text not in _DTYPES:
        raise SpecError(f"{where}: torch_dtype", f"unknown {dtype_text!r}; known: {', '.join(_DTYPES)}")
    common = {"name": name, "vocab": get("vocab_size"), "dtype": _DTYPES[dtype_text], "source": where,
              "dropout": _dropout(cfg, where, model_type)}
    if model_type == "gpt2":
        positions = get("n_positions")
        return TransformerSpec(hidden=get("n_embd"), layers=get("n_layer"), heads=get("n_head"),
                               ffn=get("n_inner", required=False), seq_len=positions, max_positions=positions,
                               activation=ActivationKind.GELU, norm=NormKind.LAYERNORM,
                               position=PositionKind.LEARNED, bias=BiasKind.ALL,
                               tied_embeddings=_flag(cfg, "tie_word_embeddings", True, where), **common)
    shape = {"hidden": get("hidden_size"), "layers": get("num_hidden_layers"),
             "heads": get("num_attention_heads"), "ffn": get("intermediate_size"),
             "seq_len": get("max_position_embeddings"), "position": PositionKind.ROTARY,
             "tied_embeddings": _flag(cfg, "tie_word_embeddings", False, where)}
    if model_type == "gpt_neox":
        return TransformerSpec(activation=ActivationKind.GELU, norm=NormKind.LAYERNORM, bias=BiasKind.ALL,
                               **shape, **common)
    qkv_bias = model_type in ("qwen2", "qwen2_moe") or _flag(cfg, "attention_bias", False, where)
    return TransformerSpec(kv_heads=get("num_key_value_heads", required=False),
                           head_dim=get("head_dim", required=False), activation=ActivationKind.SWIGLU,
                           norm=NormKind.RMSNORM, bias=BiasKind.QKV if qkv_bias else BiasKind.NONE,
                           moe=moe_from_hf(cfg, model_type, get, shape["layers"], where),
                           mla=mla_from_hf(cfg, model_type, get), **shape, **common)


def load_hf_config(path: str | Path) -> TransformerSpec:
    """Read ``path`` (a config.json) into a spec named after the file's directory (or ``_name_or_path``)."""
    path = Path(path)
    where = str(path)
    cfg = read_json(path, where)
    return spec_from_hf_config(cfg, hf_model_name(path, cfg), where)


def hf_model_name(path: Path, cfg: dict) -> str:
    """``_name_or_path`` when the config gives one, else the file's folder (``.../llama-7b/config.json``) or stem."""
    given = cfg.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        return given
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem.removesuffix(".config")
