"""FP8 training: which GEMMs run in FP8, and the casts each framework's recipe adds.

The linear layers of a block (Q/K/V, output projection, MLP in and out) run their three GEMMs —
forward, input gradient, weight gradient — on FP8 operands at the device's FP8 peak: E4M3 for
activations and weights, E5M2 for gradients in the "hybrid" format both recipes default to
(Micikevicius et al. 2022, "FP8 Formats for Deep Learning" [src: micikevicius-2022]). An FP8 GEMM
reads 1-byte operands and writes its output in BF16. Everything else stays in BF16: the attention
core (TE's ``DotProductAttention`` runs BF16 unless ``fp8_dpa`` is set), norms, element-wise kernels,
the embedding, and the output layer — torchtitan's float8 converter skips it by default
(``filter_fqns=["output"]``) [src: torchao-float8], and Megatron-LM's output layer is a plain
``ColumnParallelLinear``, not a Transformer Engine module [src: te-fp8].

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
  so the cast is charged once per step (:func:`te_weight_cast_bytes`), and the FP8 copies stay in
  memory: 2 bytes per parameter of the FP8 linears (:func:`fp8_weight_cache_bytes`).
- **torchao float8, tensorwise dynamic scaling** (torchtitan ``--model.converters float8``) [src:
  torchao-float8]: each cast computes the tensor's amax first (a reduction pass, ``e·n`` read) and
  then scales and casts (``e·n`` read, ``n`` written); the transposed layout is one more copy of the
  FP8 tensor (``n`` read, ``n`` written): ``2·e + 3`` bytes per element. Inputs, weights (every
  micro-batch: nothing is cached) and output gradients are all cast this way. With FSDP2's float8
  all-gather (``enable_fsdp_float8_all_gather``) the weight is cast on its shard before the gather,
  so the cast covers ``1/dp`` of the weight and the all-gather moves 1 byte per parameter.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from typing import TYPE_CHECKING

from simulator.dtypes import Dtype
from simulator.workload.ops import Kernel, OpKind, OpWork, gemm, memory

if TYPE_CHECKING:
    from simulator.workload.transformer import TransformerSpec

__all__ = ["FP8_BYTES", "FP8_OPS", "Fp8Recipe", "MatmulPrecision", "fp8_block", "fp8_linear_weights",
           "fp8_weight_cache_bytes", "te_weight_cast_bytes"]

FP8_BYTES = 1
"""Bytes per FP8 element (E4M3 or E5M2)."""

FP8_OPS = (OpKind.QKV, OpKind.OUT_PROJ, OpKind.MLP)
"""The operations whose GEMMs run in FP8 (module docstring)."""

_FUSED_INPUT_CAST = ("qkv", "mlp_in", "mlp_out")
"""GEMMs whose input a norm or the MLP activation produces: Transformer Engine casts it there."""


class MatmulPrecision(Enum):
    """The format of the block's linear-layer GEMMs."""

    MODEL = "model"
    """The model's own compute format (its dtype policy: bf16, fp16 or fp32). Default."""
    FP8 = "fp8"
    """FP8 GEMMs for the linear layers, BF16 for the rest, by the framework's recipe (:class:`Fp8Recipe`)."""


class Fp8Recipe(Enum):
    """How a framework runs its FP8 GEMMs (module docstring)."""

    TE = "te"
    """NVIDIA Transformer Engine, delayed scaling (Megatron-LM); fused cast+transpose, FP8 weights
    cached over a step's micro-batches."""
    TORCHAO = "torchao"
    """torchao float8 training, tensorwise dynamic scaling (torchtitan); an amax pass per cast, weights
    cast every micro-batch."""

    def cast_bytes_per_element(self, e: int) -> int:
        """Bytes moved to cast one BF16 element into FP8 with its transposed copy: TE ``e + 2``,
        torchao ``2·e + 3`` (module docstring)."""
        if self is Fp8Recipe.TE:
            return e + 2 * FP8_BYTES
        return 2 * e + 3 * FP8_BYTES


