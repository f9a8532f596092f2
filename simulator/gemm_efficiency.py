"""Achieved matmul efficiency of a device: a curve of efficiency against the GEMM's size.

A GEMM of ``F = 2·m·n·k`` FLOPs on a device of peak ``P`` takes ``F / (P · e(F))`` when it is
compute-bound; ``e`` is this curve, piecewise-linear in ``log10(F)`` between named points and flat
beyond the first and last. Small GEMMs run further from peak (launch and prologue/epilogue costs).
A GEMM's shape adds tile and wave quantisation (NVIDIA, "Matrix Multiplication Background User's
Guide" [src: nvidia-gemm-guide]): :mod:`simulator.compute` evaluates the curve at the GEMM's padded
work from :mod:`simulator.gemm_shape`, not at its FLOPs. Thin GEMMs are also limited by their bytes;
that is the roofline's memory term in :mod:`simulator.compute`, not this curve.

Default curves, chosen by the device's ``gemm_curve`` (:class:`GemmCurve`):
- the plateau (large GEMMs) is the *Maximum Achievable Matmul FLOPS* measured with
  ``mamf-finder.py`` (torch.matmul, BF16, best shape, mean of 100 iterations) in S. Bekman,
  "Machine Learning Engineering", ``compute/accelerator/README.md``, MAMF comparison table
  (:data:`MAMF`: A100 SXM 271.2, A100 PCIe 252.9, H100 SXM 794.5 ("H200 is the same"), GH200 828.6,
  B200 1745, MI300X 668.4 TFLOP/s), divided by the device's own BF16 peak from its cluster file
  (A100 SXM 271.2/312 = 86.9 %, H100 SXM 794.5/989 = 80.3 %): the peak has one home, and
  the largest GEMMs run at the measured rate whatever peak a file states.
- the fall-off for small GEMMs is an ASSUMPTION, to be calibrated: a fixed per-kernel cost
  ``t0 = 4 µs`` on top of the plateau rate, ``e(F) = plateau · t/(t + t0)`` with ``t = F/peak``
  the GEMM's duration at peak; sampled at durations 0.1 µs … 10 ms into the curve's points.
A GPU the MAMF table lacks can give ``gemm_efficiency: {plateau, dtype, source}``: a published large-GEMM
efficiency with the same fall-off (:func:`plateau_curve`; dgx-v100 [src: nvidia-forum-v100-gemm], pcie-l40s
[src: zzc-torch-perf-l40s]).
A device without ``gemm_curve`` (a user's file written before the field) falls back to the curve its
name suggests (:func:`curve_for_name`). None of these numbers is fitted to an end-to-end training
run (that would hide the model's errors). A measured curve replaces the default through
``device.gemm_efficiency`` in a cluster file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simulator.dtypes import Dtype
from simulator.enum_kind import Kind
from simulator.errors import SpecError

_MAMF_SOURCE = ("plateau: Bekman, Machine Learning Engineering, compute/accelerator/README.md, "
                "MAMF table ({gpu} BF16 {eff:.1%}); fall-off below: assumption t0 = 4 us, to be calibrated")


@dataclass(frozen=True, kw_only=True)
class GemmEfficiency:
    """Achieved fraction of peak for a GEMM, by its FLOPs; and achieved fraction of HBM bandwidth."""

    points: tuple[tuple[float, float], ...]
    """(GEMM FLOPs, efficiency in (0, 1]) with strictly increasing FLOPs; flat outside the first and
    last point. Between points the GEMM's duration ``W / e(W)`` (in peak-seconds) is interpolated
    linearly in log-log, not ``e`` in log(W): on the steep small-GEMM end of a curve the latter made a
    larger GEMM faster (A100, m = n = 1, k 7 → 8: 3 % less time), which no padding argument allows. A
    point whose duration is below an earlier one's (a noisy measurement) is raised to it, so time
    never falls as FLOPs grow."""
    hbm_efficiency: float = 1.0
    """Fraction of the datasheet HBM bandwidth that memory-bound kernels achieve (1.0: datasheet)."""
    source: str = ""
    """Where the points come from (benchmark, measurement, or 'assumption')."""

    def __post_init__(self) -> None:
        field = "device.gemm_efficiency"
        if not self.points:
            raise SpecError(f"{field}.points", "give at least one [gemm_flops, efficiency] pair")
        last = 0.0
        for flops, eff in self.points:
            if not flops > last:
                raise SpecError(f"{field}.points", f"FLOPs must be positive and increasing, got {flops!r} "
                                f"after {last!r}")
            if not 0 < eff <= 1:
                raise SpecError(f"{field}.points", f"efficiency must be in (0, 1], got {eff!r}")
            last = flops
        if not 0 < self.hbm_efficiency <= 1:
            raise SpecError(f"{field}.hbm_efficiency", f"must be in (0, 1], got {self.hbm_efficiency!r}")

    def efficiency(self, gemm_flops: float) -> float:
        """Efficiency of one GEMM of ``gemm_flops`` FLOPs (2·m·n·k, summed over a batched call)."""
        if gemm_flops <= 0:
            raise SpecError("gemm_flops", f"must be positive, got {gemm_flops!r}")
        flops, durations, log_flops, log_durations = self._curve
        if gemm_flops <= flops[0]:
            return float(flops[0] / durations[0])
        if gemm_flops >= flops[-1]:
            return float(flops[-1] / durations[-1])
        log_duration = np.interp(math.log10(gemm_flops), log_flops, log_durations)
        return float(gemm_flops / 10 ** log_duration)

    @cached_property
    def _curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The points as arrays, made once per curve (a search asks :meth:`efficiency` thousands of times):
        FLOPs, durations at unit peak (made non-decreasing), and the log10 of both."""
        flops = np.array([p[0] for p in self.points])
        durations = np.maximum.accumulate(flops / np.array([p[1] for p in self.points]))
        return flops, durations, np.log10(flops), np.log10(durations)

    @property
    def plateau(self) -> float:
        """Efficiency of the largest GEMMs (the last point)."""
        return self.points[-1][1]


