"""How fast eager torch's memory-bound kernels move their bytes, as a fraction of a plain copy.

The roofline times a memory-bound kernel at the device's achievable HBM bandwidth (:func:`simulator.compute.
achievable_hbm_Bps`, a STREAM-like *copy* figure). Eager torch's norms, GELU and dropout do not reach it: on our
H200 (torch 2.11, bf16, 2^28 elements in rows of 4096, forward, median of 40 calls; `benchmarks/gpu_measure.py
--sections memory`) [src: own-h200-2026-11-24], on the bytes the model counts for each kernel (a norm or GELU
reads and writes N·2 B, dropout 2N·2 + N B):

    kernel                   GB/s     ÷ copy (4195.6 GB/s, same call)
    F.layer_norm           3070.8     0.732
    F.rms_norm             3600.5     0.858
    F.gelu (exact)         3143.1     0.749
    F.dropout              3045.8     0.726

A forward kernel of these kinds under eager kernel fusion (:class:`~simulator.workload.kinds.KernelFusion`
``eager``) takes ``bytes / (B_hbm · f)``, ``f`` the fraction above (``Kernel.copy_fraction``). The fraction is a
property of torch's kernel code, carried to other GPUs as measured on the H200 (an assumption: A100 and H100
run the same kernels). Backward kernels (not measured) and the residual add and eager SwiGLU's two kernels
(measured at a copy's rate: 4355 and 4208 GB/s) keep ``f = 1``; Megatron's fused and torch.compile's generated
kernels were not measured and keep ``f = 1``.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.enum_kind import Kind
from simulator.workload.kinds import KernelFusion, NormKind

COPY_GBPS = 4195.6
"""A plain bf16 copy on the H200, GB/s of the bytes read and written (the reference of the fractions)
[src: own-h200-2026-11-24]."""


class EagerKernel(Kind):
    """An eager torch memory-bound kernel with its measured forward rate, GB/s (module docstring)."""

    LAYER_NORM = 3070.8
    RMS_NORM = 3600.5
    GELU = 3143.1
    DROPOUT = 3045.8

    @property
    def copy_fraction(self) -> float:
        """The kernel's rate over a plain copy's, both measured on the H200 in the same call."""
        return self.value / COPY_GBPS


def norm_kernel(norm: NormKind) -> EagerKernel:
    """The eager kernel of a norm layer: ``F.layer_norm`` or ``F.rms_norm``."""
    return EagerKernel.LAYER_NORM if norm is NormKind.LAYERNORM else EagerKernel.RMS_NORM


def at_eager_rate(items: list, kind: EagerKernel, fusion: KernelFusion) -> list:
    """``items`` ((kernel, shape) pairs of forward memory-bound kernels) at ``kind``'s fraction of a copy under
    eager fusion; unchanged under Megatron's or torch.compile's fusion."""
    if fusion is not KernelFusion.EAGER:
        return items
    return [(replace(k, copy_fraction=kind.copy_fraction), shape) for k, shape in items]
