"""Operand alignment of a GEMM, and the rate a misaligned one reaches on Hopper.

cuBLAS and CUTLASS choose their fastest Tensor Core kernels only when the operands' leading dimensions
are multiples of 16 bytes (8 BF16/FP16 elements); other sizes run, more slowly [src: nvidia-gemm-guide].
Activations are stored token-major, so the token count is never a leading dimension: of a linear layer's
three GEMMs, the forward ``x·Wᵀ`` (m = tokens) and the data gradient ``dy·W`` (m = tokens) have leading
dimensions n and k, and the weight gradient ``dyᵀ·x`` (k = tokens, :attr:`GemmShape.weight_grad`) has m
and n. The alignment of a shape is therefore

    alignment_bytes = e · 2^v,   2^v the largest power of two (≤ 16 / e) dividing both leading dimensions,

with ``e`` the element size in bytes (a non-integer dimension, a vocabulary split unevenly over tp
ranks, counts as 1 element). The usual case is the vocabulary: GPT-2/GPT-3's 50,257 tokens are odd,
which is why nanoGPT pads them to 50,304 [src: nanogpt-vocab-pad] and Megatron-LM to a multiple of
128·tp (:meth:`simulator.strategy.framework.Framework.vocab_multiple`). A token count that is no
multiple of 8 costs nothing: an MoE expert's rows (T·k/E tokens, rarely a multiple of 8) or a sequence
of 16,383 tokens [src: own-h200-2026-11-25].

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
at full rate (731–798 TFLOP/s, ``call3``): m is no leading dimension there. The logits' weight gradient
is ``dyᵀ·x`` with m the vocabulary, which is a leading dimension of the transposed ``dy``: all three
logits GEMMs of the trace ran slowly. On 2026-11-25 ``nn.Linear`` through autograd at 16,383 tokens ran
its forward at 793 and its backward at 714 TFLOP/s against 781 and 755 at 16,384, and a grouped-GEMM
MoE layer at 1,092 rows per expert as fast as padded to 1,104: fwd 611 / 606, bwd 602 / 527 TFLOP/s
(``docs/measured/h200-2026-11-25/call2/gpu_extra-extra2.json``) [src: own-h200-2026-11-25].)

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


def leading_dims(shape: GemmShape) -> tuple[float, float]:
    """The two dimensions that are operands' leading dimensions (module docstring): (m, n) for a weight
    gradient, else (n, k)."""
    return (shape.m, shape.n) if shape.weight_grad else (shape.n, shape.k)


def alignment_bytes(shape: GemmShape, element_bytes: int) -> int:
    """``e · 2^v`` (module docstring), at most :data:`ALIGNED_BYTES`."""
    cap = max(1, ALIGNED_BYTES // element_bytes)
    return element_bytes * min(_pow2_elements(d, cap) for d in leading_dims(shape))


def misaligned_cap(shape: GemmShape | None, element_bytes: int, compute_capability: float | None) -> float:
    """The efficiency cap of ``shape`` on a device of ``compute_capability`` (1.0: no cap)."""
    if shape is None or element_bytes != 2 or compute_capability is None or not HOPPER_CC <= compute_capability < 10:
        return 1.0
    align = alignment_bytes(shape, element_bytes)
    return 1.0 if align >= ALIGNED_BYTES else MISALIGNED_EFFICIENCY_SM90[align]


def padded_vocab(vocab: int, multiple: int) -> int:
    """``vocab`` rounded up to a multiple of ``multiple`` (Megatron-LM's ``_vocab_size_with_padding``)."""
    return int(math.ceil(vocab / multiple) * multiple)