def overhead_curve(plateau: float, peak_tflops: float, overhead_us: float = 4.0,
                   source: str = "") -> GemmEfficiency:
    """Curve of ``plateau · t/(t + overhead)`` sampled at GEMM durations t = 0.1 µs … 10 ms at peak."""
    durations_us = (0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000, 10000)
    points = tuple((peak_tflops * 1e12 * t * 1e-6, plateau * t / (t + overhead_us)) for t in durations_us)
    return GemmEfficiency(points=points, source=source)


class GemmCurve(Kind):
    """A published matmul measurement a device's default curve is built from (``device.gemm_curve``)."""

    A100_SXM = "a100-sxm"
    """NVIDIA A100 SXM: MAMF 271.2 TFLOP/s."""
    A100_PCIE = "a100-pcie"
    """NVIDIA A100 PCIe: MAMF 252.9 TFLOP/s."""
    H100_SXM = "h100-sxm"
    """NVIDIA H100 SXM: MAMF 794.5 TFLOP/s."""
    H200 = "h200"
    """NVIDIA H200: the H100 SXM figure (the table notes "H200 is the same")."""
    GH200 = "gh200"
    """NVIDIA GH200: MAMF 828.6 TFLOP/s."""
    B200 = "b200"
    """NVIDIA B200 SXM: MAMF 1745 TFLOP/s."""
    MI300X = "mi300x"
    """AMD MI300X: MAMF 668.4 TFLOP/s."""
    NONE = "none"
    """No MAMF measurement (V100, L40S, H100 PCIe, CPUs): the device must give ``gemm_efficiency`` (points, or a
    published plateau as dgx-v100 and pcie-l40s do)."""


@dataclass(frozen=True)
class Mamf:
    """One row of the MAMF table: the GPU as the table names it and its measured BF16 matmul rate."""

    gpu: str
    tflops: float
    """Maximum Achievable Matmul FLOPS, TFLOP/s (torch.matmul, BF16, best shape)."""


MAMF: dict[GemmCurve, Mamf] = {
    GemmCurve.A100_SXM: Mamf("NVIDIA A100 SXM", 271.2),
    GemmCurve.A100_PCIE: Mamf("NVIDIA A100 PCIe", 252.9),
    GemmCurve.H100_SXM: Mamf("NVIDIA H100 SXM", 794.5),
    GemmCurve.H200: Mamf("NVIDIA H100 SXM, which the table notes H200 matches,", 794.5),
    GemmCurve.GH200: Mamf("NVIDIA GH200", 828.6),
    GemmCurve.B200: Mamf("NVIDIA B200 SXM", 1745.0),
    GemmCurve.MI300X: Mamf("AMD MI300X", 668.4),
}
"""Measured plateaus [src: bekman-mle]. The peak they are divided by is the device's own (its
``peak_tflops.bf16``), so a peak figure lives only in the cluster file."""

