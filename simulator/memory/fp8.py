"""What FP8 training changes in one rank's buffers (:mod:`simulator.workload.fp8`).

- Transformer Engine keeps each FP8 linear's weight in FP8 together with its transpose between the
  micro-batches of a step (the weight workspaces of ``Linear`` / ``LayerNormLinear`` /
  ``LayerNormMLP`` / ``GroupedLinear`` [src: te-fp8]; block scaling keeps both copies too [src:
  te-fp8-blockwise]): 2 bytes per weight of the rank's FP8 linears — a MoE block's local experts
  included — on top of the 16-bit parameters and the fp32 master copy, which stay as they are. On a
  GPU whose FP8 GEMMs take every layout (SM 10.x: B200) the per-tensor recipes keep one copy for both
  usages [src: te-non-tn-fp8]: 1 byte per weight.
- torchao's float8 casts per micro-batch and keeps nothing between them; with FSDP2's float8
  all-gather the ZeRO-3 gathered blocks hold their FP8 linear weights at 1 byte instead of 2
  [src: torchao-float8] (the norms stay 16-bit). Only the gathered blocks change, when a
  transformer block is the largest unit gathered (an embedding or output layer larger than a
  block stays 16-bit). FSDP2 at ZeRO-2 keeps its unsharded parameters in the parameter line;
  that line is left as it is (an overestimate with the float8 all-gather).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.memory.buffers import ZERO3_GATHERED_BLOCKS, BufferBytes
from simulator.strategy import ParallelLayout, ZeroStage
from simulator.workload.fp8 import FP8_BYTES, fp8_linear_weights, fp8_weight_cache_bytes

__all__ = ["with_fp8"]


def with_fp8(buffers: BufferBytes, model, layout: ParallelLayout, blocks: tuple[int, ...], largest_block: int,
             block_numel: int, transpose: bool = True) -> BufferBytes:
    """``buffers`` of a rank holding the transformer blocks ``blocks`` (layer indices; ``block_numel``
    elements in the first, ``largest_block``: the largest unit ZeRO-3 gathers), with the FP8 recipe's
    changes (module docstring); ``transpose``: whether the device's FP8 GEMMs need transposed copies
    (:func:`~simulator.workload.fp8.fp8_needs_transpose`)."""
    s = layout.strategy
    recipe = s.resolved_fp8_recipe
    if recipe.caches_weights:
        cache = fp8_weight_cache_bytes(model, layout.tp, layout.ep, blocks, recipe, transpose)
        return replace(buffers, fp8_weights_bytes=float(cache))
    if s.fp8_all_gather and s.zero is ZeroStage.ZERO3 and blocks and largest_block == block_numel:
        saved = ZERO3_GATHERED_BLOCKS * fp8_linear_weights(model, layout.tp) * (model.dtype.param_bytes - FP8_BYTES)
        return replace(buffers, gathered_params_bytes=buffers.gathered_params_bytes - saved)
    return buffers
