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
    and a transformer in bf16 mixed precision (the recipes keep the rest of the model in bf16).
    Each recipe needs its GPU generation (``Fp8Recipe.min_compute_capability``: block scaling SM 9.0, MXFP8 10.0). Mixture-of-experts
    and latent-attention models run FP8 through Transformer Engine's recipes (``GroupedLinear`` for the
    experts, :mod:`simulator.workload.fp8`); torchao's float8 converter swaps ``nn.Linear`` modules
    [src: torchao-float8], which leaves grouped expert GEMMs out, so it is refused there."""
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
    recipe = s.resolved_fp8_recipe
    if device.compute_capability is not None and device.compute_capability < recipe.min_compute_capability:
        raise SpecError("fp8_recipe", f"{recipe.value}: Transformer Engine runs it on SM {recipe.min_compute_capability:g} "
                        f"or later; {device.name} is SM {device.compute_capability:g}; use fp8_recipe te")
    special = getattr(workload, "moe", None) is not None or getattr(workload, "mla", None) is not None
    if special and recipe.is_torchao:
        raise SpecError("fp8_recipe", f"{recipe.value}: torchao's float8 converter swaps nn.Linear modules, not "
                        "grouped expert GEMMs or latent attention; use fp8_recipe te, te-current, te-blockwise or "
                        "te-mxfp8 (Transformer Engine) for a mixture-of-experts or latent-attention model, or "
                        "precision model")
    if workload.dtype is not DtypePolicy.BF16_MIXED:
        raise SpecError("precision", f"fp8: the recipes run the rest of the model in bf16; the model is "
                        f"{workload.dtype.value} (use a bf16 model, or precision model)")
