"""Invariants of the memory model (hypothesis): ZeRO stages order, more dp never costs a rank more,
recomputation never adds activations, parallelism never adds per-rank activations."""

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.bucket_defaults import DEEPSPEED_ZERO3
from simulator.memory import (Framework, Partitioning, ScheduleKind, ZeroStage,
                              model_state_bytes, stage_activations)
from simulator.memory.shapes import numel
from simulator.strategy.framework import resolve_framework
from simulator.strategy.kinds import MixedPrecision, OptimizerImpl
from simulator.workload import ActivationKind, DtypePolicy, Recompute, TransformerSpec
from memory_layouts import layout_of, model_at
from presets_once import cluster as preset_cluster

shapes_st = st.lists(st.tuples(st.just("t"), st.lists(st.integers(1, 300), min_size=1, max_size=3).map(tuple)),
                     min_size=1, max_size=12)
dtype_st = st.sampled_from(list(DtypePolicy))
part_st = st.sampled_from(list(Partitioning))


def _persistent_bytes(shapes, zero, dtype, framework=None, partitioning=None) -> int:
    """DeepSpeed ZeRO-3's persistent tensors (< 1e5 elements, whole on every rank besides their partition,
    simulator/memory/states.py): the one thing a higher stage holds on top of a lower one. 0 elsewhere."""
    if zero is not ZeroStage.ZERO3 or resolve_framework(zero, partitioning, framework)[1] is not Framework.DEEPSPEED:
        return 0
    return DEEPSPEED_ZERO3.persistent_elements([numel(s) for _, s in shapes]) * dtype.param_bytes


@settings(max_examples=200, deadline=None)
@given(shapes=shapes_st, dp=st.integers(1, 16), dtype=dtype_st, framework=st.sampled_from(list(Framework)))
def test_zero_stages_are_ordered(shapes, dp, dtype, framework):
    """Over the stages a framework implements, a higher stage never holds more per rank (Rajbhandari
    et al.: each stage partitions more). Peak totals — FSDP2's ZeRO-2 peak includes the unsharded copy;
    DeepSpeed's ZeRO-3 persistent tensors left out (they make a model of tiny tensors cost more)."""
    totals = [model_state_bytes(shapes, dp=dp, zero=z, dtype=dtype, framework=framework).total_bytes
              - _persistent_bytes(shapes, z, dtype, framework=framework) for z in framework.zero_stages]
    assert totals == sorted(totals, reverse=True)


@settings(max_examples=200, deadline=None)
@given(shapes=shapes_st, dp=st.integers(1, 16), dtype=dtype_st, part=part_st)
def test_zero_stages_are_ordered_after_the_step(shapes, dp, dtype, part):
    """With the partitioning's implied framework at every stage, the after-step totals are ordered
    (DeepSpeed's ZeRO-3 persistent tensors left out, as above)."""
    totals = [model_state_bytes(shapes, dp=dp, zero=z, dtype=dtype, partitioning=part).total_after_step_bytes
              - _persistent_bytes(shapes, z, dtype, partitioning=part) for z in ZeroStage]
    assert totals == sorted(totals, reverse=True)


@settings(max_examples=200, deadline=None)
@given(shapes=shapes_st, dp=st.integers(1, 16), dtype=dtype_st, framework=st.sampled_from(list(Framework)))
def test_most_loaded_rank_is_the_max_over_ranks(shapes, dp, dtype, framework):
    """rank=None is the rank with the largest peak total (FSDP2: rank 0, whose real shard is the padded one)."""
    for zero in framework.zero_stages:
        ranks = [model_state_bytes(shapes, dp=dp, zero=zero, dtype=dtype, framework=framework, rank=r).total_bytes
                 for r in range(dp)]
        worst = model_state_bytes(shapes, dp=dp, zero=zero, dtype=dtype, framework=framework)
        assert worst.total_bytes == max(ranks)


@settings(max_examples=200, deadline=None)
@given(shapes=shapes_st, dp=st.integers(1, 16), dtype=dtype_st,
       zero=st.sampled_from([ZeroStage.ZERO1, ZeroStage.ZERO2, ZeroStage.ZERO3]),
       part=st.sampled_from([Partitioning.FLAT, Partitioning.DIM0_PADDED]))
def test_more_dp_never_increases_states(shapes, dp, dtype, zero, part):
    """Under ZeRO >= 1 a rank's partition is ceil(N/dp) (flat) or sum ceil(d0/dp)·rest (dim 0):
    non-increasing in dp. (The greedy whole-tensor split is a scheduling heuristic with no such
    guarantee, so it is left out; so is FSDP2's ZeRO-2 *peak*, whose padded unsharded copy
    dp·ceil(d0/dp) rows can grow with dp: after-step totals are compared.)"""
    a = model_state_bytes(shapes, dp=dp, zero=zero, dtype=dtype, partitioning=part).total_after_step_bytes
    b = model_state_bytes(shapes, dp=dp + 1, zero=zero, dtype=dtype, partitioning=part).total_after_step_bytes
    assert b <= a


