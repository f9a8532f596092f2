"""How a plan file names its model and its cluster: a preset reference, or the full shape or spec.

``model``: ``{"preset": name, "seq": n}`` when the workload is a preset at some sequence length, else
``{"transformer": {...}}`` (with its ``moe`` / ``mla`` records) or ``{"layers": {...}}``;
``cluster``: ``{"preset": name, "nodes": n}`` when the cluster is that preset at n nodes, else
``{"spec": {...cluster file...}}``. Reading checks every field and names the wrong one
(``plan.model.transformer.moe.experts``); the plan as a whole is in :mod:`simulator.plan_file`.
"""

from __future__ import annotations

from dataclasses import fields
from enum import Enum
from typing import get_type_hints

from simulator.checks import known_fields
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.io import cluster_to_dict, load_cluster
from simulator.cluster.presets import preset_names
from simulator.errors import SpecError
from simulator.strategy.flat import plain
from simulator.workload import LayerListWorkload, TransformerSpec, get_preset, layer_list_from_dict, model_names
from simulator.workload.mla import MLASpec
from simulator.workload.moe import MoESpec


# --- the model ------------------------------------------------------------------------------------

_PARTS = {"moe": MoESpec, "mla": MLASpec}
"""Fields of a transformer that are records of their own (mixture of experts, latent attention)."""


def _part_to_dict(value):
    return None if value is None else {f.name: plain(getattr(value, f.name)) for f in fields(value)}


def _part_from_dict(name: str, value):
    if value is None:
        return None
    kind, where = _PARTS[name], f"plan.model.transformer.{name}"
    known_fields(where, value, tuple(f.name for f in fields(kind)))
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    try:
        return kind(**values)
    except TypeError as err:
        raise SpecError(where, f"incomplete ({err})") from None


def _transformer_to_dict(spec: TransformerSpec) -> dict:
    return {f.name: _part_to_dict(getattr(spec, f.name)) if f.name in _PARTS else plain(getattr(spec, f.name))
            for f in fields(spec)}


def _transformer_from_dict(d: dict) -> TransformerSpec:
    hints = get_type_hints(TransformerSpec)
    names = tuple(f.name for f in fields(TransformerSpec))
    known_fields("plan.model.transformer", d, names)
    values = {}
    for name, value in d.items():
        if name in _PARTS:
            values[name] = _part_from_dict(name, value)
            continue
        kind = hints[name]
        enum = next((t for t in getattr(kind, "__args__", (kind,)) if isinstance(t, type) and issubclass(t, Enum)),
                    None)
        if enum is not None and value is not None:
            try:
                value = enum(value)
            except ValueError:
                raise SpecError(f"plan.model.transformer.{name}", f"unknown value {value!r}; known: "
                                f"{', '.join(str(m.value) for m in enum)}") from None
        values[name] = value
    try:
        return TransformerSpec(**values)
    except TypeError as err:
        raise SpecError("plan.model.transformer", f"incomplete shape ({err})") from None
    except SpecError as err:
        raise SpecError(f"plan.model.transformer.{err.field.removeprefix('model.')}", err.problem) from None


def model_to_dict(workload) -> dict:
    """A preset reference when ``workload`` is a preset at some sequence length, else the full shape."""
    if isinstance(workload, TransformerSpec):
        if workload.name in model_names():
            preset = get_preset(workload.name)
            if preset.with_seq(workload.seq_len) == workload or preset == workload:
                return {"preset": workload.name, "seq": workload.seq_len}
        return {"transformer": _transformer_to_dict(workload)}
    if isinstance(workload, LayerListWorkload):
        return {"layers": workload.to_dict()}
    raise SpecError("model", f"a plan needs a transformer or a layer list, got {type(workload).__name__}")


def model_from_dict(d: dict):
    known_fields("plan.model", d, ("preset", "seq", "transformer", "layers"))
    kinds = [k for k in ("preset", "transformer", "layers") if k in d]
    if len(kinds) != 1:
        raise SpecError("plan.model", "give exactly one of preset (with seq), transformer or layers")
    if "preset" in d:
        spec = get_preset(str(d["preset"]))
        return spec if d.get("seq") is None else spec.with_seq(d["seq"])
    if "seq" in d:
        raise SpecError("plan.model.seq", "goes with a preset; a full shape carries its own seq_len")
    if "transformer" in d:
        return _transformer_from_dict(d["transformer"])
    return layer_list_from_dict(d["layers"])


# --- the cluster ----------------------------------------------------------------------------------

def cluster_ref(cluster, preset: str | None = None) -> dict:
    """``{"preset": name, "nodes": n}`` when ``cluster`` is that preset at n nodes, else the full spec."""
    name = preset or cluster.name
    if name in preset_names() and load_cluster(name, nodes=cluster.nodes) == cluster:
        return {"preset": name, "nodes": cluster.nodes}
    return {"spec": cluster_to_dict(cluster)}


def cluster_from_ref(d: dict):
    known_fields("plan.cluster", d, ("preset", "nodes", "spec"))
    if ("preset" in d) == ("spec" in d):
        raise SpecError("plan.cluster", "give a preset (with nodes) or a full spec")
    if "preset" in d:
        return load_cluster(str(d["preset"]), nodes=d.get("nodes"))
    if "nodes" in d:
        raise SpecError("plan.cluster.nodes", "goes with a preset; a full spec carries its own node count")
    return cluster_from_dict(d["spec"])
