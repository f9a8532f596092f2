"""What a GPU draws per kernel class, and how much a power limit slows it (the data; the rule is :mod:`simulator.power`).

A GPU held at its power limit lowers its SM clock until it draws the limit. On an H200 SXM (700 W) we
measured each kernel class interleaved with idle time, so that the card stayed under the limit and the
draw of the class busy all the time could be read off (``idle + (measured − idle) / busy share``)
[src: own-h200-2026-11-25]: dense BF16 GEMMs ~960 W, fused attention ~944 W, GEMMs on the misaligned
CUTLASS fallback ~430 W, memory-bound kernels ~600 W, the GPU awake and idle 125 W. Dense GEMMs and
attention alone therefore run capped: 8192³ GEMMs at 671 TFLOP/s and 1,485-1,500 MHz, against 797 at
1,980 MHz with idle gaps (docs/hardware_measured.md, "The power cap").
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import SpecError


@dataclass(frozen=True, kw_only=True)
class PowerDraw:
    """Watts each kernel class draws busy all the time at the maximum clock, and the stretch exponent."""

    idle_W: float
    """The GPU awake with no work (a spin kernel): the floor of every mix."""
    gemm_W: float
    """Dense tensor-core GEMMs (cuBLAS, aligned operands)."""
    attention_W: float
    """Fused attention kernels (FlashAttention, cuDNN)."""
    misaligned_gemm_W: float
    """GEMMs on the misaligned fallback kernels (:mod:`simulator.gemm_alignment`)."""
    memory_W: float
    """Memory-bound kernels (copies, elementwise, norms, the optimizer's passes)."""
    stretch_exponent: float
    """γ of :func:`simulator.power.stretch`: ``k = ((P − idle) / (limit − idle))^γ``, from each class measured
    alone, capped and uncapped (``ln(t_capped / t_free) / ln((P_free − idle) / (P_capped − idle))``)."""
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("idle_W", "gemm_W", "attention_W", "misaligned_gemm_W", "memory_W"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise SpecError(f"device.power_draw.{name}", f"must be a non-negative number of watts, got {value!r}")
        if not 0 < self.stretch_exponent <= 1:
            raise SpecError("device.power_draw.stretch_exponent", f"must be in (0, 1], got {self.stretch_exponent!r}")


def power_draw_from_dict(raw: object, field: str) -> PowerDraw:
    """A :class:`PowerDraw` from a cluster file's ``device.power_draw`` mapping (every key required)."""
    keys = ("idle_W", "gemm_W", "attention_W", "misaligned_gemm_W", "memory_W", "stretch_exponent")
    if not isinstance(raw, dict):
        raise SpecError(field, "give a mapping of " + ", ".join(keys) + " (and source)")
    unknown = sorted(set(raw) - set(keys) - {"source"})
    missing = [k for k in keys if k not in raw]
    if unknown or missing:
        raise SpecError(field, (f"unknown key {unknown[0]!r}" if unknown else f"missing {missing[0]}")
                        + "; give " + ", ".join(keys) + " (and source)")
    for k in keys:
        if isinstance(raw[k], bool) or not isinstance(raw[k], (int, float)):
            raise SpecError(f"{field}.{k}", f"must be a number, got {raw[k]!r}")
    return PowerDraw(**{k: float(raw[k]) for k in keys}, source=str(raw.get("source", "")))


def power_draw_to_dict(draw: PowerDraw) -> dict:
    d = {k: getattr(draw, k) for k in ("idle_W", "gemm_W", "attention_W", "misaligned_gemm_W", "memory_W",
                                       "stretch_exponent")}
    if draw.source:
        d["source"] = draw.source
    return d
