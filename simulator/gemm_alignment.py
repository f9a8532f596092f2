"""Operand alignment of a GEMM, and the rate a misaligned one reaches on Hopper.

cuBLAS and CUTLASS choose their fastest Tensor Core kernels only when the operands' leading dimensions
are multiples of 16 bytes (8 BF16/FP16 elements); other sizes run, more slowly [src: nvidia-gemm-guide].
In a training step each of m, n and k is the leading dimension of an operand of one of a linear layer's
three GEMMs (forward, data gradient, weight gradient), so the alignment of a shape is

    alignment_bytes = e · 2^v,   2^v the largest power of two (≤ 16 / e) dividing m, n and k,

with ``e`` the element size in bytes (a non-integer dimension, a vocabulary split unevenly over tp
ranks, counts as 1 element). The usual case is the vocabulary: GPT-2/GPT-3's 50,257 tokens are odd,
which is why nanoGPT pads them to 50,304 [src: nanogpt-vocab-pad] and Megatron-LM to a multiple of
128·tp (:meth:`simulator.strategy.framework.Framework.vocab_multiple`).

On Hopper (compute capability 9.x) a misaligned BF16 GEMM falls back to pre-Hopper CUTLASS kernels
(the profiler names them ``cutlass_75_tensorop_bf16_s1688gemm_…_align1``), whose rate we measured on
an H200 SXM on 2026-11-24 (docs/hardware_measured.md, raw files under docs/measured/h200-2026-11-24/)
[src: own-h200-2026-11-24]:

- 2-byte alignment (an odd dimension): the GPT-3 1.3B logits GEMMs of a ``trainplan execute`` run
  (16384 × 50257 × 2048, fwd and both gradients), 90, 140 and 146 TFLOP/s in its profiler trace
  (``call2/trace-kernels-gpt3-1.3b.json``), and 135 and 140 TFLOP/s for the forward- and data-gradient-
  shaped ``torch.mm`` alone (``call3/gpu_measure-align.json``); median 140 of the 989 TFLOP/s dense BF16
  peak → 0.14;
- 4-byte alignment (vocabulary 50,258): 245 and 257 TFLOP/s (``call3/gpu_measure-align.json``) → 0.25;
- 8-byte alignment (12,564 = 50,257 // 4, and 50,260): six shapes of ``benchmarks/gpu_measure.py``
  (``call1/gpu_measure-gemm.json``, m 2048–12288) at 235–274 TFLOP/s and 246/256 (``call3``), median
  245 → 0.25.

(A ``torch.mm`` whose only misaligned dimension is m, the row count of its row-major first operand, ran
at full rate (731–798 TFLOP/s, ``call3``): m is no leading dimension there. In a training step it is one:
the weight gradient reads the stored output gradient, whose leading dimension is the vocabulary, which is
why all three logits GEMMs of the trace ran slowly; the rule therefore takes all of m, n and k.)

A misaligned GEMM's efficiency is ``min(e_curve(W), MISALIGNED_EFFICIENCY_SM90[alignment])``. Other
architectures keep the curve alone (not measured here). FP8 GEMMs are left alone: cuBLASLt FP8 needs
16-byte-aligned operands and the frameworks pad them (``torch._scaled_mm`` refuses other sizes).
"""

from __future__ import annotations

import math

from simulator.gemm_shape import GemmShape

ALIGNED_BYTES = 16
"""Leading-dimension alignment of the fast kernels, bytes [src: nvidia-gemm-guide]."""
MISALIGNED_EFFICIENCY_SM90: dict[int, float] = {2: 0.14, 4: 0.25, 8: 0.25}
"""Fraction of the dense BF16 peak a GEMM with this alignment (bytes) reaches on Hopper (module docstring;
measured on an H200 SXM, 2026-11-24) [src: own-h200-2026-11-24]."""
HOPPER_CC = 9.0


def _pow2_elements(dim: float, cap: int) -> int:
    if dim != int(dim):
        return 1
    d, p = int(dim), 1
    while p < cap and d % (2 * p) == 0:
        p *= 2
    return p


def alignment_bytes(shape: GemmShape, element_bytes: int) -> int:
    """``e · 2^v`` (module docstring), at most :data:`ALIGNED_BYTES`."""
    cap = max(1, ALIGNED_BYTES // element_bytes)
    return element_bytes * min(_pow2_elements(d, cap) for d in (shape.m, shape.n, shape.k))


def misaligned_cap(shape: GemmShape | None, element_bytes: int, compute_capability: float | None) -> float:
    """The efficiency cap of ``shape`` on a device of ``compute_capability`` (1.0: no cap)."""
    if shape is None or element_bytes != 2 or compute_capability is None or not HOPPER_CC <= compute_capability < 10:
        return 1.0
    align = alignment_bytes(shape, element_bytes)
    return 1.0 if align >= ALIGNED_BYTES else MISALIGNED_EFFICIENCY_SM90[align]


def padded_vocab(vocab: int, multiple: int) -> int:
    """``vocab`` rounded up to a multiple of ``multiple`` (Megatron-LM's ``_vocab_size_with_padding``)."""
    return int(math.ceil(vocab / multiple) * multiple)
