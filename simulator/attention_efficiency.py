"""Achieved efficiency of the fused (flash) attention core, by kernel backend, pass and sequence length.

A fused attention kernel runs well below the GEMM plateau of :mod:`simulator.gemm_efficiency` (the
softmax, the online rescaling and the causal mask's partial tiles sit between its two matmuls), and
differently forward and backward. The published kernel benchmarks give achieved TFLOP/s per
(backend, pass, causal mask, head dim, sequence length); this module turns them into a fraction of the
device's dense BF16 peak, ``e = published TFLOP/s ÷ peak_tflops.bf16``, and times a kernel as

    time = F_pub / (peak · clock_ratio · e(backend, pass, causal, s))

where ``F_pub`` is the kernel's work *as the benchmark counts it* (flash-attention's
``benchmarks/benchmark_flash_attention.py`` ``flops()``, used by the FA2 and FA3 papers'
figures [src: fa2-benchmark-flops]): forward ``4·b·s²·a·d``, halved with a causal mask, backward 2.5× the
forward (it recomputes QKᵀ). trainplan counts the core as ``4·b·s²·q/t`` forward with no causal
halving and 2× that backward (:mod:`simulator.workload.ops`, as Narayanan et al. count), so

    F_pub(fwd) = F_model · c,    F_pub(bwd) = F_model / 2 · 2.5 · c,    c = ½ causal, 1 otherwise.

``e(s)`` is piecewise-linear in log2(s) between the published sequence lengths and flat outside them.
A kernel reads the curve of the nearest published head dim (:func:`nearest_head_dim`). A causal backward without its own figure reads the non-causal one
(:data:`CAUSAL_BWD_AS_NON_CAUSAL`). A device without ``attention_efficiency`` (or without a curve for the
backend a framework runs) keeps today's rule, the matmul-efficiency curve at the kernel's FLOPs, and
says so (:func:`fallback_reason`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from simulator.enum_kind import Kind
from simulator.errors import SpecError


class AttentionBackend(Kind):
    """Which fused-attention kernel a framework runs (chosen by the framework profile)."""

    FLASH_ATTENTION_2 = "flash-attention-2"
    """Dao's FlashAttention-2 kernels: PyTorch SDPA's ``FLASH_ATTENTION`` backend (the default on
    A100/H100 from torch 2.5.1, after cuDNN attention was made opt-in [src: pytorch-sdpa-cudnn-optin]),
    ``flash_attn`` itself (DeepSpeed/Megatron-DeepSpeed models)."""
    CUDNN = "cudnn"
    """cuDNN fused attention: Transformer Engine's ``FusedAttention`` backend, which Megatron-Core/NeMo
    use through TE's ``DotProductAttention`` on Hopper [src: nemo-te-attention]."""


class AttentionPass(Kind):
    """Forward or backward kernel of the fused attention core."""

    FWD = "fwd"
    BWD = "bwd"


PUBLISHED_BWD_OVER_FWD = 2.5
"""Backward FLOPs ÷ forward FLOPs as the flash-attention benchmarks count them (``mode="bwd"``:
``2.5 · f``; the backward's five matmuls against the forward's two) [src: fa2-benchmark-flops]."""

MODEL_BWD_OVER_FWD = 2.0
"""Backward ÷ forward FLOPs as trainplan counts the fused core (:func:`simulator.workload.kernels.backward`)."""

CAUSAL_WORK_FRACTION = 0.5
"""Fraction of the full ``s × s`` work a causal kernel does, as the benchmarks count it
(``// (2 if causal else 1)``) [src: fa2-benchmark-flops]."""

def nearest_head_dim(published: list[int], head_dim: int) -> int:
    """(assumption) The published head dim a kernel of ``head_dim`` reads: the nearest, ties to the larger
    (no interpolation between head dims: FA3 paper Figure 5, FA2 forward non-causal at 16k, 324 TFLOP/s with
    head dim 64 and 370 with 128 [src: fa3-paper], is not linear in anything a model states)."""
    return min(published, key=lambda d: (abs(d - head_dim), -d))

CAUSAL_BWD_AS_NON_CAUSAL = True
"""(assumption) A causal backward with no published figure runs at the non-causal backward's
efficiency on its (halved) work: the FA3 paper's backward figure is non-causal only [src: fa3-paper]."""


