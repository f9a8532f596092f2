"""torchao's float8 casts run eagerly (no ``torch.compile``): each pass of a cast is a kernel of its own.

Compiled, torchao's tensorwise cast is an amax reduction and one fused scale-and-cast (``2·e + 3`` bytes per
element, :meth:`simulator.workload.fp8_recipe.Fp8Recipe.cast_bytes_per_element`). Eager, as ``trainplan execute`` runs
it, every step of ``hp_tensor_to_float8_dynamic`` is a separate kernel over the whole tensor; our H200 trace of
that run (GPT-3 1.3B, docs/hardware_measured.md) spent ~450 ms per step in them against ~80 ms in the FP8 GEMMs.
"""

from __future__ import annotations

from simulator.workload.ops import Kernel, memory

__all__ = ["EAGER_AMAX_BYTES", "EAGER_SCALE_CAST_BYTES", "FP8_TRANSPOSE_BYTES", "eager_torchao_casts"]


EAGER_AMAX_BYTES = 3
"""Bytes per BF16-element byte of an eager torchao amax pass: ``torch.abs`` (read ``e``, write ``e``) and the
max reduction (read ``e``): ``3·e`` per element (``torchao/float8/float8_utils.py`` ``tensor_to_amax``)
[src: torchao-float8]."""
FP8_TRANSPOSE_BYTES = 2
"""Bytes per element of an FP8 tensor's transposed copy: read 1, write 1."""
EAGER_SCALE_CAST_BYTES = 25
"""Bytes per element of an eager torchao scale-and-cast beyond reading the BF16 source (``e``): to FP32
(write 4), times the scale (read 4, write 4), the saturating clamp (read 4, write 4), to FP8 (read 4, write 1):
``e + 25`` per element (``hp_tensor_and_scale_to_float8``, ``to_fp8_saturated``) [src: torchao-float8]."""


def eager_torchao_casts(kernel: Kernel, e: int, weight_shards: int,
                         rowwise: bool = False) -> tuple[list[Kernel], list[Kernel]]:
    """(forward, backward) cast kernels of one linear under eager torchao: separate kernels per pass (no
    ``torch.compile`` fusing them). Tensorwise, per linear and micro-batch, as our H200 trace of the executor's
    run counts them (``docs/measured/h200-2026-11-25/call8``: 4 ``abs``, 4 amax reductions, 6 clamps and 6 scale
    multiplies per linear) [src: own-h200-2026-11-25]: amax passes on the input, the weight and twice on the output
    gradient (once per backward GEMM); scale-and-casts of the input and the weight in forward and again in
    backward, and of the output gradient twice; one FP8 transpose copy (read 1, write 1) of each of the three
    operands. Rowwise (not traced): every operand quantized along each GEMM's axis from its BF16 source, an amax
    and a scale-and-cast per use, two uses each, no transposes [src: torchao-float8-rowwise]."""
    m, n, k, batch = kernel.shape.m, kernel.shape.n, kernel.shape.k, kernel.shape.batch
    amax, cast = EAGER_AMAX_BYTES * e, e + EAGER_SCALE_CAST_BYTES
    x, w, dy = m * k * batch, k * n * batch / weight_shards, m * n * batch
    fwd = [memory(f"{kernel.name}.cast_input", (amax + cast) * x), memory(f"{kernel.name}.cast_weight", (amax + cast) * w)]
    if rowwise:
        return fwd, [memory(f"{kernel.name}.cast_grad_output", 2 * (amax + cast) * dy),
                     memory(f"{kernel.name}.recast_input_weight", (amax + cast) * (x + w))]
    bwd = [memory(f"{kernel.name}.cast_grad_output", 2 * (amax + cast) * dy),
           memory(f"{kernel.name}.recast_input_weight", cast * (x + w)),
           memory(f"{kernel.name}.fp8_transposes", FP8_TRANSPOSE_BYTES * (x + w + dy))]
    return fwd, bwd
