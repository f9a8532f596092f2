"""How much longer a block-scaled FP8 GEMM (``te-blockwise``) takes than a per-tensor-scaled one on Hopper.

Transformer Engine's ``Float8BlockScaling`` GEMMs apply a scale per 1×128 block of the activation or
gradient and per 128×128 block of the weight inside the K loop; a per-tensor-scaled GEMM applies one scale
pair at the end. NVIDIA's GEMM profiling tutorial times the 12 GEMMs of one layer (hidden 4096, intermediate
16384, M = 15,872 tokens) on an H200 NVL, CUDA events, 100 timed iterations [src: te-gemm-profiling]:

================  ===========================  ===========================
per layer         autocast (quantize + GEMM)   pre-quantized (GEMM only)
================  ===========================  ===========================
BF16              32.014 ms                    31.968 ms
FP8 current       20.285 ms                    16.785 ms
FP8 delayed       18.978 ms                    (runs autocast: 19.099 ms)
FP8 block         22.882 ms                    not run (Hopper's cuBLAS has no 2D×2D block path)
================  ===========================  ===========================

The block recipe's GEMM kernels alone are not published, so they are derived from the table with the cast
model trainplan already charges (:meth:`Fp8Recipe.cast_bytes_per_element`: a cast is memory-bound, its time
proportional to its bytes). Current scaling's quantization is ``q_c = 20.285 − 16.785 = 3.500 ms`` at
``2·e + 2 = 6`` bytes per element; block scaling moves ``e + 2 + 2·4/128 = 4.0625``, so
``q_b = q_c · 4.0625 / 6 = 2.370 ms`` and its GEMMs take ``22.882 − 2.370 = 20.512 ms``:

    ratio = (T_block,autocast − q_c · b_block / b_current) / T_current,kernel = 20.512 / 16.785 = 1.222

(1.56× over BF16 where the per-tensor kernels reach 1.90×). The same cast model predicts delayed scaling's
autocast time from current scaling's kernels, ``16.785 + 3.500 · 4/6 = 19.118 ms`` against the 18.978
published (+0.7 %): bytes-proportional quantization holds on this table for the per-tensor recipes. For the
block recipe's own quantize kernel it is an assumption: were it twice as slow per byte, the ratio would be
1.08; as fast per byte as a copy (the model's rate for every cast), 1.22.

Where it applies: compute capability 9.x (Hopper), where the block-scaled GEMM runs as such. On Blackwell
(10.x) TE runs the block recipe through MXFP8 GEMMs [src: te-fp8-blockwise]; no figure there, so 1.0
(not charged), as for any other device or recipe.
"""

from __future__ import annotations

from simulator.workload.fp8_recipe import Fp8Recipe

ACTIVATION_BYTES = 2
"""Bytes per element of the tutorial's high-precision tensors (BF16)."""

H200_CURRENT_AUTOCAST_MS = 20.285
"""Per-layer GEMM time, FP8 current scaling with quantization, H200 NVL [src: te-gemm-profiling]."""

H200_CURRENT_KERNEL_MS = 16.785
"""Per-layer GEMM time, FP8 current scaling, inputs pre-quantized (kernels only) [src: te-gemm-profiling]."""

H200_BLOCK_AUTOCAST_MS = 22.882
"""Per-layer GEMM time, FP8 block scaling with quantization, H200 NVL [src: te-gemm-profiling]."""

HOPPER = (9.0, 10.0)
"""Compute capabilities [lo, hi) whose block-scaled FP8 GEMMs the tutorial's H200 figures describe."""


def quantize_ms(recipe: Fp8Recipe) -> float:
    """The tutorial layer's quantization time under ``recipe``, ms: current scaling's measured
    ``autocast − kernel`` scaled by the recipe's cast bytes over current scaling's (module docstring)."""
    q_current = H200_CURRENT_AUTOCAST_MS - H200_CURRENT_KERNEL_MS
    per = recipe.cast_bytes_per_element(ACTIVATION_BYTES)
    return q_current * per / Fp8Recipe.TE_CURRENT.cast_bytes_per_element(ACTIVATION_BYTES)


HOPPER_BLOCK_SCALED_GEMM_TIME_RATIO = (H200_BLOCK_AUTOCAST_MS - quantize_ms(Fp8Recipe.TE_BLOCKWISE)) \
    / H200_CURRENT_KERNEL_MS
"""A block-scaled FP8 GEMM's time ÷ a per-tensor-scaled one's at the same shape on Hopper, dimensionless
(1.222; derivation in the module docstring) [src: te-gemm-profiling]."""


def block_scaled_gemm_time_ratio(compute_capability: float | None) -> float:
    """Time factor of a ``te-blockwise`` FP8 GEMM on a GPU of ``compute_capability`` over the device's FP8
    GEMM rate: :data:`HOPPER_BLOCK_SCALED_GEMM_TIME_RATIO` on 9.x, 1.0 elsewhere and when unknown."""
    if compute_capability is not None and HOPPER[0] <= compute_capability < HOPPER[1]:
        return HOPPER_BLOCK_SCALED_GEMM_TIME_RATIO
    return 1.0
