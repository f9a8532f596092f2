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

The casts each recipe adds, and the bytes a cast moves: :mod:`simulator.workload.fp8_recipe`.

Mixture-of-experts blocks (Transformer Engine's recipes only, :func:`simulator.strategy.precision.check_fp8`):
Transformer Engine's ``GroupedLinear`` (Megatron-Core ``--moe-grouped-gemm`` with TE) runs the local
experts' GEMMs in FP8 [src: megatron-core, te-fp8]: the grouped GEMMs of
:mod:`simulator.workload.moe_ops` (``batch`` = local experts, each on its own rows) become FP8 GEMMs
through the same grouped-GEMM efficiency, each expert's input and output gradient is cast (``batch ×``
the rows), and the local experts' weights join the rank's FP8 weight cache (:func:`fp8_linear_weights`).
The permuted tokens reach ``GroupedLinear`` in BF16: Megatron-Core's all-to-all and DeepEP
dispatchers move the BF16 hidden states and the quantization happens inside the experts' linear
(DeepSeek-V3's own framework dispatches FP8 and combines BF16, §3.3.2; not a framework modelled
here), so the dispatch bytes do not change. The router stays in BF16 (Megatron-Core's router is not a
TE module). Latent-attention projections are TE linears and run in FP8 like Q/K/V.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from simulator.dtypes import Dtype
from simulator.workload.fp8_eager import eager_torchao_casts
from simulator.workload.fp8_recipe import FP8_BYTES, Fp8Recipe, MatmulPrecision, fp8_needs_transpose
from simulator.workload.kernels import Kernel, OpKind, OpWork, gemm, memory

if TYPE_CHECKING:
    from simulator.workload.transformer import TransformerSpec

__all__ = ["FP8_BYTES", "FP8_OPS", "Fp8Recipe", "MatmulPrecision", "fp8_block", "fp8_linear_weights",
           "fp8_needs_transpose",
           "fp8_weight_cache_bytes", "rank_fp8_linear_weights", "te_weight_cast_bytes"]

FP8_OPS = (OpKind.QKV, OpKind.OUT_PROJ, OpKind.MLP)
"""The operations whose GEMMs run in FP8 (module docstring)."""

_FUSED_INPUT_CAST = ("qkv", "mlp_in", "mlp_out")
"""GEMMs whose input a norm or the MLP activation produces: Transformer Engine casts it there."""


def _fp8_gemm(kernel: Kernel, e: int, recipe: Fp8Recipe) -> Kernel:
    """The same GEMM on FP8 operands: 1-byte inputs, an ``e``-byte output, timed at the FP8 peak (block-scaled
    under ``te-blockwise``: :mod:`simulator.workload.fp8_block_gemm`)."""
    m, n, k, batch = kernel.shape.m, kernel.shape.n, kernel.shape.k, kernel.shape.batch
    out = gemm(kernel.name, m, n, k, e, batch)
    return replace(out, bytes=float(batch * (FP8_BYTES * (m * k + k * n) + e * m * n)), dtype=Dtype.FP8,
                   block_scaled=recipe is Fp8Recipe.TE_BLOCKWISE)


def _casts(kernel: Kernel, recipe: Fp8Recipe, e: int, weight_shards: int,
           transpose: bool, eager: bool = False) -> tuple[list[Kernel], list[Kernel]]:
    """(forward, backward) cast kernels of one forward GEMM ``kernel`` (m×k input, k×n weight, m×n output,
    ``batch`` times: a grouped GEMM's experts each cast their own rows and weight); ``eager``: torchao's
    tensorwise recipe without ``torch.compile`` (:func:`simulator.workload.fp8_eager.eager_torchao_casts`)."""
    if eager and recipe.is_torchao:
        return eager_torchao_casts(kernel, e, weight_shards, rowwise=recipe is Fp8Recipe.TORCHAO_ROWWISE)
    m, n, k, batch = kernel.shape.m, kernel.shape.n, kernel.shape.k, kernel.shape.batch
    per = recipe.cast_bytes_per_element(e, transpose)
    fwd = []
    if not (recipe.fuses_input_casts and kernel.name in _FUSED_INPUT_CAST):
        fwd.append(memory(f"{kernel.name}.cast_input", per * m * k * batch))
    if not recipe.caches_weights:  # weights cast every micro-batch (on the shard with a float8 all-gather)
        fwd.append(memory(f"{kernel.name}.cast_weight", per * k * n * batch / weight_shards))
    return fwd, [memory(f"{kernel.name}.cast_grad_output", per * m * n * batch)]


