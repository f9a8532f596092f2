"""One kernel's roofline time on a device's rates: :class:`Rates` (peak FLOP/s, achievable HBM bytes/s, the
matmul-efficiency curves, host time per call), :func:`kernel_time` (the roofline of one kernel, on its padded GEMM
work) and :class:`Bound` (which term sets it), with the FP8 and fused-attention variants. The formula and its
sources are in :mod:`simulator.compute`'s docstring; the per-operation tables and a device's :class:`Rates`
(:func:`simulator.compute.rates_for`) are there too."""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.attention_efficiency import AttentionEfficiency, attention_compute_s
from simulator.dtypes import Dtype
from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.gemm_alignment import misaligned_cap
from simulator.gemm_efficiency import GemmEfficiency
from simulator.gemm_shape import best_padded_flops
from simulator.workload.fp8_block_gemm import block_scaled_gemm_time_ratio
from simulator.workload.ops import Kernel


class Bound(Kind):
    """Which roofline term sets a kernel's time."""

    COMPUTE = "compute"
    """FLOPs / (peak × efficiency) is the larger term."""
    MEMORY = "memory"
    """bytes / HBM bandwidth is the larger term."""


def kernel_time(kernel: Kernel, peak_flops: float, hbm_Bps: float, curve: GemmEfficiency,
                sm_count: int | None = None, clock_ratio: float = 1.0,
                curve_flops_scale: float = 1.0, overhead_s: float = 0.0, cap: float = 1.0) -> tuple[float, Bound]:
    """Roofline time of one kernel plus the per-kernel host overhead ``overhead_s``
    (``Device.kernel_launch_overhead_us``), and which roofline term bounds it. A GEMM with a shape
    is timed on its padded work ``W`` (tile and wave quantisation on ``sm_count`` SMs,
    :mod:`simulator.gemm_shape`): ``W / (peak · clock_ratio · e(W))``, what a perfectly quantised GEMM
    of ``W`` FLOPs costs on the curve at the device's sustained clock (``Device.sustained_clock_ratio``).
    ``curve_flops_scale``: the curve is read at ``W × scale`` (an FP8 GEMM,
    :data:`FP8_SAME_DURATION_EFFICIENCY`). ``cap``: the most efficiency the kernel can reach whatever the
    curve says (a misaligned GEMM, :func:`simulator.gemm_alignment.misaligned_cap`)."""
    t_mem = kernel.bytes / (hbm_Bps * kernel.copy_fraction)  # eager kernels below a copy's rate (eager_rates)
    if not kernel.gemm or kernel.flops <= 0:
        return t_mem + overhead_s, Bound.MEMORY
    work = kernel.flops if kernel.shape is None else best_padded_flops(kernel.shape, sm_count)
    t_comp = work / (peak_flops * clock_ratio * min(cap, curve.efficiency(work * curve_flops_scale)))
    return (t_comp + overhead_s, Bound.COMPUTE) if t_comp >= t_mem else (t_mem + overhead_s, Bound.MEMORY)


FP8_SAME_DURATION_EFFICIENCY = True
"""(assumption, for a device without ``fp8_gemm_efficiency``) An FP8 GEMM reaches the fraction of the
device's FP8 peak that a BF16 GEMM of the same duration reaches of the BF16 peak: the curve (a BF16
measurement, :mod:`simulator.gemm_efficiency`) is read at the FP8 work × (BF16 peak ÷ FP8 peak). A device
with a published FP8 GEMM measurement gives it as ``device.fp8_gemm_efficiency`` (the H100 SXM presets:
cuBLASLt E4M3 8192³ at 81.4 % of the FP8 peak [src: cublaslt-fp8-crosscheck]; hgx-h200: our ``_scaled_mm``
E4M3 8192³ at 72.25 % [src: own-h200-2026-11-24]), read at the FP8 work on the FP8 peak instead."""


@dataclass(frozen=True)
class Rates:
    """What a device brings to the roofline: peak FLOP/s in the compute dtype, achievable HBM bytes/s,
    the matmul-efficiency curve and the SM count for quantisation; the FP8 peak where the device has one."""

    peak_flops: float
    hbm_Bps: float
    curve: GemmEfficiency
    sm_count: int | None
    clock_ratio: float = 1.0
    fp8_peak_flops: float | None = None
    overhead_s: float = 0.0
    """Host time per kernel, seconds (``Device.kernel_launch_overhead_us`` × 1e-6)."""
    fp8_curve: GemmEfficiency | None = None
    """The device's own FP8 matmul-efficiency curve (``Device.fp8_gemm_efficiency``), relative to the FP8
    peak; None: FP8 GEMMs use ``curve`` by :data:`FP8_SAME_DURATION_EFFICIENCY`."""
    compute_capability: float | None = None
    element_bytes: int = 2
    """Bytes per element of the workload's compute format, for a GEMM's alignment (:mod:`simulator.gemm_alignment`)."""
    attention: AttentionEfficiency | None = None
    """The device's published fused-attention rates (``Device.attention_efficiency``) when the workload
    computes in bf16/fp16 (what they were measured in); None: attention on ``curve``."""

    def time(self, kernel: Kernel) -> tuple[float, Bound]:
        """The kernel's roofline time plus ``overhead_s`` per host call (``Kernel.dispatches``), and its bound."""
        if self.overhead_s and kernel.dispatches != 1:
            return replace(self, overhead_s=self.overhead_s * kernel.dispatches).time(replace(kernel, dispatches=1))
        curve = self.attention and kernel.attention and self.attention.curve(kernel.attention)
        if curve:  # max(F_pub / (R(s) · clock_ratio), bytes / B_hbm) + o (simulator.attention_efficiency)
            t_comp = attention_compute_s(kernel.attention, kernel.flops, curve, self.clock_ratio)
            t_mem = kernel.bytes / self.hbm_Bps
            return (t_comp + self.overhead_s, Bound.COMPUTE) if t_comp >= t_mem else (t_mem + self.overhead_s,
                                                                                       Bound.MEMORY)
        # a block-scaled FP8 GEMM's compute term is R times longer (R > 1 on Hopper): the clock divided by R
        clock = self.clock_ratio / block_scaled_gemm_time_ratio(self.compute_capability) if kernel.block_scaled \
            else self.clock_ratio
        if kernel.dtype is Dtype.FP8 and self.fp8_peak_flops is not None and self.fp8_curve is not None:
            return kernel_time(kernel, self.fp8_peak_flops, self.hbm_Bps, self.fp8_curve, self.sm_count,
                               clock, overhead_s=self.overhead_s)
        if kernel.dtype is Dtype.FP8 and self.fp8_peak_flops is not None:
            return kernel_time(kernel, self.fp8_peak_flops, self.hbm_Bps, self.curve, self.sm_count,
                               clock, curve_flops_scale=(self.peak_flops / self.fp8_peak_flops
                                                         if FP8_SAME_DURATION_EFFICIENCY else 1.0),
                               overhead_s=self.overhead_s)
        if kernel.dtype is Dtype.FP8:
            raise SpecError("precision", "fp8: the device gives no peak_tflops.fp8; use precision model, or give "
                            "the FP8 peak in the cluster file")
        return kernel_time(kernel, self.peak_flops, self.hbm_Bps, self.curve, self.sm_count, self.clock_ratio,
                           overhead_s=self.overhead_s,
                           cap=misaligned_cap(kernel.shape, self.element_bytes, self.compute_capability))
