"""Find a workload by name or file: an embedded preset, a Hugging Face config.json, or a layer list.

A ``.json`` file with a ``layers`` list is a :class:`LayerListWorkload`; any other JSON file is
read as a Hugging Face config; anything else is a preset name. Unknown names list the presets.
"""

from __future__ import annotations

from pathlib import Path

from simulator.errors import SpecError
from simulator.jsonio import read_json
from simulator.workload.hf import hf_model_name, spec_from_hf_config
from simulator.workload.layers import LayerListWorkload, layer_list_from_dict
from simulator.workload.presets import get_preset, model_names
from simulator.workload.transformer import TransformerSpec

__all__ = ["load_model", "model_names"]


def _looks_like_path(text: str) -> bool:
    return text.endswith(".json") or "/" in text or Path(text).is_file()


def load_model(name_or_path: str) -> TransformerSpec | LayerListWorkload:
    """A preset by name (case-insensitive) or a workload read from a JSON file."""
    text = str(name_or_path).strip()
    if not text:
        raise SpecError("model", f"give a model name or a config.json path; known: {', '.join(model_names())}")
    if not _looks_like_path(text):
        return get_preset(text)
    path = Path(text)
    if not path.exists():
        raise SpecError("model", f"no such file {text!r}; or use a preset: {', '.join(model_names())}")
    data = read_json(path, "model")  # a directory, binary or malformed file: one SpecError
    if isinstance(data.get("layers"), list):
        return layer_list_from_dict(data)
    return spec_from_hf_config(data, hf_model_name(path, data), str(path))