MAMF_DTYPE = Dtype.BF16
"""The format the MAMF table measured: a named curve is relative to the device's peak in this format."""


def mamf_curve(curve: GemmCurve, peak_tflops: float) -> GemmEfficiency:
    """The default curve ``curve`` on a device of BF16 peak ``peak_tflops``: plateau = MAMF / peak,
    the fall-off of :func:`overhead_curve` below it."""
    if curve not in MAMF:
        raise SpecError("device.gemm_curve", f"{curve.value!r} has no published measurement; give "
                        "device.gemm_efficiency points")
    mamf = MAMF[curve]
    plateau = mamf.tflops / peak_tflops
    if plateau > 1:
        raise SpecError(f"device.peak_tflops.{MAMF_DTYPE.value}", f"{peak_tflops} is below the measured "
                        f"{mamf.tflops} TFLOP/s of gemm_curve {curve.value!r}")
    return overhead_curve(plateau, peak_tflops, source=_MAMF_SOURCE.format(gpu=mamf.gpu, eff=plateau))


_NAME_RULES: tuple[tuple[tuple[str, ...], GemmCurve], ...] = (
    (("gh200",), GemmCurve.GH200),
    (("h200",), GemmCurve.H200),
    (("h100", "pcie"), GemmCurve.NONE),  # no published measurement: a user must give a curve
    (("h100",), GemmCurve.H100_SXM),
    (("a100", "pcie"), GemmCurve.A100_PCIE),
    (("a100",), GemmCurve.A100_SXM),
    (("b200",), GemmCurve.B200),
    (("mi300x",), GemmCurve.MI300X),
)


def curve_for_name(device_name: str) -> GemmCurve:
    """The fallback for a device without ``gemm_curve``: the curve its name suggests
    (``"H100-SXM5-80GB"`` → h100-sxm), NONE if no rule fits."""
    norm = re.sub(r"[^a-z0-9]", "", device_name.lower())
    for tokens, key in _NAME_RULES:
        if all(tok in norm for tok in tokens):
            return key
    return GemmCurve.NONE


def efficiency_for(device) -> GemmEfficiency:
    """The device's own ``gemm_efficiency``; else its ``gemm_curve`` (or, without one, the curve its
    name suggests) on its own BF16 peak. A device with none of these is an error naming the field."""
    curve = getattr(device, "gemm_efficiency", None)
    if curve is not None:
        return curve
    key = getattr(device, "gemm_curve", None) or curve_for_name(device.name)
    if key is GemmCurve.NONE:
        raise SpecError("device.gemm_efficiency", f"no default matmul-efficiency curve for {device.name!r} "
                        f"(gemm_curve: {', '.join(c.value for c in MAMF)}); give points: [[gemm_flops, "
                        "efficiency], ...] in the cluster file, or measure them with a GEMM benchmark")
    if MAMF_DTYPE not in device.peak_tflops:
        raise SpecError("device.peak_tflops", f"gemm_curve {key.value!r} is relative to the "
                        f"{MAMF_DTYPE.value} peak; give peak_tflops.{MAMF_DTYPE.value} or gemm_efficiency points")
    return mamf_curve(key, device.peak_tflops[MAMF_DTYPE])


def _number(field: str, value) -> float:
    try:
        return float(value)  # YAML 1.1 reads 1e9 (no dot) as a string
    except (TypeError, ValueError):
        raise SpecError(field, f"must be a number, got {value!r}") from None