@dataclass(frozen=True, kw_only=True)
class AttentionCall:
    """What a fused-attention kernel needs to be timed by its shape."""

    backend: AttentionBackend
    direction: AttentionPass
    seq_len: int
    """Key/query length one kernel call sees (``s``, or ``s/cp`` on a ring context-parallel rank)."""
    head_dim: int
    causal: bool
    work_fraction: float | None = None
    """The fraction ``c`` of trainplan's count that the kernel computes, where it is not the mask's: a context-parallel
    ring's off-diagonal steps are non-causal half blocks (:mod:`simulator.workload.ring_steps`), ½ of the model's
    full-block count at the non-causal rate. None: ½ causal, 1 otherwise."""

    def published_flops(self, model_flops: float) -> float:
        """The kernel's work as the benchmarks count it, from trainplan's count (module docstring)."""
        c = self.work_fraction if self.work_fraction is not None else CAUSAL_WORK_FRACTION if self.causal else 1.0
        if self.direction is AttentionPass.BWD:
            return model_flops / MODEL_BWD_OVER_FWD * PUBLISHED_BWD_OVER_FWD * c
        return model_flops * c


@dataclass(frozen=True, kw_only=True)
class AttentionCurve:
    """Published efficiency of one (backend, pass, causal) kernel against sequence length."""

    backend: AttentionBackend
    direction: AttentionPass
    causal: bool
    head_dim: int
    """Head dimension the figures were measured at."""
    points: tuple[tuple[int, float], ...]
    """(sequence length, published TFLOP/s) with increasing lengths; each rate at most the device's BF16
    peak (checked when read)."""

    def efficiency(self, seq_len: int, bf16_peak_tflops: float) -> float:
        """Fraction of the dense BF16 peak at ``seq_len``: :meth:`tflops` ÷ the peak."""
        return self.tflops(seq_len) / bf16_peak_tflops

    def tflops(self, seq_len: int) -> float:
        """Published TFLOP/s at ``seq_len``: piecewise-linear in log2(seq_len) between the points, flat
        outside them."""
        pts = self.points
        if seq_len <= pts[0][0]:
            return pts[0][1]
        for (s0, e0), (s1, e1) in zip(pts, pts[1:]):
            if seq_len <= s1:
                w = (math.log2(seq_len) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
                return e0 + w * (e1 - e0)
        return pts[-1][1]


@dataclass(frozen=True, kw_only=True)
class AttentionEfficiency:
    """A device's published fused-attention efficiencies (``device.attention_efficiency``)."""

    curves: tuple[AttentionCurve, ...]
    source: str
    """Where the figures come from (paper figure, or our measurement with date and command)."""

    def curve(self, call: AttentionCall) -> AttentionCurve | None:
        """The curve for ``call``: its own causal setting, else (a backward) the non-causal one
        (:data:`CAUSAL_BWD_AS_NON_CAUSAL`), at the nearest published head dim (:func:`nearest_head_dim`);
        None if the device has no figure for its backend and pass."""
        def find(causal: bool) -> AttentionCurve | None:
            same = [c for c in self.curves if c.backend is call.backend and c.direction is call.direction
                    and c.causal is causal]
            if not same:
                return None
            dim = nearest_head_dim([c.head_dim for c in same], call.head_dim)
            return next(c for c in same if c.head_dim == dim)
        found = find(call.causal)
        if found is None and call.causal and call.direction is AttentionPass.BWD and CAUSAL_BWD_AS_NON_CAUSAL:
            found = find(False)
        return found


def attention_compute_s(call: AttentionCall, model_flops: float, curve: AttentionCurve,
                        clock_ratio: float = 1.0) -> float:
    """Compute seconds of a fused-attention kernel of ``model_flops`` (trainplan's count) on its published
    curve: ``F_pub / (R(s) · 1e12 · clock_ratio)`` (module docstring)."""
    return call.published_flops(model_flops) / (curve.tflops(call.seq_len) * 1e12 * clock_ratio)


def fallback_reason(efficiency: AttentionEfficiency | None, call: AttentionCall) -> str | None:
    """Why a kernel is timed on the matmul curve instead (None: it has a published curve)."""
    if efficiency is None:
        return "the device gives no attention_efficiency (no kernel-level source): matmul curve at its FLOPs"
    if efficiency.curve(call) is None:
        return (f"no {call.backend.value} {call.direction.value} figure for this device: matmul curve at its FLOPs")
    return None


def attention_efficiency_from_dict(d: object, field: str, bf16_peak_tflops: float | None) -> AttentionEfficiency:
    """Read ``device.attention_efficiency``: ``{source: str, curves: [{backend, pass, causal, head_dim,
    tflops_by_seq: {seq_len: TFLOP/s}}]}``; each rate is checked against the device's BF16 peak."""
    if not isinstance(d, dict) or set(d) - {"source", "curves"}:
        raise SpecError(field, "give {source: '...', curves: [{backend, pass, causal, head_dim, tflops_by_seq}]}")
    if bf16_peak_tflops is None:
        raise SpecError(field, "is relative to the bf16 peak; give peak_tflops.bf16")
    source = d.get("source")
    if not isinstance(source, str) or not source:
        raise SpecError(f"{field}.source", "give where the figures come from (paper figure or measurement)")
    items = d.get("curves")
    if not isinstance(items, list) or not items:
        raise SpecError(f"{field}.curves", "give at least one {backend, pass, causal, head_dim, tflops_by_seq} entry")
    curves = tuple(_curve(item, f"{field}.curves[{i}]", bf16_peak_tflops) for i, item in enumerate(items))
    keys = [(c.backend, c.direction, c.causal, c.head_dim) for c in curves]
    if len(set(keys)) != len(keys):
        raise SpecError(f"{field}.curves", "one entry per (backend, pass, causal, head_dim)")
    return AttentionEfficiency(curves=curves, source=source)


def _enum(value: object, kind: type[Enum], field: str) -> Enum:
    try:
        return kind(value)
    except ValueError:
        raise SpecError(field, f"got {value!r}; known: {', '.join(k.value for k in kind)}") from None


def _curve(item: object, field: str, peak: float) -> AttentionCurve:
    if not isinstance(item, dict) or set(item) != {"backend", "pass", "causal", "head_dim", "tflops_by_seq"}:
        raise SpecError(field, "give exactly backend, pass, causal, head_dim and tflops_by_seq")
    if not isinstance(item["causal"], bool):
        raise SpecError(f"{field}.causal", f"must be true or false, got {item['causal']!r}")
    head_dim = item["head_dim"]
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0:
        raise SpecError(f"{field}.head_dim", f"must be a positive integer, got {head_dim!r}")
    table = item["tflops_by_seq"]
    if not isinstance(table, dict) or not table:
        raise SpecError(f"{field}.tflops_by_seq", "give {seq_len: TFLOP/s, ...}")
    points = []
    for key, tflops in table.items():
        seq = int(key) if isinstance(key, str) and key.isdigit() else key  # a JSON file's keys are strings
        if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0:
            raise SpecError(f"{field}.tflops_by_seq", f"sequence lengths must be positive integers, got {key!r}")
        if not isinstance(tflops, (int, float)) or isinstance(tflops, bool) or not 0 < tflops <= peak:
            raise SpecError(f"{field}.tflops_by_seq.{seq}", f"must be in (0, {peak:g}] TFLOP/s (the bf16 peak), "
                            f"got {tflops!r}")
        points.append((seq, float(tflops)))
    points.sort()
    if len({seq for seq, _ in points}) != len(points):
        raise SpecError(f"{field}.tflops_by_seq", "one rate per sequence length")
    return AttentionCurve(backend=_enum(item["backend"], AttentionBackend, f"{field}.backend"),
                          direction=_enum(item["pass"], AttentionPass, f"{field}.pass"),
                          causal=item["causal"], head_dim=head_dim, points=tuple(points))


def attention_efficiency_to_dict(efficiency: AttentionEfficiency) -> dict:
    """The inverse of :func:`attention_efficiency_from_dict` (plain YAML/JSON-safe values)."""
    return {"source": efficiency.source,
            "curves": [{"backend": c.backend.value, "pass": c.direction.value, "causal": c.causal,
                        "head_dim": c.head_dim, "tflops_by_seq": {seq: tflops for seq, tflops in c.points}} for c in efficiency.curves]}
