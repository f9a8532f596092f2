"""Read a Hugging Face ``config.json`` (a local file; no network) as a :class:`TransformerSpec`.

Families and the keys read (a missing required key is an error that names it):

- GPT-2 (``model_type: gpt2``): ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``, ``vocab_size``;
  ``n_inner`` (null: 4h). GELU MLP, LayerNorm, learned positions, biases, tied embeddings.
- GPT-NeoX (``gpt_neox``): ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
  ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``; ``tie_word_embeddings``
  (default false). GELU, LayerNorm, rotary, biases.
- Llama / Mistral / Qwen2 (``llama``, ``mistral``, ``qwen2``): the NeoX keys plus
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

import json
from pathlib import Path

from simulator.checks import positive_int
from simulator.errors import SpecError
from simulator.workload.transformer import (ActivationKind, BiasKind, DtypePolicy, NormKind, PositionKind,
                                            TransformerSpec)

_LLAMA_LIKE = ("llama", "mistral", "qwen2")
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
        return positive_int(f"{where}: {key}", cfg[key])
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


def spec_from_hf_config(cfg: dict, name: str, where: str = "config.json") -> TransformerSpec:
    """Build a spec from a parsed config dict; ``where`` prefixes error fields (the file path)."""
    if not isinstance(cfg, dict):
        raise SpecError(where, "must be a JSON object")
    model_type = cfg.get("model_type") or ("gpt2" if "n_embd" in cfg else "")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise SpecError(f"{where}: model_type", f"unsupported {model_type or '(missing)'!r}; supported: "
                        f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    get = _reader(cfg, where, model_type)
    dtype_text = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if dtype_text not in _DTYPES:
        raise SpecError(f"{where}: torch_dtype", f"unknown {dtype_text!r}; known: {', '.join(_DTYPES)}")
    common = {"name": name, "vocab": get("vocab_size"), "dtype": _DTYPES[dtype_text], "source": where,
              "dropout": _dropout(cfg, where, model_type)}
    if model_type == "gpt2":
        positions = get("n_positions")
        return TransformerSpec(hidden=get("n_embd"), layers=get("n_layer"), heads=get("n_head"),
                               ffn=get("n_inner", required=False), seq_len=positions, max_positions=positions,
                               activation=ActivationKind.GELU, norm=NormKind.LAYERNORM,
                               position=PositionKind.LEARNED, bias=BiasKind.ALL,
                               tied_embeddings=bool(cfg.get("tie_word_embeddings", True)), **common)
    shape = {"hidden": get("hidden_size"), "layers": get("num_hidden_layers"),
             "heads": get("num_attention_heads"), "ffn": get("intermediate_size"),
             "seq_len": get("max_position_embeddings"), "position": PositionKind.ROTARY,
             "tied_embeddings": bool(cfg.get("tie_word_embeddings", False))}
    if model_type == "gpt_neox":
        return TransformerSpec(activation=ActivationKind.GELU, norm=NormKind.LAYERNORM, bias=BiasKind.ALL,
                               **shape, **common)
    qkv_bias = model_type == "qwen2" or bool(cfg.get("attention_bias", False))
    return TransformerSpec(kv_heads=get("num_key_value_heads", required=False),
                           head_dim=get("head_dim", required=False), activation=ActivationKind.SWIGLU,
                           norm=NormKind.RMSNORM, bias=BiasKind.QKV if qkv_bias else BiasKind.NONE,
                           **shape, **common)


def load_hf_config(path: str | Path) -> TransformerSpec:
    """Read ``path`` (a config.json) into a spec named after the file's directory (or ``_name_or_path``)."""
    path = Path(path)
    where = str(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecError(where, f"cannot read: {err.strerror or err}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(where, f"not valid JSON ({err.msg} at line {err.lineno})") from None
    name = (cfg.get("_name_or_path") if isinstance(cfg, dict) else None) or (
        path.parent.name if path.name == "config.json" and path.parent.name else path.stem.removesuffix(".config"))
    return spec_from_hf_config(cfg, str(name), where)
