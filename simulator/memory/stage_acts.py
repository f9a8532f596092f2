"""Activation bytes of one rank of a pipeline stage, with what every stage of a layout shares read once.

:func:`stage_activations` puts a stage's peak together from one block's activations
(:func:`~simulator.memory.activations.layer_activation`, the formulas and sources are in
:mod:`simulator.memory.activations`), the stage's block count, its micro-batches in flight
(:func:`~simulator.memory.activations.in_flight`) and, on the first and last stage, the embedding
masks and the head and loss. Of these only the block counts, the in-flight counts and the first/last
terms depend on the stage: :class:`LayoutActivations` holds the rest (one block's dense and MoE
activations, the kept and recompute working bytes under the layout's recomputation, the autocast
and DTensor flags), so a memory report of p stages computes them once instead of p times
(:func:`simulator.memory.report.memory_report`; a 96-stage GPT-3 layout asked ``layer_activation``
96 times). Given or not, every figure is the same floating-point expression in the same order
(tested bit for bit in ``tests/test_memory_stage_acts.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from simulator.memory.activations import (LOGITS_BYTES, MASK_BYTES, LayerActivation, StageActivations, in_flight,
                                          layer_activation, loss_working_bytes)
from simulator.memory.autocast import loss_kept_bytes_per_logit, residual_bytes
from simulator.memory.dtensor_tp import head_projection_input_bytes, uses_dtensor_tp
from simulator.strategy.formats import autocast_of
from simulator.strategy.kinds import AttentionKind
from simulator.strategy.layout import ParallelLayout
from simulator.workload.flops import Recompute
from simulator.workload.transformer import TransformerSpec


@dataclass(frozen=True)
class LayoutActivations:
    """What :func:`stage_activations` reads of a layout that no stage changes."""

    seq: int
    """Tokens per sample on one rank (s / cp)."""
    mbs: int
    dtensor: bool
    """torch's DTensor tensor parallelism (:func:`simulator.memory.dtensor_tp.uses_dtensor_tp`)."""
    autocast: bool
    residual: int
    """Bytes per element of the residual stream (:func:`simulator.memory.autocast.residual_bytes`)."""
    layer: LayerActivation
    """One dense block, one micro-batch."""
    moe: LayerActivation | None
    """One MoE block (None without MoE layers; the dense block's figures then stand in)."""
    layer_kept_bytes: float
    """One dense block's bytes kept until backward under the layout's recomputation."""
    moe_kept_bytes: float
    """The same of one MoE block (the dense block's without MoE layers)."""
    layer_working_bytes: float
    """A stage without MoE blocks: one dense block's recompute working set (0 without recomputation)."""
    moe_working_bytes: float
    """A stage with MoE blocks: the larger of the dense and MoE blocks' working sets."""


def layout_activations(spec: TransformerSpec, layout: ParallelLayout) -> LayoutActivations:
    """The stage-independent part of :func:`stage_activations` for ``layout``."""
    s, tp, sp = layout.strategy, layout.tp, layout.sequence_parallel
    seq, mbs = spec.seq_len // layout.cp, s.micro_batch  # a context-parallel rank keeps its s/cp tokens
    flash = s.attention is AttentionKind.FLASH
    dtensor = uses_dtensor_tp(layout.framework, tp)
    autocast = autocast_of(layout.framework, s.resolved_mixed_precision)
    residual = residual_bytes(spec.dtype, autocast)
    layer = layer_activation(spec, seq=seq, mbs=mbs, tp=tp, sp=sp, flash_attention=flash, dtensor=dtensor,
                             residual=residual)
    moe = None
    if spec.moe is not None and any(spec.is_moe_layer(i) for i in range(spec.layers)):
        moe = layer_activation(spec, seq=seq, mbs=mbs, tp=tp, sp=sp, flash_attention=flash, dtensor=dtensor,
                               residual=residual, moe_layer=True, skew=s.routing_skew, ep=layout.ep)
    either = layer if moe is None else moe
    rc, none = s.recompute, s.recompute is Recompute.NONE
    return LayoutActivations(
        seq=seq, mbs=mbs, dtensor=dtensor, autocast=autocast, residual=residual, layer=layer, moe=moe,
        layer_kept_bytes=layer.kept_bytes(rc), moe_kept_bytes=either.kept_bytes(rc),
        layer_working_bytes=0.0 if none else layer.working_bytes(rc),
        moe_working_bytes=0.0 if none else max(layer.working_bytes(rc), either.working_bytes(rc)))


def stage_activations(spec: TransformerSpec, layout: ParallelLayout, stage: int,
                      shared: LayoutActivations | None = None) -> StageActivations:
    """Activation bytes of one rank of pipeline stage (pp rank) ``stage`` under ``layout``; ``shared``:
    :func:`layout_activations` of the same ``spec`` and ``layout`` (computed here when None)."""
    a = layout_activations(spec, layout) if shared is None else shared
    s, tp, sp = layout.strategy, layout.tp, layout.sequence_parallel
    seq, mbs, residual = a.seq, a.mbs, a.residual
    n_blocks = sum(layout.layers_per_stage[stage::layout.pp])  # layout.layers_per_rank[stage], one rank's
    n_moe = sum(1 for i in layout.layer_indices(stage) if spec.is_moe_layer(i)) if spec.moe is not None else 0
    n_layers, n_embed, n_head = in_flight(layout, stage)
    # a stage without MoE blocks reads the dense block's figures twice, as the one-stage formula did
    moe_kept, working = ((a.moe_kept_bytes, a.moe_working_bytes) if n_moe
                         else (a.layer_kept_bytes, a.layer_working_bytes))
    kept = (a.layer_kept_bytes * (n_blocks - n_moe) + moe_kept * n_moe) * n_layers
    scores = a.layer.scores_bytes * n_blocks * n_layers if s.recompute is Recompute.NONE else 0.0
    rep_div = tp if sp else 1
    sbh = seq * mbs * spec.hidden
    e = spec.dtype.activation_bytes
    embedding = sbh * MASK_BYTES / rep_div * n_embed if stage == 0 and spec.dropout > 0 else 0.0
    head = loss = 0.0
    if stage == layout.pp - 1:
        projection_input = head_projection_input_bytes(tokens=seq * mbs, hidden=spec.hidden, activation_bytes=e, tp=tp,
                                                       sp=sp, dtensor=a.dtensor)
        per_logit = loss_kept_bytes_per_logit(spec.dtype, a.autocast, LOGITS_BYTES)
        final_norm_input = sbh * residual / rep_div
        head = (final_norm_input + projection_input + seq * mbs * ceil(spec.vocab / tp) * per_logit) * n_head
        loss = loss_working_bytes(spec, seq=seq, mbs=mbs, tp=tp, framework=layout.framework, autocast=a.autocast)
    offload = s.offload_activations
    return StageActivations(
        blocks_bytes=0.0 if offload else kept, recompute_working_bytes=working,
        embedding_bytes=embedding, head_bytes=head, loss_working_bytes=loss, host_checkpoint_bytes=kept if offload else 0.0,
        scores_bytes=scores, micro_batches_in_flight=n_layers)
