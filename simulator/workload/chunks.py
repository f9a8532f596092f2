"""One pipeline chunk's load for each workload kind: its kernels, parameters and boundary bytes.

Transformer (:mod:`simulator.workload.ops` kernels): a chunk of ``L`` blocks is ``L`` repetitions
of one block's kernels on one tensor-parallel rank (a MoE model: its dense and its MoE blocks, each
kind repeated; the routed experts' parameters ÷ tp·ep, the rest ÷ tp, and ``block_params`` their
mean per block, what ZeRO-3 gathers per block), plus the embedding on the model's first chunk
and the final norm, logits and loss on its last. Recomputation repeats forward work inside
backward (:func:`recomputed`). Parameters a rank holds: a block's parameters divided by tp (an
approximation: Megatron replicates norms and row-parallel biases, under 0.01 % of a GPT block), the
token embedding (vocabulary-parallel, ÷tp) with the position table on the first chunk, the final
norm and the output matrix on the last — Megatron keeps a copy of a tied embedding on the last stage
when the model is split, so the last chunk holds V·h/tp then too.

Both kinds: where the framework adds each micro-batch's gradients into an accumulator on the compute stream
(``options.grad_add``), a memory-bound kernel over the parameters the unit holds joins its backward
(:mod:`simulator.workload.grad_accum`).

Layer list: one kernel per layer and phase (:func:`layer_kernel`), plus a layer's gradient add; full
recomputation repeats the chunk's forward; selective recomputes nothing, whatever the attention kind: a layer list names no
attention core (its layers are opaque), so there is none to recompute.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING

from simulator.workload.autocast import autocast_block
from simulator.workload.eager_norm import with_norm_weight_grads
from simulator.workload.flops import Recompute
from simulator.workload.fp8 import fp8_block
from simulator.workload.grad_accum import grad_add_kernel, with_grad_add
from simulator.workload.kinds import DtypePolicy, KernelFusion
from simulator.workload.blocks import block_work
from simulator.workload.op_sac import op_sac_recompute
from simulator.workload.ops import Kernel, OpKind, OpWork, Scope, edge_work
from simulator.workload.loss import with_loss
from simulator.workload.model_code import kv_repeat, with_model_code
from simulator.workload.protocol import ChunkLoad, ChunkSlice, ComputeOptions, WorkUnit

if TYPE_CHECKING:
    from simulator.workload.layers import LayerListWorkload, LayerSpec
    from simulator.workload.transformer import TransformerSpec

__all__ = ["block_params_held", "edge_params_held", "layer_kernel", "layer_list_chunk_load", "recomputed",
           "transformer_chunk_load", "transformer_fields_options"]


def recomputed(work: OpWork, recompute: Recompute, flash_attention: bool) -> bool:
    """Whether backward repeats ``work``'s forward. Full: every block operation. Selective: the
    eager attention core (Korthikanti et al. 2022 §5), whose scores it does not keep; with flash
    attention nothing — no scores are stored, and the flash backward kernel already recomputes them
    (its cost is in the backward row). Megatron-LM's first flash path likewise checkpointed core
    attention only when not using flash (``ParallelAttention.forward`` in
    megatron/model/transformer.py, 2023; see also Dao-AILab/flash-attention issue #257), and the
    memory model drops nothing there (:mod:`simulator.memory.activations`)."""
    if work.scope is not Scope.LAYER:
        return False
    if recompute is Recompute.FULL:
        return True
    return recompute is Recompute.SELECTIVE and not flash_attention and work.op is OpKind.ATTENTION


def _unit(works: list[OpWork], recompute: Recompute, flash_attention: bool) -> WorkUnit:
    return WorkUnit(fwd=tuple(w.fwd for w in works), bwd=tuple(w.bwd for w in works),
                    recompute=tuple(w.fwd for w in works if recomputed(w, recompute, flash_attention)))


def _moe_blocks(spec: TransformerSpec, chunk: ChunkSlice) -> int:
    return sum(1 for i in range(chunk.start, chunk.start + chunk.layers) if spec.is_moe_layer(i))


def transformer_units(spec: TransformerSpec, chunk: ChunkSlice, o: ComputeOptions) -> tuple:
    """The (repetitions, unit) pairs of a transformer chunk: its dense blocks' unit, its MoE blocks' unit, then the
    embedding's unit on the model's first chunk and the head's on its last. A chunk of no layers has only its edges'
    units (what :mod:`simulator.compile.chunk_loads` asks of each chunk position)."""
    moe = _moe_blocks(spec, chunk)
    units = []
    for count, moe_layer in ((chunk.layers - moe, False), (moe, True)):
        if count:
            block = block_work(spec, o.micro_batch, spec.seq_len, o.tp, moe_layer=moe_layer, ep=o.ep,
                               routing_skew=o.routing_skew, flash_attention=o.flash_attention,
                               sequence_parallel=o.sequence_parallel, fusion=o.fusion, context=o.context,
                               attention_backend=o.attention_backend)
            block = with_norm_weight_grads(block, o.fusion, o.cuda_kernels)
            kv_elems, n_rep = kv_repeat(spec, o.micro_batch * spec.seq_len // o.context.degree, o.tp)
            block = with_model_code(block, o.model_code, o.fusion, spec.dtype.activation_bytes, kv_elems, n_rep)
            if o.fp8 is not None:
                block = fp8_block(block, o.fp8, spec.dtype.activation_bytes, o.fp8_weight_shards, o.fp8_transpose,
                                  eager=o.fusion is KernelFusion.EAGER)
            if o.autocast:
                block = autocast_block(block, spec.dtype.activation_bytes, spec.bias, o.model_code)
            block = with_grad_add(block, o.grad_add, block_params_held(spec, moe_layer, o.tp, o.ep), OpKind.ELEMENTWISE)
            unit = _unit(block, o.recompute, o.flash_attention)
            if o.recompute is Recompute.SELECTIVE_OP:
                tokens = o.micro_batch * spec.seq_len // o.context.degree
                unit = dataclasses.replace(unit, recompute=op_sac_recompute(block, spec, tokens, o.tp))
            units.append((count, unit))
    if chunk.first or chunk.last:
        edge = edge_work(spec, o.micro_batch, spec.seq_len, o.tp, sequence_parallel=o.sequence_parallel,
                         fusion=o.fusion, context=o.context, vocab_multiple=o.vocab_multiple)
        edge = with_norm_weight_grads(with_loss(edge, o.loss, spec.dtype.activation_bytes, autocast=o.autocast), o.fusion, o.cuda_kernels)
        edge = with_model_code(edge, o.model_code, o.fusion, spec.dtype.activation_bytes)
        if o.autocast:
            edge = autocast_block(edge, spec.dtype.activation_bytes, spec.bias, o.model_code)
        for scope, wanted, owner in ((Scope.FIRST, chunk.first, OpKind.EMBEDDING),
                                     (Scope.LAST, chunk.last, OpKind.LOGITS)):
            if wanted:
                works = with_grad_add([w for w in edge if w.scope is scope], o.grad_add,
                                      edge_params_held(spec, chunk, o.tp, scope), owner)
                units.append((1, _unit(works, Recompute.NONE, o.flash_attention)))
    return tuple(units)


def block_params_held(spec: TransformerSpec, moe_layer: bool, tp: int, ep: int) -> float:
    """Parameters of one block on a rank: the routed experts' ÷ tp·ep, the rest ÷ tp."""
    if not moe_layer:
        return spec.layer_params / tp
    experts = spec.moe.experts * spec.moe.expert_params(spec.hidden, spec.mlp_mats)
    block = spec.attention_params + spec.moe.mlp_params(spec.hidden, spec.mlp_mats) + 2 * spec.norm_params
    return (block - experts) / tp + experts / (tp * ep)


def edge_params_held(spec: TransformerSpec, chunk: ChunkSlice, tp: int, scope: Scope) -> float:
    """Parameters outside the blocks on a rank: the token embedding (÷tp) and a learned position table on the
    first chunk; the final norm and the output matrix (÷tp; a tied one's copy when the model is split) on the
    last."""
    vh = spec.vocab * spec.hidden
    if scope is Scope.FIRST:
        return vh / tp + (spec.embedding_params - vh)
    return spec.norm_params + (vh / tp if not spec.tied_embeddings or chunk.count > 1 else 0.0)


def transformer_chunk_load(spec: TransformerSpec, chunk: ChunkSlice, options: ComputeOptions,
                           units: tuple | None = None) -> ChunkLoad:
    """Load of a transformer chunk of ``chunk.layers`` blocks (see the module docstring). ``units``: the chunk's
    (repetitions, unit) pairs where the caller already has them (a dense model's block unit is the same for every
    layer count: :mod:`simulator.compile.chunk_loads`); None: built here."""
    tp = options.tp
    edge = 0.0
    if chunk.first:
        edge += edge_params_held(spec, chunk, tp, Scope.FIRST)
    if chunk.last:
        edge += edge_params_held(spec, chunk, tp, Scope.LAST)
    local_seq = spec.seq_len // options.context.degree  # a context-parallel rank hands on its s/cp tokens
    boundary = options.micro_batch * local_seq * spec.hidden * spec.dtype.activation_bytes
    moe = _moe_blocks(spec, chunk)
    experts = moe * (spec.expert_params / spec.moe.moe_layers(spec.layers) if moe else 0)
    blocks = sum(spec.block_params(i) for i in range(chunk.start, chunk.start + chunk.layers))
    held = (blocks - experts) / tp + experts / (tp * options.ep)
    return ChunkLoad(units=transformer_units(spec, chunk, options) if units is None else units, blocks=chunk.layers,
                     block_params=held / chunk.layers, edge_params=edge, boundary_bytes=boundary,
                     moe_blocks=moe, expert_params=experts / (tp * options.ep))


EDGE_OPTIONS = ("micro_batch", "tp", "sequence_parallel", "flash_attention", "fusion", "model_code", "context",
                "vocab_multiple", "loss", "autocast", "cuda_kernels", "grad_add")
"""The fields of :class:`ComputeOptions` a transformer's edge units read (:func:`transformer_units`: the embedding's
and the head's kernels, loss, eager norms, autocast casts and gradient adds, never recomputed); the others (recompute,
expert parallelism, FP8, the attention backend) shape only the blocks."""
_EDGE_OPTIONS = operator.attrgetter(*EDGE_OPTIONS)


def transformer_edge_options(options: ComputeOptions) -> tuple:
    """:data:`EDGE_OPTIONS` of ``options``: two option sets that agree on these give a chunk's edges the same units
    (:mod:`simulator.compile.chunk_loads` builds them once per place and these)."""
    return _EDGE_OPTIONS(options)


def transformer_fields_options(options: ComputeOptions) -> tuple:
    """What :func:`transformer_chunk_load` reads of ``options`` for the load's fields other than its units (the
    parameters held, the boundary bytes, the expert split): tp, ep, the micro-batch and the context split. Two
    option sets that agree on these give a chunk the same fields (:mod:`simulator.compile.chunk_loads` keeps
    them once per chunk and these)."""
    return options.tp, options.ep, options.micro_batch, options.context


def layer_kernel(layer: LayerSpec, micro_batch: int, dtype: DtypePolicy, factor: int = 1) -> Kernel:
    """One layer's forward (``factor`` 1) or backward (2) as one kernel: ``factor`` × the forward
    FLOPs; it reads the weights and writes the activations, ``factor · (params·param_bytes +
    b·activation_bytes)`` bytes."""
    flops = factor * micro_batch * layer.fwd_flops
    nbytes = factor * (layer.params * dtype.param_bytes + micro_batch * layer.activation_bytes)
    return Kernel(name=layer.name, flops=flops, bytes=nbytes, gemm=flops > 0)


def layer_list_chunk_load(workload: LayerListWorkload, chunk: ChunkSlice, options: ComputeOptions) -> ChunkLoad:
    """Load of layers ``chunk.start … chunk.start + chunk.layers − 1`` of a layer list."""
    chosen = workload.layers[chunk.start:chunk.start + chunk.layers]
    b, dtype = options.micro_batch, workload.dtype
    fwd = tuple((layer_kernel(layer, b, dtype),) for layer in chosen)
    add = options.grad_add
    bwd = tuple((layer_kernel(layer, b, dtype, factor=2),) + ((grad_add_kernel(add, layer.params),)
                                                              if add is not None and layer.params else ())
                for layer in chosen)
    unit = WorkUnit(fwd=fwd, bwd=bwd, recompute=fwd if options.recompute is Recompute.FULL else ())
    return ChunkLoad(units=((1, unit),), blocks=0, block_params=0.0,
                     edge_params=float(sum(layer.params for layer in chosen)),
                     boundary_bytes=b * chosen[-1].output_bytes)
