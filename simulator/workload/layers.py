"""Workloads that are not (or not only) a transformer: a generic list of layers, or a bare size.

- :class:`LayerListWorkload`: any model as a list of layers, each with its parameters, forward FLOPs
  and activation bytes per sample (a small CNN or MLP; the executor's real torch model produces
  this list, since only ``executor/`` imports torch).
- :class:`ParamCountModel`: only a parameter count (``--params 7.5e9``), enough for model-state
  memory questions (ZeRO stages, offload) and gradient-communication volume.
All three implement :class:`simulator.workload.protocol.Workload` (a parameter count as far as it
can: model states only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from simulator.checks import non_negative_number, positive_int
from simulator.errors import SpecError
from simulator.workload import summary
from simulator.workload.chunks import layer_list_chunk_load
from simulator.workload.flops import Recompute, layer_fwd_flops, logits_fwd_flops
from simulator.workload.protocol import ChunkLoad, ChunkSlice, ComputeOptions, no_compute, no_experts
from simulator.workload.transformer import DtypePolicy, TransformerSpec

MAX_PARAMS = 10**15
"""The largest parameter count accepted (a quadrillion): over 2,000× Llama 3.1's 405 billion
[src: llama3-2024], so no model trained today is refused, while ``1e400`` (infinite as a float) is."""
MAX_PER_SAMPLE = 1e18
"""The largest forward FLOPs or bytes one layer may have per sample: about 10× Llama 3.1 405B's whole
forward pass on a 131,072-token sample (2 · 4.05e11 · 131072 ≈ 1.1e17 FLOPs) [src: llama3-2024],
so sums over layers and steps stay finite floats."""


@dataclass(frozen=True, kw_only=True)
class LayerSpec:
    """One layer of a generic model, per sample (one input example)."""

    name: str
    params: int
    """Trainable parameters of the layer."""
    fwd_flops: float
    """Forward FLOPs per sample (2 per multiply-add); backward is taken as 2× this."""
    activation_bytes: int
    """Bytes this layer keeps for backward per sample."""
    output_bytes: int = 0
    """Bytes of the layer's output per sample (what a pipeline stage boundary sends)."""

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("layers[].name", "must be a non-empty string")
        for field_name in ("params", "fwd_flops", "activation_bytes", "output_bytes"):
            value = non_negative_number(f"layers[{self.name}].{field_name}", getattr(self, field_name))
            limit = MAX_PARAMS if field_name == "params" else MAX_PER_SAMPLE
            if not value <= limit:  # inf; an int too large for a float is compared exactly
                shown = f", got {value}" if isinstance(value, float) else ""  # str() of a 5000-digit int raises
                raise SpecError(f"layers[{self.name}].{field_name}", f"must be at most {limit:.0e}{shown}")


@dataclass(frozen=True, kw_only=True)
class LayerListWorkload:
    """A model given as a list of layers (executed in order)."""

    name: str
    layers: tuple[LayerSpec, ...]
    dtype: DtypePolicy = DtypePolicy.FP32
    source: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("model.name", "must be a non-empty string")
        if not self.layers:
            raise SpecError("model.layers", "give at least one layer")

    @property
    def params(self) -> int:
        return int(sum(layer.params for layer in self.layers))

    @property
    def fwd_flops_per_sample(self) -> float:
        return float(sum(layer.fwd_flops for layer in self.layers))

    @property
    def train_flops_per_sample(self) -> float:
        """Forward + backward (2× forward) FLOPs per sample."""
        return 3.0 * self.fwd_flops_per_sample

    # --- the workload protocol (simulator.workload.protocol) -----------------------------------
    @property
    def layer_count(self) -> int:
        """Layers a pipeline splits: every entry of the list."""
        return len(self.layers)

    @property
    def seq_len(self) -> int:
        """Tokens per sample: 1 (a sample is one input example, not a sequence)."""
        return 1

    @property
    def has_compute(self) -> bool:
        return True

    @property
    def has_activation_shapes(self) -> bool:
        return False

    def check_tp(self, tp: int) -> None:
        """A layer list names no heads or matrices to split: tensor parallelism 1 only."""
        if tp != 1:
            raise SpecError("tp", f"{tp}: a layer-list workload has no heads to split; use tp 1")

    def check_ep(self, ep: int) -> None:
        """A layer list names no experts: expert parallelism 1 only."""
        no_experts(ep)

    def with_seq(self, seq_len: int) -> "LayerListWorkload":
        raise SpecError("seq", "a layer list has no sequence length; --seq applies to transformers")

    def chunk_load(self, chunk: ChunkSlice, options: ComputeOptions) -> ChunkLoad:
        return layer_list_chunk_load(self, chunk, options)

    def step_flops(self, tokens: int, recompute: Recompute, *, flash_attention: bool) -> tuple[float, float]:
        """(model, hardware) FLOPs of ``tokens`` samples: 3 × forward each, plus one more forward
        under full recomputation (a layer list has no attention core for selective to recompute)."""
        model = self.train_flops_per_sample * tokens
        extra = self.fwd_flops_per_sample * tokens if recompute is Recompute.FULL else 0.0
        return model, model + extra

    def summary(self) -> dict:
        return summary.layer_list_summary(self)

    def describe(self) -> str:
        return summary.describe_layer_list(self)

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype.value, "source": self.source,
                "layers": [{"name": l.name, "params": l.params, "fwd_flops": l.fwd_flops,
                            "activation_bytes": l.activation_bytes, "output_bytes": l.output_bytes}
                           for l in self.layers]}


