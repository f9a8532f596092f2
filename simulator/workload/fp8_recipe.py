"""FP8 recipes: the formats a framework runs its FP8 GEMMs in, and the bytes each cast moves.

Casting an ``n``-element BF16 tensor (``e`` = 2 bytes) into FP8 is memory-bound; the backward GEMMs
also need each FP8 operand transposed (Hopper's FP8 tensor cores take only the TN layout), so every
cast also produces a transposed copy. Per recipe (:class:`Fp8Recipe`):

- **Transformer Engine** (Megatron-LM ``--fp8-format hybrid``; delayed scaling: the scale comes
  from an amax history, the new amax is reduced inside the cast) [src: te-fp8]: one fused
  ``cast_transpose`` pass, reads ``e·n`` and writes ``2·n`` (FP8 and its transpose): ``e + 2`` bytes
  per element. The inputs of Q/K/V and MLP-in are cast by the norm that produces them
  (``LayerNormLinear`` / ``LayerNormMLP``), and MLP-out's by the activation kernel (``LayerNormMLP``
  quantizes the activation's output): they write the FP8 output and its transpose instead of their
  BF16 output — as many bytes: no extra kernel. The weights are cast once per optimizer step:
  TE keeps the FP8 weights (and transposes) over a step's micro-batches (``is_first_microbatch``),
  so the cast is charged once per step (:func:`simulator.workload.fp8.te_weight_cast_bytes`), and the FP8 copies stay in
  memory: 2 bytes per parameter of the FP8 linears (:func:`simulator.workload.fp8.fp8_weight_cache_bytes`).
- **torchao float8, tensorwise dynamic scaling** (torchtitan ``--model.converters float8``) [src:
  torchao-float8]: each cast computes the tensor's amax first (a reduction pass, ``e·n`` read) and
  then scales and casts (``e·n`` read, ``n`` written); the transposed layout is one more copy of the
  FP8 tensor (``n`` read, ``n`` written): ``2·e + 3`` bytes per element. Inputs, weights (every
  micro-batch: nothing is cached) and output gradients are all cast this way. With FSDP2's float8
  all-gather (``enable_fsdp_float8_all_gather``) the weight is cast on its shard before the gather,
  so the cast covers ``1/dp`` of the weight and the all-gather moves 1 byte per parameter.
- **torchao float8, rowwise dynamic scaling** (``Float8LinearConfig.from_recipe_name("rowwise")``) [src:
  torchao-float8-rowwise]: one scale per row, E4M3 for every operand. A row-scaled tensor cannot serve as its own
  transpose (the scales run along the other axis), so each GEMM use quantizes the BF16 source along its own axis:
  input, weight and output gradient are each cast twice, ``2·(2·e + 1)`` bytes per element (the two amax passes
  and casts). Weights are cast every micro-batch; torchao's float8 all-gather is tensorwise only.
- **Transformer Engine, FP8 block scaling** (``Float8BlockScaling``, Megatron-LM ``--fp8-recipe
  blockwise``; DeepSeek-V3's fine-grained quantization, §3.3.2 of its report [src: deepseek-v3]) [src:
  te-fp8-blockwise]: one FP32 scale per 1×128 block of activations and gradients and per 128×128 block
  of weights, E4M3 throughout. A 1×128-scaled tensor cannot be transposed after quantization (its
  column blocks differ), so the rowwise and columnwise copies are both quantized from the BF16 source
  — in one kernel (TE's ``block_scaled_1d_cast_transpose_kernel`` reads the input once and writes both
  copies and their scales): ``e + 2 + 2·4/128`` bytes per element. The norm and activation outputs are
  not quantized inside those kernels here (TE fuses the FP8 output into the norm for per-tensor scaling;
  for block scaling this model charges a separate quantize of every GEMM input: an assumption). Weights
  are cast once per step and kept in FP8 with their transpose, as for ``te``. The block-scaled GEMMs
  run at the device's FP8 rate like the per-tensor ones: Hopper runs them with the scales applied in
  software (the TE documentation's word), which NVIDIA's own H200 GEMM profile puts at 1.40× over BF16
  against 1.58× (current) and 1.69× (delayed) with quantization included [src: te-gemm-profiling];
  the GEMMs' share of that slowdown, 1.222× a per-tensor FP8 GEMM on SM 9.x, is charged
  (:mod:`simulator.workload.fp8_block_gemm`).

- **Transformer Engine, current scaling** (``Float8CurrentScaling``, Megatron-LM ``--fp8-recipe tensorwise``,
  Megatron-Bridge's "FP8-CS") [src: te-fp8-current]: one FP32 scale per tensor from the tensor's own amax,
  so quantizing reads the tensor twice — the amax pass, then scale, cast and (Hopper, Ada) transpose:
  ``2·e + 2`` bytes per element; no norm-fused quantize (the amax must be known before the cast); weights
  cast once per step and cached, as ``te``.
- **Transformer Engine, MXFP8** (``MXFP8BlockScaling``, Blackwell, SM 10.0+) [src: te-mxfp8]: one E8M0
  (1-byte) scale per 32 consecutive elements; the rowwise and columnwise copies are scaled along
  different axes, so both are quantized from the BF16 source (one pass here, as ``te-blockwise``):
  ``e + 2 + 2·1/32`` bytes per element; no norm-fused quantize (assumption); weights cached.

Blackwell's FP8 GEMMs take every layout, so a per-tensor recipe there needs no transposed copy [src:
te-fp8-current]: Transformer Engine's ``is_non_tn_fp8_gemm_supported()`` (``transformer_engine/pytorch/utils.py``)
is true for compute capability 10.x and from 13.0 (not 12.x), and ``Float8Tensor``'s ``update_usage`` then keeps
one copy for both usages and drops the transpose [src: te-non-tn-fp8] (:func:`fp8_needs_transpose`). The ``te``
and ``te-current`` casts, input and weight alike, write the transposed copy only where it is needed (``transpose``
of :meth:`Fp8Recipe.cast_bytes_per_element`): ``e + 1`` and ``2·e + 1`` bytes per element on B200. The FP8 weight
cache of the memory model (:func:`simulator.workload.fp8.fp8_weight_cache_bytes`) keeps one copy there too
(1 byte per FP8 linear weight on B200, 2 on H100). ``te-blockwise`` and ``te-mxfp8`` quantize both copies
from the source on every device (their scales run along different axes); torchao's transposed copy is torch's
layout, kept as it is.

Which GEMMs run in FP8 and where the casts go: :mod:`simulator.workload.fp8`.
"""

