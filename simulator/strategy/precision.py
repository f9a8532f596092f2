"""The cross-input rule of FP8 training: the device has FP8 tensor cores and the workload is a bf16
transformer (:mod:`simulator.workload.fp8`); run by :func:`simulator.strategy.build_layout`."""

from __future__ import annotations

from simulator.cluster.spec import Cluster
from simulator.dtypes import Dtype
from simulator.errors import SpecError
from simulator.strategy.spec import Strategy
from simulator.workload.fp8 import MatmulPrecision
from simulator.workload.kinds import DtypePolicy
from simulator.workload.protocol import Workload

__all__ = ["check_fp8"]


def check_fp8(s: Strategy, cluster: Cluster, workload: Workload) -> None:
    """FP8 needs FP8 tensor cores (a peak_tflops.fp8 figure: Hopper, Ada, Blackwell; not A100 or V100)
    and a dense transformer in bf16 mixed precision (the recipes keep the rest of the model in bf16).
    Mixture-of-experts and latent-attention models are refused: Transformer Engine's ``GroupedLinear``
    runs expert GEMMs in FP8, but :mod:`simulator.workload.fp8` casts and caches only the dense
    linears, so their FP8 time and memory would be wrong."""
    if s.precision is not MatmulPrecision.FP8:
        return
    device = cluster.device
    if Dtype.FP8 not in device.peak_tflops:
        raise SpecError("precision", f"fp8: {device.name} has no FP8 tensor cores (its peak_tflops gives "
                        f"{', '.join(d.value for d in device.peak_tflops)}); use precision model, or an FP8 device "
                        "(dgx-h100, hgx-h200, dgx-b200)")
    if not getattr(workload, "has_activation_shapes", False) or workload.layer_count is None:
        raise SpecError("precision", "fp8: only a transformer's linear layers are known to run in FP8; use "
                        "precision model")
    if getattr(workload, "moe", None) is not None or getattr(workload, "mla", None) is not None:
        raise SpecError("precision", "fp8: the FP8 model covers a dense block's linears (Q/K/V, output, MLP); the "
                        "experts' grouped GEMMs, latent attention and their weight casts are not modelled in FP8; "
                        "use precision model for a mixture-of-experts or latent-attention model")
    if workload.dtype is not DtypePolicy.BF16_MIXED:
        raise SpecError("precision", f"fp8: the recipes run the rest of the model in bf16; the model is "
                        f"{workload.dtype.value} (use a bf16 model, or precision model)")