def _fp8_op(work: OpWork, recipe: Fp8Recipe, e: int, weight_shards: int, transpose: bool, eager: bool) -> OpWork:
    fwd, bwd, casts_f, casts_b = [], [], [], []
    for kernel in work.fwd:
        fwd.append(_fp8_gemm(kernel, e, recipe) if kernel.gemm and kernel.shape is not None else kernel)
        if kernel.gemm and kernel.shape is not None:
            f, b = _casts(kernel, recipe, e, weight_shards, transpose, eager)
            casts_f += f
            casts_b += b
    bwd = [_fp8_gemm(k, e, recipe) if k.gemm and k.shape is not None else k for k in work.bwd]
    return replace(work, fwd=tuple(casts_f + fwd), bwd=tuple(casts_b + bwd))


def fp8_block(works: list[OpWork], recipe: Fp8Recipe, e: int, weight_shards: int = 1,
              transpose: bool = True, eager: bool = False) -> list[OpWork]:
    """A block's operations (:func:`simulator.workload.ops.layer_work`) with the linear layers in FP8
    and the recipe's casts added to them (module docstring); ``weight_shards``: ranks a weight is cast
    over (FSDP2's float8 all-gather casts the dp shard; 1 otherwise); ``transpose``: whether the device
    needs the transposed copies (:func:`fp8_needs_transpose`); ``eager``: the framework runs its kernels
    eagerly (``kernel_fusion eager``): torchao's tensorwise casts are then separate kernels per pass."""
    return [_fp8_op(w, recipe, e, weight_shards, transpose, eager) if w.op in FP8_OPS else w for w in works]


def fp8_linear_weights(spec: TransformerSpec, tp: int, ep: int = 1, moe_layer: bool = False) -> float:
    """Weight elements of one block's FP8 linears on one tensor-parallel rank: the attention projections
    (Q/K/V and output, or latent attention's: the head-split ones ÷ tp, the down-projections replicated,
    :mod:`simulator.workload.mla_ops`) and the MLP — dense, or in a MoE layer the ``E/ep`` local routed
    experts and the shared experts (÷ tp: expert tensor parallelism = tp); the router stays BF16."""
    mats = spec.mlp_mats
    if spec.mla is not None:
        split = ("q", "q_up", "kv_up", "out")
        attention = sum(i * o / (tp if name in split else 1)
                        for name, (i, o) in spec.mla.projections(spec.hidden, spec.heads).items())
    else:
        attention = (spec.hidden * (spec.q_dim + 2 * spec.kv_dim) + spec.q_dim * spec.hidden) / tp
    if moe_layer and spec.moe is not None:
        moe = spec.moe
        mlp = (moe.experts / ep * moe.expert_params(spec.hidden, mats) + mats * spec.hidden * moe.shared_width) / tp
    else:
        mlp = mats * spec.hidden * spec.ffn_size / tp
    return attention + mlp


def rank_fp8_linear_weights(spec: TransformerSpec, tp: int, ep: int, layers) -> float:
    """FP8 linear weight elements of the blocks ``layers`` (indices) on one rank (:func:`fp8_linear_weights`)."""
    return sum(fp8_linear_weights(spec, tp, ep, spec.is_moe_layer(i)) for i in layers)


def te_weight_cast_bytes(spec: TransformerSpec, tp: int, recipe: Fp8Recipe = Fp8Recipe.TE, ep: int = 1,
                         layers=(0,), transpose: bool = True) -> float:
    """Bytes Transformer Engine moves per optimizer step to cast the FP8 weights (and, where ``transpose``, their
    transposes) of the blocks ``layers`` once: the recipe's bytes per element × their linear weights on this rank."""
    per = recipe.cast_bytes_per_element(spec.dtype.activation_bytes, transpose)
    return per * rank_fp8_linear_weights(spec, tp, ep, layers)


def fp8_weight_cache_bytes(spec: TransformerSpec, tp: int, ep: int = 1, layers=(0,),
                           recipe: Fp8Recipe = Fp8Recipe.TE, transpose: bool = True) -> float:
    """Bytes of the FP8 weights (and transposed or columnwise copies) Transformer Engine keeps for the blocks
    ``layers``: :meth:`Fp8Recipe.fp8_copies` bytes per weight, 2, or 1 for ``te`` / ``te-current`` on a device
    that needs no ``transpose`` [src: te-non-tn-fp8] (the block scales of ``te-blockwise``'s 128×128 weight
    blocks, 8 bytes per 16,384 weights, are left out)."""
    return recipe.fp8_copies(transpose) * FP8_BYTES * rank_fp8_linear_weights(spec, tp, ep, layers)
