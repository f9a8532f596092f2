"""Every parameter tensor of a transformer (names and shapes), its tensor-parallel shard, and the
share of it each pipeline stage holds.

Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019, §3): the token embedding and the
output projection are split over the vocabulary (rows ``ceil(V/t)``; Megatron pads V to a multiple
of t, so the ceiling is what a rank holds); Q/K/V and the MLP's first matrix are split by output
rows (column-parallel), the attention output and the MLP's second matrix by input columns
(row-parallel); norms, the learned position table and the row-parallel biases are replicated.
Key/value heads fewer than t are replicated, one head per rank (Megatron's GQA handling).

Pipeline split (:func:`stage_layers`): ``l // p`` blocks per stage; when p does not divide l the
``l mod p`` extra blocks go to the stages after the first (stage 1, 2, ...), since the first stage
already carries the embedding and, under 1F1B, the most micro-batches in flight. The first stage
holds the embeddings, the last the final norm and the output projection; with tied embeddings and
p > 1 the last stage keeps its own copy of the embedding matrix as the head (Megatron's
``word_embeddings`` on the last stage, kept equal by an all-reduce of their gradients).
"""

from __future__ import annotations

from math import ceil, prod

from simulator.checks import positive_int
from simulator.errors import SpecError
from simulator.memory.moe import moe_mlp_shapes
from simulator.strategy.layer_split import even_split
from simulator.workload.transformer import ActivationKind, BiasKind, NormKind, PositionKind, TransformerSpec

Shape = tuple[int, ...]
NamedShapes = list[tuple[str, Shape]]


def numel(shape: Shape) -> int:
    """Elements of a tensor of ``shape``."""
    return prod(shape)


def check_tp(spec: TransformerSpec, tp: int) -> None:
    """The workload's own tensor-parallel rule (:meth:`TransformerSpec.check_tp`: tp divides the
    query heads and the key/value heads), after checking tp is a positive integer."""
    positive_int("tp", tp)
    spec.check_tp(tp)


def _kv_rows(spec: TransformerSpec, tp: int) -> int:
    """K (or V) rows a tensor-parallel rank holds: kv_dim/t, or one replicated head when kv < t."""
    return spec.kv_dim // tp if spec.n_kv_heads % tp == 0 else spec.d_head


def _norm(prefix: str, spec: TransformerSpec) -> NamedShapes:
    h = spec.hidden
    out: NamedShapes = [(f"{prefix}.weight", (h,))]
    if spec.norm is NormKind.LAYERNORM:
        out.append((f"{prefix}.bias", (h,)))
    return out


def layer_param_shapes(spec: TransformerSpec, i: int, tp: int = 1, ep: int = 1) -> NamedShapes:
    """The tensors of block ``i`` as one tensor-parallel rank holds them (names per the contract); a
    mixture-of-experts block has its router and experts (this rank's E/ep) instead of the MLP
    (:func:`simulator.memory.moe.moe_mlp_shapes`), a Multi-head Latent Attention block its projections
    instead of Q/K/V and output (:func:`_mla_shapes`)."""
    p = f"layers.{i}"
    out = _norm(f"{p}.norm1", spec)
    if spec.mla is not None:
        out += _mla_shapes(spec, p, tp)
    else:
        out += _attention_shapes(spec, p, tp)
    out += _norm(f"{p}.norm2", spec)
    if spec.is_moe_layer(i):
        return out + moe_mlp_shapes(spec, i, tp, ep)
    return out + _mlp_shapes(spec, p, tp)


def _mla_shapes(spec: TransformerSpec, p: str, tp: int) -> NamedShapes:
    """Multi-head Latent Attention's projections (the per-head ones split over tp, the down-projections
    replicated) and its latent norms (:mod:`simulator.workload.mla`)."""
    mla, split = spec.mla, ("q", "q_up", "kv_up")
    out: NamedShapes = []
    for name, (i, o) in spec.mla.projections(spec.hidden, spec.heads).items():
        if name == "out":
            out.append((f"{p}.attn.out.weight", (spec.hidden, ceil(i / tp))))
        else:
            out.append((f"{p}.attn.{name}.weight", (ceil(o / tp) if name in split else o, i)))
    out.append((f"{p}.attn.kv_norm.weight", (mla.kv_lora_rank,)))
    if mla.q_lora_rank is not None:
        out.append((f"{p}.attn.q_norm.weight", (mla.q_lora_rank,)))
    return out


