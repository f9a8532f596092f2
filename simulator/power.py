"""A power-limited GPU: how much longer a chunk's compute-bound kernels take when its mix of kernels would
draw more than the board's limit.

A mix of kernel classes c, each drawing ``P_c`` busy all the time at the maximum clock
(:class:`simulator.power_model.PowerDraw`) and taking ``t_c`` of the chunk's device time ``T`` there, draws

    P = P_idle + Σ_c (t_c / T) · (P_c − P_idle).

Over the limit ``P_lim`` the driver lowers the SM clock until the card draws the limit; the compute-bound
kernels (GEMMs, fused attention) then take ``k`` times longer and the memory-bound ones keep their time
(HBM's clock does not move: 3,201 MHz throughout [src: own-h200-2026-11-25]):

    k = ((P − P_idle) / (P_lim − P_idle))^γ   when P > P_lim, else 1.

γ comes from each class measured alone, capped and uncapped, on an H200 (0.385-0.417, median 0.407). No
parameter is fitted to a mix: the measured mixes (8192³ GEMMs with 1-14 memory copies between them, 0.28-0.86
of the time in GEMMs) are a check, met within 2.2 %; a GEMM-heavy real step (4 layers of hidden 8192) ran at
the cap and 16.1 % slower than estimated without this term, 7.0 % with it (docs/hardware_measured.md, "The
power cap") [src: own-h200-2026-11-25].

The unit is a chunk's forward, backward and recomputation together (tens to hundreds of ms on a GPU, the
scale over which the driver holds the limit). What the chunk does not contain is left out of its mix: the
optimizer, pipeline bubbles and waits for exposed communication, which draw less, so ``P`` is an upper bound
where those are large. A GPT-3 1.3B step of many short eager kernels, which this mix puts at 746 W, read 674 W
median and 788 W at p90 on ``power.draw.instant`` over 30 steps with the clock at 1,845 MHz median (the driver's
averaged ``power.draw``: 600 W), so it brushes the limit as the mix says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.compute import rates_for
from simulator.kernel_roofline import Bound, Rates
from simulator.enum_kind import Kind
from simulator.gemm_alignment import misaligned_cap
from simulator.power_model import PowerDraw
from simulator.workload.kinds import DtypePolicy
from simulator.workload.ops import Kernel


class KernelClass(Kind):
    """What a kernel draws, by what bounds it (:class:`PowerDraw`'s fields)."""

    GEMM = "gemm"
    ATTENTION = "attention"
    MISALIGNED_GEMM = "misaligned_gemm"
    MEMORY = "memory"


@dataclass(frozen=True)
class PhasePower:
    """One phase of a unit: device seconds, the compute-bound part of them, and the dynamic energy
    ``Σ t · (P_c − P_idle)`` in joules."""

    device_s: float = 0.0
    compute_s: float = 0.0
    energy_J: float = 0.0

    def __add__(self, other: "PhasePower") -> "PhasePower":
        return PhasePower(self.device_s + other.device_s, self.compute_s + other.compute_s,
                          self.energy_J + other.energy_J)

    def times(self, count: float) -> "PhasePower":
        return PhasePower(self.device_s * count, self.compute_s * count, self.energy_J * count)


def kernel_class(kernel: Kernel, bound: Bound, rates: Rates) -> KernelClass:
    """The class whose draw ``kernel`` has: memory-bound kernels are MEMORY whatever they compute."""
    if bound is Bound.MEMORY or not kernel.gemm:
        return KernelClass.MEMORY
    if kernel.attention is not None:
        return KernelClass.ATTENTION
    if misaligned_cap(kernel.shape, rates.element_bytes, rates.compute_capability) < 1.0:
        return KernelClass.MISALIGNED_GEMM
    return KernelClass.GEMM


def class_watts(draw: PowerDraw, cls: KernelClass) -> float:
    return {KernelClass.GEMM: draw.gemm_W, KernelClass.ATTENTION: draw.attention_W,
            KernelClass.MISALIGNED_GEMM: draw.misaligned_gemm_W, KernelClass.MEMORY: draw.memory_W}[cls]


def phase_power(ops: tuple[tuple[Kernel, ...], ...], rates: Rates, draw: PowerDraw) -> PhasePower:
    """One phase's kernels timed by the roofline (no host time) and classed (module docstring)."""
    out = PhasePower()
    for kernels in ops:
        for k in kernels:
            t, bound = rates.time(k)
            cls = kernel_class(k, bound, rates)
            out += PhasePower(t, 0.0 if cls is KernelClass.MEMORY else t, t * (class_watts(draw, cls) - draw.idle_W))
    return out


def unit_power(unit, device, dtype: DtypePolicy) -> tuple[PhasePower, PhasePower, PhasePower]:
    """(forward, backward, recompute) :class:`PhasePower` of one repetition of a work unit on ``device``
    (which must have a ``power_draw``)."""
    rates = replace(rates_for(dtype, device), overhead_s=0.0)
    return tuple(phase_power(ops, rates, device.power_draw) for ops in (unit.fwd, unit.bwd, unit.recompute))


def stretch(draw: PowerDraw, limit_W: float, total: PhasePower) -> float:
    """``k`` of the module docstring for a mix whose device seconds and dynamic energy are ``total``."""
    if total.device_s <= 0:
        return 1.0
    dynamic_W = total.energy_J / total.device_s
    return max(1.0, (dynamic_W / (limit_W - draw.idle_W)) ** draw.stretch_exponent)


def power_limited(device) -> bool:
    """Whether ``device`` gives both a power limit and the draw per class (the term applies)."""
    return device.power_limit_W is not None and device.power_draw is not None
