"""Compute side of a compiled step: per-chunk forward, backward and recompute times, parameters
per chunk, the bytes a stage boundary sends, and the step's FLOPs.

Transformer (from :mod:`simulator.compute`): a chunk of ``L`` blocks takes ``L ×`` one block's
time (:func:`simulator.compute.layer_times` on one tensor-parallel rank with the strategy's
attention kind, recomputation and sequence parallelism), plus the embedding on the model's first chunk
and the final norm, logits and loss on its last (:func:`simulator.compute.edge_times`).
Recomputation rows are the forward work backward repeats; they run inside the backward action:
full repeats the block's forward; selective repeats the attention core with eager attention and
nothing with flash attention (no scores are kept to drop; the flash backward recomputes them
itself), so the time, the hardware FLOPs (:func:`step_flops`) and the memory report agree.

Layer list (:func:`simulator.compute.layer_list_times`): a chunk sums its layers' rows; full
recomputation repeats the chunk's forward; selective recomputes nothing, whatever the attention
kind: a layer list names no attention core (its layers are opaque), so there is none to recompute.

Parameters a rank holds (gradient bytes, ZeRO gathers, optimizer): a block's parameters divided by
tp (an approximation: Megatron replicates norms and row-parallel biases, under 0.01 % of a GPT
block), the token embedding (vocabulary-parallel, ÷tp) with the position table on the first chunk,
the final norm and the output matrix on the last — Megatron keeps a copy of a tied embedding on the
last stage when the model is split, so the last chunk holds V·h/tp then too.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cluster.spec import Device
from simulator.compile.costs import CostCache
from simulator.compute import Phase, edge_times, layer_list_times, layer_times, total_time
from simulator.errors import SpecError
from simulator.strategy.spec import AttentionKind
from simulator.workload import (LayerListWorkload, Recompute, TransformerSpec, model_flops_per_token,
                                train_flops_per_token)
from simulator.workload.ops import Scope


@dataclass(frozen=True)
class ChunkCompute:
    """One chunk's per-micro-batch compute and what it holds."""

    fwd_s: float
    bwd_s: float
    recompute_s: float
    layer_params: float
    """Parameters of one block on this rank (0 for a layer list)."""
    edge_params: float
    """Parameters outside the blocks (embedding, head) on this rank; for a layer list, all of them."""
    boundary_bytes: int
    """Bytes of the activation this chunk hands to the next (per micro-batch, before any SP split)."""


@dataclass(frozen=True)
class _BlockTimes:
    fwd_s: float
    bwd_s: float
    recompute_s: float
    first_fwd_s: float
    first_bwd_s: float
    last_fwd_s: float
    last_bwd_s: float


def _block_times(spec: TransformerSpec, device: Device, mbs: int, tp: int, recompute: Recompute,
                 sp: bool, attention: AttentionKind) -> _BlockTimes:
    rows = layer_times(spec, device, mbs, spec.seq_len, tp, recompute, sequence_parallel=sp,
                       flash_attention=attention is AttentionKind.FLASH)
    edge = edge_times(spec, device, mbs, spec.seq_len, tp, sequence_parallel=sp)

    def edge_sum(scope: Scope, phase: Phase) -> float:
        return sum(r.time_s for r in edge if r.scope is scope and r.phase is phase)

    return _BlockTimes(total_time(rows, Phase.FWD), total_time(rows, Phase.BWD), total_time(rows, Phase.RECOMPUTE),
                       edge_sum(Scope.FIRST, Phase.FWD), edge_sum(Scope.FIRST, Phase.BWD),
                       edge_sum(Scope.LAST, Phase.FWD), edge_sum(Scope.LAST, Phase.BWD))


def transformer_chunk(cache: CostCache, spec: TransformerSpec, *, mbs: int, tp: int, recompute: Recompute,
                      sp: bool, layers: int, first: bool, last: bool, n_chunks: int,
                      attention: AttentionKind = AttentionKind.FLASH) -> ChunkCompute:
    """Compute of one transformer chunk of ``layers`` blocks (``first``/``last``: model edges)."""
    device = cache.cluster.device
    bt = cache.memo(("blocks", spec, mbs, tp, recompute, sp, attention),
                    lambda: _block_times(spec, device, mbs, tp, recompute, sp, attention))
    fwd = layers * bt.fwd_s + (bt.first_fwd_s if first else 0.0) + (bt.last_fwd_s if last else 0.0)
    bwd = layers * bt.bwd_s + (bt.first_bwd_s if first else 0.0) + (bt.last_bwd_s if last else 0.0)
    vh = spec.vocab * spec.hidden
    edge = 0.0
    if first:
        edge += vh / tp + (spec.embedding_params - vh)
    if last:
        edge += spec.norm_params
        if not spec.tied_embeddings or (n_chunks > 1):
            edge += vh / tp
    boundary = mbs * spec.seq_len * spec.hidden * spec.dtype.activation_bytes
    return ChunkCompute(fwd_s=fwd, bwd_s=bwd, recompute_s=layers * bt.recompute_s,
                        layer_params=spec.layer_params / tp, edge_params=edge, boundary_bytes=boundary)


def layer_list_chunk(cache: CostCache, workload: LayerListWorkload, *, mbs: int, recompute: Recompute,
                     start: int, layers: int) -> ChunkCompute:
    """Compute of layers ``start .. start+layers-1`` of a layer list."""
    rows = cache.memo(("layer_list", workload, mbs), lambda: layer_list_times(workload, cache.cluster.device, mbs))
    n = len(workload.layers)
    fwd = sum(r.time_s for r in rows[start:start + layers])
    bwd = sum(r.time_s for r in rows[n + start:n + start + layers])
    chosen = workload.layers[start:start + layers]
    return ChunkCompute(fwd_s=fwd, bwd_s=bwd, recompute_s=fwd if recompute is Recompute.FULL else 0.0,
                        layer_params=0.0, edge_params=float(sum(layer.params for layer in chosen)),
                        boundary_bytes=mbs * chosen[-1].output_bytes)


def step_flops(workload, tokens: int, samples: int, recompute: Recompute,
               attention: AttentionKind = AttentionKind.FLASH) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step over all GPUs.

    Transformer: ``model_flops_per_token × tokens`` (6N + attention, Chowdhery et al. 2022 App. B)
    and ``train_flops_per_token(recompute) × tokens`` — selective with flash attention recomputes
    nothing (module docstring), so it counts as no recomputation. Layer list: 3 × forward per
    sample, plus one more forward under full recomputation.
    """
    if isinstance(workload, TransformerSpec):
        if recompute is Recompute.SELECTIVE and attention is AttentionKind.FLASH:
            recompute = Recompute.NONE
        return (model_flops_per_token(workload, workload.seq_len) * tokens,
                train_flops_per_token(workload, recompute, workload.seq_len) * tokens)
    if isinstance(workload, LayerListWorkload):
        model = workload.train_flops_per_sample * samples
        extra = workload.fwd_flops_per_sample * samples if recompute is Recompute.FULL else 0.0
        return model, model + extra
    raise SpecError("model", "a step time needs a transformer (preset or config.json) or a layer list; "
                    "a bare parameter count has no compute")