def _fp8_gemm(kernel: Kernel, e: int) -> Kernel:
    """The same GEMM on FP8 operands: 1-byte inputs, an ``e``-byte output, timed at the FP8 peak."""
    m, n, k, batch = kernel.shape.m, kernel.shape.n, kernel.shape.k, kernel.shape.batch
    out = gemm(kernel.name, m, n, k, e, batch)
    return replace(out, bytes=float(batch * (FP8_BYTES * (m * k + k * n) + e * m * n)), dtype=Dtype.FP8)


def _casts(kernel: Kernel, recipe: Fp8Recipe, e: int, weight_shards: int) -> tuple[list[Kernel], list[Kernel]]:
    """(forward, backward) cast kernels of one forward GEMM ``kernel`` (m×k input, k×n weight, m×n output)."""
    m, n, k = kernel.shape.m, kernel.shape.n, kernel.shape.k
    per = recipe.cast_bytes_per_element(e)
    fwd = []
    if not (recipe is Fp8Recipe.TE and kernel.name in _FUSED_INPUT_CAST):
        fwd.append(memory(f"{kernel.name}.cast_input", per * m * k))
    if recipe is Fp8Recipe.TORCHAO:  # weights cast every micro-batch (on the shard with a float8 all-gather)
        fwd.append(memory(f"{kernel.name}.cast_weight", per * k * n / weight_shards))
    return fwd, [memory(f"{kernel.name}.cast_grad_output", per * m * n)]


def _fp8_op(work: OpWork, recipe: Fp8Recipe, e: int, weight_shards: int) -> OpWork:
    fwd, bwd, casts_f, casts_b = [], [], [], []
    for kernel in work.fwd:
        fwd.append(_fp8_gemm(kernel, e) if kernel.gemm and kernel.shape is not None else kernel)
        if kernel.gemm and kernel.shape is not None:
            f, b = _casts(kernel, recipe, e, weight_shards)
            casts_f += f
            casts_b += b
    bwd = [_fp8_gemm(k, e) if k.gemm and k.shape is not None else k for k in work.bwd]
    return replace(work, fwd=tuple(casts_f + fwd), bwd=tuple(casts_b + bwd))


def fp8_block(works: list[OpWork], recipe: Fp8Recipe, e: int, weight_shards: int = 1) -> list[OpWork]:
    """A block's operations (:func:`simulator.workload.ops.layer_work`) with the linear layers in FP8
    and the recipe's casts added to them (module docstring); ``weight_shards``: ranks a weight is cast
    over (FSDP2's float8 all-gather casts the dp shard; 1 otherwise)."""
    return [_fp8_op(w, recipe, e, weight_shards) if w.op in FP8_OPS else w for w in works]


def fp8_linear_weights(spec: TransformerSpec, tp: int) -> float:
    """Weight elements of a block's FP8 linears on one tensor-parallel rank (Q/K/V, output, MLP)."""
    mats = 3 if spec.activation.value == "swiglu" else 2
    return (spec.hidden * (spec.q_dim + 2 * spec.kv_dim) + spec.q_dim * spec.hidden
            + mats * spec.hidden * spec.ffn_size) / tp


def te_weight_cast_bytes(spec: TransformerSpec, tp: int) -> float:
    """Bytes Transformer Engine moves per block per optimizer step to cast its FP8 weights (and
    transposes) once: ``(e + 2) ×`` the block's linear weights on this rank."""
    return Fp8Recipe.TE.cast_bytes_per_element(spec.dtype.activation_bytes) * fp8_linear_weights(spec, tp)


def fp8_weight_cache_bytes(spec: TransformerSpec, tp: int) -> float:
    """Bytes per block of the FP8 weights and transposes Transformer Engine keeps: 2 per weight."""
    return 2 * FP8_BYTES * fp8_linear_weights(spec, tp)