def layer_list_from_dict(d: dict) -> LayerListWorkload:
    """Read ``{name, dtype?, layers: [{name, params, fwd_flops, activation_bytes, output_bytes?}]}``."""
    if not isinstance(d.get("layers"), list):
        raise SpecError("model.layers", "must be a list of {name, params, fwd_flops, activation_bytes}")
    layers = []
    for i, item in enumerate(d["layers"]):
        if not isinstance(item, dict):
            raise SpecError(f"model.layers[{i}]", f"must be a mapping, got {item!r}")
        for key in ("params", "fwd_flops", "activation_bytes"):
            if key not in item:
                raise SpecError(f"model.layers[{i}].{key}", "missing")
        layers.append(LayerSpec(name=str(item.get("name", f"layer{i}")), params=item["params"],
                                fwd_flops=item["fwd_flops"], activation_bytes=item["activation_bytes"],
                                output_bytes=item.get("output_bytes", 0)))
    dtype_text = d.get("dtype", "fp32")
    try:
        dtype = DtypePolicy(dtype_text)
    except ValueError:
        raise SpecError("model.dtype", f"unknown {dtype_text!r}; known: "
                        f"{', '.join(p.value for p in DtypePolicy)}") from None
    return LayerListWorkload(name=str(d.get("name", "layers")), layers=tuple(layers), dtype=dtype,
                             source=str(d.get("source", "")))


def transformer_layers(spec: TransformerSpec, seq: int | None = None) -> LayerListWorkload:
    """A transformer as a generic layer list: embedding, ``l`` blocks, head (per sample of s tokens).

    Activation bytes per block use Korthikanti et al. 2022's s·h·(34 + 5·a·s/h) for 16-bit
    activations (GPT shapes, no parallelism, no recomputation) — an approximation for other shapes.
    """
    s = spec.seq_len if seq is None else seq
    h, a = spec.hidden, spec.heads
    block_act = int(s * h * (34 + 5 * a * s / h))
    out = s * h * spec.dtype.activation_bytes
    layers = [LayerSpec(name="embedding", params=spec.embedding_params, fwd_flops=0.0,
                        activation_bytes=out, output_bytes=out)]
    layers += [LayerSpec(name=f"block{i}", params=spec.layer_params, fwd_flops=s * layer_fwd_flops(spec, s),
                         activation_bytes=block_act, output_bytes=out) for i in range(spec.layers)]
    layers.append(LayerSpec(name="head", params=spec.head_params, fwd_flops=s * logits_fwd_flops(spec),
                            activation_bytes=s * spec.vocab * 4, output_bytes=0))
    return LayerListWorkload(name=spec.name, layers=tuple(layers), dtype=spec.dtype, source=spec.source)


_COUNT_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBT]?)\s*$", re.IGNORECASE)
_COUNT_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def parse_param_count(text: str) -> int:
    """``"7.5e9"``, ``"7.5B"``, ``"350M"`` → parameters (decimal suffixes K, M, B, T)."""
    m = _COUNT_RE.match(str(text))
    if not m and str(text).strip().startswith("-"):
        raise SpecError("params", f"must be a positive parameter count, got {text!r}")
    if not m:
        raise SpecError("params", f"cannot read a parameter count from {text!r}; write e.g. 7.5e9 or 7.5B")
    value = float(m.group(1)) * _COUNT_SUFFIX[m.group(2).upper()]
    if value < 1:
        raise SpecError("params", f"must be at least 1, got {text!r}")
    if not value <= MAX_PARAMS:  # also inf, from 1e400
        raise SpecError("params", f"{text!r} is more than the limit of {MAX_PARAMS:.0e} parameters")
    return int(round(value))


@dataclass(frozen=True, kw_only=True)
class ParamCountModel:
    """A model known only by its parameter count: valid for model-state-only questions."""

    params: int
    name: str = ""
    dtype: DtypePolicy = DtypePolicy.BF16_MIXED

    def __post_init__(self) -> None:
        positive_int("params", self.params)
        if self.params > MAX_PARAMS:
            raise SpecError("params", f"must be at most {MAX_PARAMS:.0e} parameters")
        if not self.name:
            object.__setattr__(self, "name", f"{self.params:.3g} params")

    # --- the workload protocol, as far as a bare count goes -----------------------------------------
    @property
    def layer_count(self) -> None:
        """No layers known: a pipeline cannot split it (pipeline degree 1 only)."""
        return None

    @property
    def seq_len(self) -> int:
        """1: a bare count has no sequence (model states do not depend on one)."""
        return 1

    @property
    def has_compute(self) -> bool:
        return False

    @property
    def has_activation_shapes(self) -> bool:
        return False

    def check_tp(self, tp: int) -> None:
        """Any degree: the states are taken as split evenly (no shapes to check against)."""

    def check_ep(self, ep: int) -> None:
        """A bare count names no experts: expert parallelism 1 only."""
        no_experts(ep)

    def with_seq(self, seq_len: int) -> "ParamCountModel":
        """Itself: model states do not depend on the sequence length."""
        return self

    def chunk_load(self, chunk: ChunkSlice, options: ComputeOptions) -> ChunkLoad:
        raise no_compute()

    def step_flops(self, tokens: int, recompute: Recompute, *, flash_attention: bool) -> tuple[float, float]:
        raise no_compute()

    def summary(self) -> dict:
        return summary.param_count_summary(self)

    def describe(self) -> str:
        return summary.describe_param_count(self)
