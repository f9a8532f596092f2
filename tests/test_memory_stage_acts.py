"""The activations every stage of a layout shares, computed once per memory report
(:func:`simulator.memory.stage_acts.layout_activations`), give the same stage activations as computing
everything per stage: bit for bit (``repr`` of the dataclasses, which tells -0.0 from 0.0), on generated
layouts of dense, MoE and partly dense MoE models, every recomputation, schedule, attention kind and
framework, with and without activation offload. The reference is the one-stage function as it stood
before the split (commit 7d63521, ``simulator/memory/activations.py``), kept here verbatim."""

from __future__ import annotations

from math import ceil

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.memory import memory_report
from simulator.memory.activations import (LOGITS_BYTES, MASK_BYTES, StageActivations, in_flight, layer_activation,
                                          loss_working_bytes)
from simulator.memory.autocast import loss_kept_bytes_per_logit, residual_bytes
from simulator.strategy.formats import autocast_of
from simulator.memory.dtensor_tp import head_projection_input_bytes, uses_dtensor_tp
from simulator.memory.stage_acts import layout_activations, stage_activations
from simulator.schedules import ScheduleKind
from simulator.strategy import AttentionKind, Framework, Strategy, ZeroStage, build_layout
from simulator.workload import Recompute, get_preset

CLUSTER = load_cluster("dgx-h100", nodes=16)
MODELS = {name: get_preset(name) for name in ("gpt3-1.3b", "llama2-7b", "mixtral-8x7b", "deepseek-v2-lite")}
"""Dense GPT (dropout, LayerNorm, GELU), dense Llama (SwiGLU, rotary, GQA), MoE on every block, and MoE
after a first dense block (a stage may hold no MoE block: its working set is the dense block's)."""


def _reference(spec, layout, stage: int) -> StageActivations:
    """``stage_activations`` before the split (7d63521), verbatim but for its name."""
    s, tp, sp = layout.strategy, layout.tp, layout.sequence_parallel
    seq, mbs = spec.seq_len // layout.cp, s.micro_batch
    flash = s.attention is AttentionKind.FLASH
    dtensor = uses_dtensor_tp(layout.framework, tp)
    autocast = autocast_of(layout.framework, s.resolved_mixed_precision)
    residual = residual_bytes(spec.dtype, autocast)
    layer = layer_activation(spec, seq=seq, mbs=mbs, tp=tp, sp=sp, flash_attention=flash, dtensor=dtensor,
                             residual=residual)
    n_blocks = sum(layout.layers_per_stage[stage::layout.pp])
    n_moe = sum(1 for i in layout.layer_indices(stage) if spec.is_moe_layer(i)) if spec.moe is not None else 0
    moe = layer_activation(spec, seq=seq, mbs=mbs, tp=tp, sp=sp, flash_attention=flash, dtensor=dtensor, residual=residual,
                           moe_layer=True,
                           skew=s.routing_skew, ep=layout.ep) if n_moe else layer
    n_layers, n_embed, n_head = in_flight(layout, stage)
    kept = (layer.kept_bytes(s.recompute) * (n_blocks - n_moe) + moe.kept_bytes(s.recompute) * n_moe) * n_layers
    scores = layer.scores_bytes * n_blocks * n_layers if s.recompute is Recompute.NONE else 0.0
    rep_div = tp if sp else 1
    sbh = seq * mbs * spec.hidden
    e = spec.dtype.activation_bytes
    embedding = sbh * MASK_BYTES / rep_div * n_embed if stage == 0 and spec.dropout > 0 else 0.0
    head = loss = 0.0
    if stage == layout.pp - 1:
        projection_input = head_projection_input_bytes(tokens=seq * mbs, hidden=spec.hidden, activation_bytes=e, tp=tp,
                                                       sp=sp, dtensor=dtensor)
        per_logit = loss_kept_bytes_per_logit(spec.dtype, autocast, LOGITS_BYTES)
        final_norm_input = sbh * residual / rep_div
        head = (final_norm_input + projection_input + seq * mbs * ceil(spec.vocab / tp) * per_logit) * n_head
        loss = loss_working_bytes(spec, seq=seq, mbs=mbs, tp=tp, framework=layout.framework, autocast=autocast)
    offload = s.offload_activations
    return StageActivations(
        blocks_bytes=0.0 if offload else kept,
        recompute_working_bytes=max(layer.working_bytes(s.recompute), moe.working_bytes(s.recompute))
        if s.recompute is not Recompute.NONE else 0.0,
        embedding_bytes=embedding, head_bytes=head, loss_working_bytes=loss, host_checkpoint_bytes=kept if offload else 0.0,
        scores_bytes=scores, micro_batches_in_flight=n_layers)