from __future__ import annotations

from simulator.enum_kind import Kind

FP8_BYTES = 1
"""Bytes per FP8 element (E4M3 or E5M2)."""

SCALE_BYTES = 4
"""Bytes of one block scale of ``te-blockwise`` (FP32) [src: te-fp8-blockwise]."""

BLOCK_ELEMENTS = 128
"""Elements per 1-D scaling block of ``te-blockwise`` (activations, gradients) [src: te-fp8-blockwise]."""

MX_SCALE_BYTES = 1
"""Bytes of one MXFP8 scale (E8M0) [src: te-mxfp8]."""

MX_BLOCK_ELEMENTS = 32
"""Elements per MXFP8 scaling block [src: te-mxfp8]."""

class MatmulPrecision(Kind):
    """The format of the block's linear-layer GEMMs."""

    MODEL = "model"
    """The model's own compute format (its dtype policy: bf16, fp16 or fp32). Default."""
    FP8 = "fp8"
    """FP8 GEMMs for the linear layers, BF16 for the rest, by the framework's recipe (:class:`Fp8Recipe`)."""


class Fp8Recipe(Kind):
    """How a framework runs its FP8 GEMMs (module docstring)."""

    TE = "te"
    """NVIDIA Transformer Engine, delayed scaling (Megatron-LM); fused cast+transpose, FP8 weights
    cached over a step's micro-batches."""
    TORCHAO = "torchao"
    """torchao float8 training, tensorwise dynamic scaling (torchtitan); an amax pass per cast, weights
    cast every micro-batch."""
    TE_BLOCKWISE = "te-blockwise"
    """Transformer Engine ``Float8BlockScaling`` (DeepSeek-V3's 1×128 / 128×128 block scaling; Megatron-LM
    ``--fp8-recipe blockwise``); both copies quantized from the BF16 source in one pass, FP8 weights
    cached over a step's micro-batches [src: te-fp8-blockwise]."""

    TE_CURRENT = "te-current"
    """Transformer Engine ``Float8CurrentScaling`` (per-tensor scale from the tensor's own amax; Megatron-LM
    ``--fp8-recipe tensorwise``, Megatron-Bridge FP8-CS): an amax pass before each cast-transpose, FP8
    weights cached over a step's micro-batches [src: te-fp8-current]."""
    TE_MXFP8 = "te-mxfp8"
    """Transformer Engine ``MXFP8BlockScaling`` (Blackwell): an E8M0 scale per 32 elements, rowwise and
    columnwise copies quantized from the BF16 source, FP8 weights cached [src: te-mxfp8]."""
    TORCHAO_ROWWISE = "torchao-rowwise"
    """torchao float8 training, rowwise (axiswise) dynamic scaling, E4M3 throughout (``Float8LinearConfig``
    recipe ``rowwise``): each operand quantized from its BF16 source once along rows and once along columns,
    weights cast every micro-batch; no float8 all-gather [src: torchao-float8-rowwise]."""

    def cast_bytes_per_element(self, e: int, transpose: bool = True) -> float:
        """Bytes moved to cast one BF16 element into FP8 with its transposed (or columnwise) copy (module
        docstring): ``te`` ``e + 2``; ``te-current`` ``2·e + 2``; ``te-blockwise`` ``e + 2 + 2·4/128``
        (two FP32 scales per 128 elements); ``te-mxfp8`` ``e + 2 + 2·1/32`` (two E8M0 scales per 32);
        ``torchao`` ``2·e + 3``; ``torchao-rowwise`` ``2·(2·e + 1)`` (two axiswise casts from the BF16 source,
        each an amax pass and a scale-and-cast; the FP32 scale per row, 4 bytes per row, left out). Without
        ``transpose`` (a device whose FP8 GEMMs take every layout, :func:`fp8_needs_transpose`) ``te`` and
        ``te-current`` write one FP8 copy: ``e + 1`` and ``2·e + 1``."""
        copies = self.fp8_copies(transpose)
        if self is Fp8Recipe.TE:
            return e + copies * FP8_BYTES
        if self is Fp8Recipe.TE_CURRENT:
            return 2 * e + copies * FP8_BYTES
        if self is Fp8Recipe.TE_BLOCKWISE:
            return e + 2 * FP8_BYTES + 2 * SCALE_BYTES / BLOCK_ELEMENTS
        if self is Fp8Recipe.TE_MXFP8:
            return e + 2 * FP8_BYTES + 2 * MX_SCALE_BYTES / MX_BLOCK_ELEMENTS
        if self is Fp8Recipe.TORCHAO_ROWWISE:
            return 2 * (2 * e + FP8_BYTES)
        return 2 * e + 3 * FP8_BYTES

    def fp8_copies(self, transpose: bool = True) -> int:
        """FP8 copies a cast writes and a cached weight keeps: 2 (rowwise and transposed or columnwise), 1 for the
        per-tensor ``te`` and ``te-current`` where the device needs no ``transpose`` (module docstring)."""
        return 1 if not transpose and self in (Fp8Recipe.TE, Fp8Recipe.TE_CURRENT) else 2

    @property
    def min_compute_capability(self) -> float:
        """The oldest GPU generation the recipe runs on: SM 8.9 (Ada, Hopper's FP8), block scaling 9.0, MXFP8
        10.0 [src: te-fp8-current, te-fp8-blockwise, te-mxfp8]."""
        return {Fp8Recipe.TE_BLOCKWISE: 9.0, Fp8Recipe.TE_MXFP8: 10.0}.get(self, 8.9)

    @property
    def is_torchao(self) -> bool:
        """Whether torchao's float8 converter runs the recipe (``nn.Linear`` swaps), not Transformer Engine."""
        return self in (Fp8Recipe.TORCHAO, Fp8Recipe.TORCHAO_ROWWISE)

    @property
    def caches_weights(self) -> bool:
        """Transformer Engine's recipes keep the FP8 weights (and transposes) over a step's micro-batches."""
        return not self.is_torchao

    @property
    def fuses_input_casts(self) -> bool:
        """Whether the norm / activation kernels write the FP8 GEMM inputs themselves (``te`` only)."""
        return self is Fp8Recipe.TE


def fp8_needs_transpose(compute_capability: float | None) -> bool:
    """Whether Transformer Engine's per-tensor FP8 casts write a transposed copy on a GPU of this compute
    capability: not where its FP8 GEMMs take non-TN layouts, 10.0 ≤ cc < 12.0 or cc ≥ 13.0
    (``is_non_tn_fp8_gemm_supported``) [src: te-non-tn-fp8]; an unknown device is taken as needing it."""
    if compute_capability is None:
        return True
    return not (10.0 <= compute_capability < 12.0 or compute_capability >= 13.0)