@st.composite
def specs(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([8, 16, 64]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8) if heads % k == 0]))
    return TransformerSpec(name="t", layers=draw(st.integers(1, 12)), hidden=heads * head_dim, heads=heads,
                           kv_heads=kv, vocab=draw(st.integers(10, 5000)), seq_len=128,
                           ffn=draw(st.integers(8, 1024)), activation=draw(st.sampled_from(list(ActivationKind))),
                           dtype=draw(dtype_st))


@st.composite
def layouts(draw, spec):
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if spec.heads % t == 0 and spec.n_kv_heads % t == 0]))
    pp = draw(st.integers(1, min(4, spec.layers)))
    schedule = draw(st.sampled_from(list(ScheduleKind)))
    interleaved = schedule is ScheduleKind.INTERLEAVED and pp > 1 and 2 * pp <= spec.layers
    m = draw(st.integers(1, 8))
    return dict(tp=tp, pp=pp, sp=tp > 1 and draw(st.booleans()), mbs=draw(st.integers(1, 4)),
                seq=draw(st.integers(1, 2048)), schedule=schedule if interleaved or schedule is not
                ScheduleKind.INTERLEAVED else ScheduleKind.ONE_F_ONE_B,
                microbatches=m * pp if interleaved else m, virtual_stages=2 if interleaved else 1)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_recompute_never_increases_activations(data):
    spec = data.draw(specs())
    layout = data.draw(layouts(spec))
    for stage in range(layout["pp"]):
        acts = [stage_activations(model_at(spec, layout["seq"]), layout_of(spec, **layout, recompute=r), stage).gpu_bytes
                for r in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)]
        assert acts[0] >= acts[1] >= acts[2] > 0


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_sequence_parallelism_never_increases_activations(data):
    spec = data.draw(specs())
    layout = data.draw(layouts(spec))
    if layout["tp"] == 1:
        return
    # torchtitan's op-level policy keeps the reduce-scatter outputs sequence parallelism adds (2h/t) on
    # top of the block input (h/t): more than without it at t = 2 (simulator.workload.op_sac)
    recompute = data.draw(st.sampled_from([r for r in Recompute
                                           if r is not Recompute.SELECTIVE_OP or layout["tp"] > 2]))
    at = model_at(spec, layout["seq"])
    without = stage_activations(at, layout_of(spec, **(layout | {"sp": False}), recompute=recompute), 0)
    with_sp = stage_activations(at, layout_of(spec, **(layout | {"sp": True}), recompute=recompute), 0)
    assert with_sp.gpu_bytes <= without.gpu_bytes


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_peaks_are_ordered_and_never_below_model_states(data):
    """Per stage: model states on the GPU <= allocated <= reserved <= device total, over random shapes,
    layouts, ZeRO stages, frameworks and clusters (Hopper and Ampere cuBLAS workspaces)."""
    from simulator.memory import memory_report

    spec = data.draw(specs())
    layout = data.draw(layouts(spec))
    framework = data.draw(st.sampled_from(list(Framework)))
    zero = data.draw(st.sampled_from([z for z in framework.zero_stages  # ZeRO-2/3 with pp: FSDP2 only (rules.py)
                                      if layout["pp"] == 1 or z.value < 2 or framework.partitions_gradients_with_pipeline]))
    dp = data.draw(st.integers(1, 4))
    cluster = preset_cluster(data.draw(st.sampled_from(["dgx-h100", "dgx-a100"])))
    lay = layout_of(spec, cluster, **layout, dp=dp, zero=zero, framework=framework,
                    recompute=data.draw(st.sampled_from(list(Recompute))))
    for s in memory_report(model_at(spec, layout["seq"]), cluster, lay).stages:
        states = s.params_bytes + s.grads_bytes + s.optimizer_bytes
        assert 0 < states <= s.allocated_bytes <= s.reserved_bytes <= s.total_bytes


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_only_unfused_adam_has_an_optimizer_step_peak(data):
    """The optimizer step's peak (states, gradient buckets, step temporaries) can exceed the forward's
    only where the framework's default AdamW is unfused on a GPU (torch DDP, FSDP2: foreach); with a fused
    Adam (Megatron, DeepSpeed) the allocated peak is the forward's. The autocast copies are torch DDP's
    alone (the only framework whose default mixed precision is autocast)."""
    from simulator.memory import memory_report

    spec = data.draw(specs())
    layout = data.draw(layouts(spec))
    framework = data.draw(st.sampled_from(list(Framework)))
    zero = data.draw(st.sampled_from([z for z in framework.zero_stages
                                      if layout["pp"] == 1 or z.value < 2 or framework.partitions_gradients_with_pipeline]))
    cluster = preset_cluster("dgx-h100")
    lay = layout_of(spec, cluster, **layout, dp=data.draw(st.integers(1, 4)), zero=zero, framework=framework,
                    recompute=data.draw(st.sampled_from(list(Recompute))))
    for s in memory_report(model_at(spec, layout["seq"]), cluster, lay).stages:
        assert s.allocated_bytes == max(s.forward_peak_bytes, s.step_peak_bytes) + s.runtime.cublas_workspace_bytes
        if framework.optimizer_impl(foreach_device=True) is OptimizerImpl.FUSED:
            assert s.step_peak_bytes <= s.forward_peak_bytes and s.buffers.optimizer_step_bytes == 0
        if framework.mixed_precision is not MixedPrecision.AUTOCAST:
            assert s.buffers.autocast_weights_bytes == 0