@st.composite
def layouts(draw):
    name = draw(st.sampled_from(sorted(MODELS)))
    spec = MODELS[name].with_seq(draw(st.sampled_from([512, 2048, 4096])))
    tp, pp, cp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 3, 4, 8, 16])), 1
    ep = draw(st.sampled_from([1, 2, 4])) if spec.moe is not None else 1
    dp = draw(st.sampled_from([1, 2, 4])) * ep
    mbs, m = draw(st.integers(1, 4)), draw(st.integers(1, 3 * pp))
    recompute = draw(st.sampled_from(list(Recompute)))
    attention = draw(st.sampled_from(list(AttentionKind)))
    assume(attention is AttentionKind.FLASH or recompute is not Recompute.SELECTIVE_OP)
    schedule = draw(st.sampled_from(list(ScheduleKind)))
    fields = dict(global_batch=dp * mbs * m, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, micro_batch=mbs, recompute=recompute,
                  attention=attention, sequence_parallel=tp > 1 and draw(st.booleans()),
                  schedule=schedule if pp > 1 else ScheduleKind.ONE_F_ONE_B,
                  zero=draw(st.sampled_from(list(ZeroStage))),
                  framework=draw(st.sampled_from([None, Framework.MEGATRON, Framework.FSDP2, Framework.DEEPSPEED])),
                  offload_activations=recompute is Recompute.FULL and draw(st.booleans()))
    if schedule is ScheduleKind.INTERLEAVED and pp > 1:
        fields["virtual_stages"] = draw(st.sampled_from([1, 2]))
    if ep > 1:
        fields["routing_skew"] = draw(st.sampled_from([1.0, 1.5]))
    gpus = dp * tp * pp  # on that many of the cluster's GPUs (a layout for all 128 rejected most draws)
    assume(gpus <= CLUSTER.world_size)
    try:
        layout = build_layout(Strategy(**fields), CLUSTER, spec, gpus=gpus)
    except SpecError:
        assume(False)
    return spec, layout


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(layouts())
def test_shared_layout_activations_equal_the_one_stage_formula(case):
    spec, layout = case
    shared = layout_activations(spec, layout)
    for k in range(layout.pp):
        want = repr(_reference(spec, layout, k))
        assert repr(stage_activations(spec, layout, k, shared)) == want
        assert repr(stage_activations(spec, layout, k)) == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(layouts())
def test_memory_report_stages_hold_the_one_stage_activations(case):
    spec, layout = case
    try:
        report = memory_report(spec, CLUSTER, layout)
    except SpecError:  # activation offload on a cluster file without host figures: not this test's subject
        assume(False)
    assert [repr(st.activations) for st in report.stages] == [repr(_reference(spec, layout, k))
                                                                for k in range(layout.pp)]


def test_a_stage_without_moe_blocks_keeps_the_dense_working_set():
    """deepseek-v2-lite's first block is dense: over 16 stages the first holds it alone (1, 2, 2, ... blocks),
    and under full recomputation its working set is the dense block's, not the larger MoE block's that the
    later stages hold."""
    spec = MODELS["deepseek-v2-lite"].with_seq(2048)
    layout = build_layout(Strategy(global_batch=8, pp=16, recompute=Recompute.FULL), CLUSTER, spec)
    assert layout.layer_indices(0) == (0,) and not spec.is_moe_layer(0) and spec.is_moe_layer(1)
    a = layout_activations(spec, layout)
    first, second = (stage_activations(spec, layout, k, a) for k in (0, 1))
    assert first.recompute_working_bytes == a.layer.working_bytes(Recompute.FULL)
    assert second.recompute_working_bytes == a.moe_working_bytes > first.recompute_working_bytes