def _attention_shapes(spec: TransformerSpec, p: str, tp: int) -> NamedShapes:
    h, q = spec.hidden, spec.q_dim // tp
    qkv_rows = q + 2 * _kv_rows(spec, tp)
    out: NamedShapes = [(f"{p}.attn.qkv.weight", (qkv_rows, h))]
    if spec.bias in (BiasKind.QKV, BiasKind.ALL):
        out.append((f"{p}.attn.qkv.bias", (qkv_rows,)))
    out.append((f"{p}.attn.out.weight", (h, q)))
    if spec.bias is BiasKind.ALL:
        out.append((f"{p}.attn.out.bias", (h,)))
    return out


def _mlp_shapes(spec: TransformerSpec, p: str, tp: int) -> NamedShapes:
    h, f = spec.hidden, ceil(spec.ffn_size / tp)
    up_rows = 2 * f if spec.activation is ActivationKind.SWIGLU else f
    all_bias = spec.bias is BiasKind.ALL
    out: NamedShapes = [(f"{p}.mlp.up.weight", (up_rows, h))]
    if all_bias:
        out.append((f"{p}.mlp.up.bias", (up_rows,)))
    out.append((f"{p}.mlp.down.weight", (h, f)))
    if all_bias:
        out.append((f"{p}.mlp.down.bias", (h,)))
    return out


def embedding_shapes(spec: TransformerSpec, tp: int = 1) -> NamedShapes:
    """Token embedding (vocab-parallel) and, for learned positions, the replicated position table."""
    out: NamedShapes = [("embed.tok.weight", (ceil(spec.vocab / tp), spec.hidden))]
    if spec.position is PositionKind.LEARNED:
        out.append(("embed.pos.weight", (spec.positions, spec.hidden)))
    return out


def head_shapes(spec: TransformerSpec, tp: int = 1, *, separate_stage: bool = False) -> NamedShapes:
    """Final norm and the output projection (absent when tied, unless the head sits on another stage)."""
    out = _norm("norm_f", spec)
    if not spec.tied_embeddings or separate_stage:
        out.append(("head.weight", (ceil(spec.vocab / tp), spec.hidden)))
    return out


def transformer_param_shapes(spec: TransformerSpec, tp: int = 1) -> NamedShapes:
    """Every parameter tensor of ``spec`` (one tensor-parallel rank's shard when tp > 1), in the
    order embeddings, blocks 0..l-1, final norm, head. With tp = 1 the numels sum to ``spec.params``."""
    check_tp(spec, tp)
    out = embedding_shapes(spec, tp)
    for i in range(spec.layers):
        out += layer_param_shapes(spec, i, tp)
    return out + head_shapes(spec, tp)


def stage_layers(layers: int, pp: int) -> list[range]:
    """Blocks of each pipeline stage: l // p each, the l mod p extra ones to stages 1, 2, ..."""
    positive_int("pp", pp)
    if pp > layers:
        raise SpecError("pp", f"{pp} pipeline stages for {layers} layers: every stage needs at least one "
                        f"layer; use pp <= {layers}")
    ranges, start = [], 0
    for count in even_split(layers, pp):
        ranges.append(range(start, start + count))
        start += count
    return ranges


def stage_param_shapes(spec: TransformerSpec, *, tp: int = 1, pp: int = 1, stage: int = 0,
                       layers=None, ep: int = 1) -> NamedShapes:
    """The tensors one rank of pipeline stage ``stage`` holds (its tensor-parallel shard).

    ``layers``: the block indices the rank holds (a layout's :meth:`~ParallelLayout.layer_indices`);
    None: the even split of :func:`stage_layers`.
    """
    check_tp(spec, tp)
    if not 0 <= stage < pp:
        raise SpecError("stage", f"stage {stage} is outside 0..{pp - 1}")
    out: NamedShapes = embedding_shapes(spec, tp) if stage == 0 else []
    for i in (stage_layers(spec.layers, pp)[stage] if layers is None else layers):
        out += layer_param_shapes(spec, i, tp, ep)
    if stage == pp - 1:
        out += head_shapes(spec, tp, separate_stage=pp > 1)
    return out
