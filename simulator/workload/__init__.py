"""Workloads: what is trained. A transformer spec (presets, Hugging Face configs), a generic layer
list, or a bare parameter count; with parameter counts, FLOPs and per-kernel bytes.

Public API (re-exported here): :class:`TransformerSpec` and its enums, :class:`Recompute` and the
FLOPs functions, :class:`LayerSpec`, :class:`LayerListWorkload`, :class:`ParamCountModel`,
:class:`Workload` (the protocol every kind implements, with the records its chunk query uses),
:func:`load_model`, :func:`model_names`, :func:`load_hf_config`.
"""

from simulator.workload.flops import (Recompute, fwd_flops_per_token, layer_fwd_flops, layer_fwd_flops_per_token,
                                      logits_fwd_flops, model_flops_per_token, narayanan_flops_per_iteration,
                                      recompute_flops_per_token, train_flops_per_token)
from simulator.workload.hf import load_hf_config, spec_from_hf_config
from simulator.workload.layers import (LayerListWorkload, LayerSpec, ParamCountModel, layer_list_from_dict,
                                       parse_param_count, transformer_layers)
from simulator.workload.protocol import ChunkLoad, ChunkSlice, ComputeOptions, WorkUnit, Workload, no_compute
from simulator.workload.presets import PUBLISHED_PARAMS, get_preset, model_names
from simulator.workload.registry import load_model
from simulator.workload.transformer import (ActivationKind, BiasKind, DtypePolicy, NormKind, PositionKind,
                                            TransformerSpec)

__all__ = [
    "ActivationKind", "BiasKind", "ChunkLoad", "ChunkSlice", "ComputeOptions", "DtypePolicy", "LayerListWorkload", "LayerSpec", "NormKind",
    "PUBLISHED_PARAMS", "ParamCountModel", "PositionKind", "Recompute", "TransformerSpec", "WorkUnit", "Workload",
    "fwd_flops_per_token", "get_preset", "layer_fwd_flops", "layer_fwd_flops_per_token", "layer_list_from_dict",
    "load_hf_config", "load_model", "logits_fwd_flops", "model_flops_per_token", "model_names",
    "no_compute",
    "narayanan_flops_per_iteration", "parse_param_count", "recompute_flops_per_token", "spec_from_hf_config",
    "train_flops_per_token", "transformer_layers",
]
