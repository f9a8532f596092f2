"""Eager torch's memory-bound kernels below a copy's rate (:mod:`simulator.workload.eager_rates`), from the H200
measurement [src: own-h200-2026-11-24]: F.layer_norm 3070.8, F.rms_norm 3600.5, F.gelu 3143.1, F.dropout 3045.8
GB/s against a plain copy's 4195.6 GB/s in the same call.

Hand-worked: GPT-3 125M (h 768, LayerNorm, GELU, f 3072) at micro-batch 1, sequence 2048, on dgx-h100 (achievable
3350 × 0.866 = 2901.1 GB/s). Its two norms read and write 2 × 2 × 2048 × 768 × 2 B = 12,582,912 B: at a copy's rate
4.3373 µs, in eager torch 4.3373 / (3070.8 / 4195.6) = 5.9260 µs. The GELU reads and writes 2 × 2048 × 3072 × 2 B =
25,165,824 B of the element-wise operation: 8.6746 µs → 11.5800 µs."""

from __future__ import annotations

import pytest

from simulator.cluster.presets import load_preset
from simulator.compute import Phase, layer_times
from simulator.workload import get_preset
from simulator.workload.eager_rates import EagerKernel, norm_kernel
from simulator.workload.kinds import KernelFusion, NormKind
from simulator.workload.ops import OpKind, layer_work

DEVICE, MODEL = load_preset("dgx-h100").device, get_preset("gpt3-125m")
HBM_BPS = 3350e9 * 0.866


def _row(fusion: KernelFusion, op: OpKind, phase: Phase = Phase.FWD):
    rows = layer_times(MODEL.with_seq(2048), DEVICE, 1, fusion=fusion)
    return next(r for r in rows if r.op is op and r.phase is phase)


def test_fractions_are_the_measured_rates_over_the_copy():
    assert EagerKernel.LAYER_NORM.copy_fraction == pytest.approx(0.7319, abs=1e-4)
    assert EagerKernel.RMS_NORM.copy_fraction == pytest.approx(0.8582, abs=1e-4)
    assert EagerKernel.GELU.copy_fraction == pytest.approx(0.7491, abs=1e-4)
    assert EagerKernel.DROPOUT.copy_fraction == pytest.approx(0.7259, abs=1e-4)
    assert norm_kernel(NormKind.RMSNORM) is EagerKernel.RMS_NORM


def test_eager_norm_is_slower_than_a_copy_by_hand():
    eager, fused = _row(KernelFusion.EAGER, OpKind.NORM), _row(KernelFusion.MEGATRON, OpKind.NORM)
    assert fused.bytes == eager.bytes == 12_582_912
    assert fused.time_s == pytest.approx(12_582_912 / HBM_BPS, rel=1e-12)  # 4.3373 µs
    assert eager.time_s == pytest.approx(12_582_912 / (HBM_BPS * 3070.8 / 4195.6), rel=1e-12)  # 5.9260 µs
    assert eager.time_s == pytest.approx(5.9260e-6, rel=1e-4)


def test_gelu_forward_only():
    """The GELU kernel is the eager element-wise operation's only slowed kernel; backward keeps a copy's rate."""
    kernels = {k.name: k for w in layer_work(MODEL.with_seq(2048), 1) if w.op is OpKind.ELEMENTWISE for k in w.fwd}
    assert kernels["activation"].bytes == 25_165_824
    assert kernels["activation"].copy_fraction == EagerKernel.GELU.copy_fraction
    assert kernels["residual"].copy_fraction == 1.0  # measured at a copy's rate
    bwd = [k for w in layer_work(MODEL.with_seq(2048), 1) for k in w.bwd if not k.gemm]
    assert all(k.copy_fraction == 1.0 for k in bwd)
    row = _row(KernelFusion.EAGER, OpKind.ELEMENTWISE)
    assert row.time_s == pytest.approx(sum(k.bytes / (HBM_BPS * k.copy_fraction) for k in kernels.values()), rel=1e-12)
    slowed = 25_165_824 / (HBM_BPS * 3143.1 / 4195.6) - 25_165_824 / HBM_BPS  # 11.5800 - 8.6746 µs
    assert slowed == pytest.approx(2.9054e-6, rel=1e-3)