def gemm_efficiency_from_dict(d: dict, field: str = "device.gemm_efficiency",
                              peak_tflops: dict | None = None) -> GemmEfficiency:
    """Read ``{points: [[flops, eff], ...], hbm_efficiency: 0.9, source: "..."}`` (a cluster file's
    ``device.gemm_efficiency`` section), or ``{plateau: 0.9, dtype: fp16, source: "..."}``: a published
    large-GEMM efficiency with the named curves' assumed fall-off (:func:`plateau_curve`) on the
    device's ``peak_tflops`` in ``dtype`` (default bf16). Unknown keys and malformed points name the field."""
    if not isinstance(d, dict):
        raise SpecError(field, f"must be a mapping with 'points', got {type(d).__name__}")
    if "plateau" in d:
        return _plateau_from_dict(d, field, peak_tflops or {})
    unknown = set(d) - {"points", "hbm_efficiency", "source"}
    if unknown:
        raise SpecError(field, f"unknown keys {sorted(unknown)}; known: points, hbm_efficiency, source "
                        "(or plateau, dtype, source)")
    if "points" not in d:
        raise SpecError(f"{field}.points", "missing; give [[gemm_flops, efficiency], ...]")
    points = []
    for i, pair in enumerate(d["points"] or []):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise SpecError(f"{field}.points[{i}]", f"must be [gemm_flops, efficiency], got {pair!r}")
        points.append((_number(f"{field}.points[{i}]", pair[0]), _number(f"{field}.points[{i}]", pair[1])))
    hbm = _number(f"{field}.hbm_efficiency", d.get("hbm_efficiency", 1.0))
    return GemmEfficiency(points=tuple(points), hbm_efficiency=hbm, source=str(d.get("source", "")))


def fp8_gemm_efficiency_from_dict(d: dict, field: str, peak_tflops: dict) -> GemmEfficiency:
    """Read a device's ``fp8_gemm_efficiency`` section: the forms of :func:`gemm_efficiency_from_dict`,
    relative to the FP8 peak (points at FP8 FLOPs; ``plateau`` with ``dtype`` fp8, the default here)."""
    if isinstance(d, dict) and "hbm_efficiency" in d:
        raise SpecError(f"{field}.hbm_efficiency", "give it once, as device.hbm_efficiency or in gemm_efficiency")
    if isinstance(d, dict) and "plateau" in d:
        name = str(d.get("dtype", Dtype.FP8.value))
        if name != Dtype.FP8.value:
            raise SpecError(f"{field}.dtype", f"must be fp8 (the FP8 GEMMs' own peak), got {name!r}")
        d = {**d, "dtype": Dtype.FP8.value}
    return gemm_efficiency_from_dict(d, field=field, peak_tflops=peak_tflops)


def plateau_curve(plateau: float, peak_tflops: float, source: str = "") -> GemmEfficiency:
    """A device's curve from a published large-GEMM efficiency ``plateau`` (achieved / peak, for a GPU
    the MAMF table lacks): the named curves' shape, :func:`overhead_curve`'s assumed 4 µs fall-off
    below the plateau, on the device's peak."""
    if not 0 < plateau <= 1:
        raise SpecError("device.gemm_efficiency.plateau", f"must be in (0, 1], got {plateau!r}")
    return overhead_curve(plateau, peak_tflops, source=source)


def _plateau_from_dict(d: dict, field: str, peak_tflops: dict) -> GemmEfficiency:
    unknown = set(d) - {"plateau", "dtype", "source"}
    if unknown:
        raise SpecError(field, f"unknown keys {sorted(unknown)} with plateau; known: plateau, dtype, source")
    name = str(d.get("dtype", MAMF_DTYPE.value))
    dtype = next((t for t in Dtype if t.value == name), None)
    if dtype is None or dtype not in peak_tflops:
        raise SpecError(f"{field}.dtype", f"{name!r} is not a format of device.peak_tflops "
                        f"({', '.join(t.value for t in peak_tflops)})")
    plateau = _number(f"{field}.plateau", d["plateau"])
    if not 0 < plateau <= 1:
        raise SpecError(f"{field}.plateau", f"must be in (0, 1], got {plateau!r}")
    return plateau_curve(plateau, peak_tflops[dtype], source=str(d.get("source", "")))


def gemm_efficiency_to_dict(curve: GemmEfficiency) -> dict:
    """The inverse of :func:`gemm_efficiency_from_dict` (plain lists and floats, YAML/JSON-safe)."""
    return {"points": [[float(f), float(e)] for f, e in curve.points],
            "hbm_efficiency": float(curve.hbm_efficiency), "source": curve.source}
