"""Hugging Face config.json loading: the sample configs in tests/data (written from published shapes)."""

import json
from pathlib import Path

import pytest

from simulator.errors import SpecError
from simulator.workload import (ActivationKind, BiasKind, DtypePolicy, LayerListWorkload, PositionKind,
                                load_hf_config, load_model)

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("file,params", [
    ("gpt2.config.json", 124_439_808),          # GPT-2 small (Radford et al. 2019), HF's published count
    ("pythia-160m.config.json", 162_322_944),   # Pythia-160M (Biderman et al. 2023)
    ("llama-2-7b.config.json", 6_738_415_616),  # Llama-2-7B
    ("qwen2-0.5b.config.json", 494_032_768),    # Qwen2-0.5B
    ("mistral-7b.config.json", 7_241_732_096),  # Mistral-7B-v0.1
])
def test_sample_configs_give_published_param_counts(file, params):
    assert load_model(str(DATA / file)).params == params


def test_families_map_to_the_right_architecture():
    gpt2 = load_hf_config(DATA / "gpt2.config.json")
    assert (gpt2.position, gpt2.tied_embeddings, gpt2.ffn_size, gpt2.dtype) == (
        PositionKind.LEARNED, True, 3072, DtypePolicy.FP32)
    mistral = load_hf_config(DATA / "mistral-7b.config.json")
    assert (mistral.activation, mistral.n_kv_heads, mistral.bias) == (ActivationKind.SWIGLU, 8, BiasKind.NONE)
    assert load_hf_config(DATA / "qwen2-0.5b.config.json").bias is BiasKind.QKV
    assert load_hf_config(DATA / "pythia-160m.config.json").name == "pythia-160m"


def _write(tmp_path, cfg) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_missing_key_is_named(tmp_path):
    cfg = json.loads((DATA / "llama-2-7b.config.json").read_text())
    del cfg["intermediate_size"]
    with pytest.raises(SpecError) as err:
        load_model(_write(tmp_path, cfg))
    assert "intermediate_size" in str(err.value) and "missing" in str(err.value)


def test_bad_value_type_is_named(tmp_path):
    cfg = json.loads((DATA / "gpt2.config.json").read_text()) | {"n_head": "twelve"}
    with pytest.raises(SpecError, match="n_head"):
        load_model(_write(tmp_path, cfg))


def test_unsupported_model_type_lists_supported(tmp_path):
    with pytest.raises(SpecError, match="gpt_neox"):
        load_model(_write(tmp_path, {"model_type": "t5", "d_model": 512}))


def test_malformed_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_model(str(path))


def test_missing_file_and_layer_list():
    with pytest.raises(SpecError, match="no such file"):
        load_model("/nonexistent/config.json")
    mlp = load_model(str(DATA / "small-mlp.layers.json"))
    assert isinstance(mlp, LayerListWorkload)
    assert mlp.params == 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10


def test_dropout_is_read_per_family_with_transformers_defaults(tmp_path):
    """GPT-2 resid_pdrop (default 0.1 in GPT2Config), Llama attention_dropout (default 0.0)."""
    from simulator.workload.hf import spec_from_hf_config

    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 32, "vocab_size": 100}
    assert spec_from_hf_config(gpt2, "g").dropout == 0.1
    assert spec_from_hf_config({**gpt2, "resid_pdrop": 0.0}, "g").dropout == 0.0
    llama = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 128, "max_position_embeddings": 32, "vocab_size": 100}
    assert spec_from_hf_config(llama, "l").dropout == 0.0
    with pytest.raises(SpecError, match="resid_pdrop"):
        spec_from_hf_config({**gpt2, "resid_pdrop": 1.5}, "g")
