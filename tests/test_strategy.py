"""Strategy (requested) and ParallelLayout (derived): every error case, rank placement, derived values."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.presets import load_preset
from simulator.errors import SpecError
from simulator.strategy import (AllReduceAlgorithm, AllReduceSync, DataSource, FailureModel, InputPipeline, Offload,
                                ParamServerMode, ParamServerSync, PlacementOrder, Recompute, ScheduleKind, Strategy,
                                StragglerModel, ZeroStage, build_layout)
from simulator.strategy.flat import ALL_KEYS, strategy_from_flat
from simulator.strategy.framework import Framework
from simulator.strategy.kinds import GradReduceDtype, MixedPrecision
from simulator.units import MiB
from simulator.workload import LayerListWorkload, LayerSpec, ParamCountModel, get_preset

H100 = load_preset("dgx-h100")  # 8 GPUs per node
LLAMA7 = get_preset("llama2-7b")  # 32 layers, 32 heads, 32 kv heads
LLAMA70 = get_preset("llama2-70b")  # 80 layers, 64 heads, 8 kv heads


def layout(nodes=4, workload=LLAMA7, **kw):
    kw.setdefault("global_batch", 64)
    return build_layout(Strategy(**kw), H100.with_nodes(nodes), workload)


# --- derived values ------------------------------------------------------------------------------
def test_default_placement_tp_innermost_then_pp_then_dp():
    lay = layout(tp=8, pp=2)  # 32 GPUs → dp 2; rank = tp + 8·pp + 16·dp
    assert (lay.dp, lay.tp, lay.pp, lay.world_size) == (2, 8, 2, 32)
    c = lay.coords(13)
    assert (c.dp, c.pp, c.tp) == (0, 1, 5)
    assert lay.rank_of(dp=1, pp=1, tp=7) == 31
    assert lay.tp_groups[0] == tuple(range(8))  # a tp group is one node
    assert lay.pp_groups[0] == (0, 8)
    assert lay.dp_groups[0] == (0, 16)
    assert lay.embedding_ranks == tuple(range(8)) + tuple(range(16, 24))
    assert lay.head_ranks == tuple(range(8, 16)) + tuple(range(24, 32))


def test_megatron_order_puts_pp_outermost():
    lay = layout(tp=8, pp=2, placement=PlacementOrder.TP_DP_PP)  # rank = tp + 8·dp + 16·pp
    assert lay.dp_groups[0] == (0, 8)
    assert lay.pp_groups[0] == (0, 16)


def test_micro_batches_and_accumulation():
    lay = layout(tp=8, pp=2, global_batch=64, micro_batch=2)  # 64 / (dp 2 · 2) = 16
    assert lay.micro_batches == lay.grad_accum_steps == 16
    assert lay.schedule.m == 16 and lay.schedule.p == 2


def test_layer_split_even_and_uneven_and_explicit():
    assert layout(tp=8, pp=4).layers_per_stage == (8, 8, 8, 8)
    layers = LayerListWorkload(name="x", layers=tuple(LayerSpec(name=f"l{i}", params=1, fwd_flops=1,
                                                                activation_bytes=1) for i in range(30)))
    assert layout(workload=layers, pp=4).layers_per_stage == (7, 8, 8, 7)  # extras after stage 0
    lay = layout(pp=2, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2, layer_split=(6, 10, 10, 6))
    assert lay.layers_per_stage == (6, 10, 10, 6)
    assert lay.layers_per_rank == (16, 16)  # rank 0 holds stages 0 and 2


def test_sequence_parallel_is_a_no_op_without_tp():
    assert layout(sequence_parallel=True).sequence_parallel is False
    assert layout(tp=8, sequence_parallel=True).sequence_parallel is True


def test_bucket_resolution_by_elements_uses_gradient_bytes():
    """A bucket of elements holds the gradients in the format they are reduced in
    (simulator.strategy.formats.grad_reduce_dtype)."""
    sync = AllReduceSync(bucket_bytes=None, bucket_params=1000)
    assert layout(dp_sync=sync, mixed_precision=MixedPrecision.PARAM_DTYPE).bucket_bytes == 2000  # bf16: 2 B each
    assert layout(dp_sync=sync).bucket_bytes == 4000  # torch's autocast keeps fp32 gradients
    megatron = dict(dp_sync=sync, framework=Framework.MEGATRON)
    assert layout(**megatron).bucket_bytes == 4000  # Megatron reduces bf16 models' gradients in fp32
    assert layout(**megatron, grad_reduce_dtype=GradReduceDtype.PARAM_DTYPE).bucket_bytes == 2000
    assert layout().bucket_bytes == 25 * MiB


def test_param_server_on_dedicated_nodes():
    lay = layout(nodes=4, dp_sync=ParamServerSync(shards=3, server_nodes=2))
    assert lay.world_size == 16 and lay.dp == 16
    assert lay.ps_shard_nodes == (2, 3, 2)
    colocated = layout(nodes=2, dp_sync=ParamServerSync(shards=3))
    assert colocated.ps_shard_nodes == (0, 1, 0)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from(list(PlacementOrder)))
def test_groups_partition_ranks_and_coords_invert(tp, pp, order):
    lay = layout(nodes=4, tp=tp, pp=pp, placement=order, global_batch=32 // (tp * pp) * 4)
    for groups, size in ((lay.tp_groups, tp), (lay.pp_groups, pp), (lay.dp_groups, lay.dp)):
        flat = sorted(r for g in groups for r in g)
        assert flat == list(range(32))
        assert all(len(g) == size for g in groups)
    for rank in range(32):
        c = lay.coords(rank)
        assert lay.rank_of(c.dp, c.pp, c.tp) == rank


# --- layout errors: one line each, naming the field and the fix ----------------------------------
@pytest.mark.parametrize("kw,message", [
    (dict(nodes=3, tp=3), "tp: 3 does not divide 32 attention heads; use 1, 2, 4, 8, 16 or 32"),
    (dict(workload=LLAMA70, tp=16), "tp: 16 does not divide 8 key/value heads; use 1, 2, 4 or 8"),
    (dict(pp=64), "pp: pp·virtual_stages = 64 exceeds the model's 32 layers; use at most 32 stages"),
    (dict(pp=2, layer_split=(10, 10)), "layer_split: sums to 20; the model has 32 layers"),
    (dict(dp=3), "dp: dp·tp·pp = 3·1·1 = 3 does not match the 32 GPUs; use dp 32"),
    (dict(nodes=3, tp=16), "tp: tp·pp = 16 does not divide the 24 GPUs; choose tp·pp from 1, 2, 3, 4, 6, 8, 12 "
                           "or 24"),
    (dict(global_batch=48), "global_batch: 48 does not split over dp=32 replicas; use a multiple of 32"),
    (dict(tp=8, global_batch=12, micro_batch=4), "micro_batch: 4 does not divide the 3 samples per replica; "
                                                 "use 1 or 3"),
    (dict(tp=8, pp=4, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2, global_batch=6),
     "micro_batches: interleaved schedule needs micro-batches a multiple of pp=4, got 6; use 4 or 8"),
    (dict(stragglers=StragglerModel(speed_factors=(1.0, 1.2))), "speed_factors: has 2 entries; give one per rank"),
    (dict(dp_sync=ParamServerSync(server_nodes=4)), "ps_server_nodes: 4 server nodes leave no workers in 4 nodes; "
                                                    "use at most 3"),
    (dict(workload=ParamCountModel(params=10**9), pp=2), "pp: 2: a model known only by its parameter count"),
])
def test_layout_errors(kw, message):
    with pytest.raises(SpecError, match="^" + message.replace("(", "\\(").replace(")", "\\)").replace("·", "·")
                       .replace("+", "\\+")):
        layout(**kw)


def test_layer_list_cannot_be_tensor_parallel():
    layers = LayerListWorkload(name="x", layers=(LayerSpec(name="a", params=1, fwd_flops=1, activation_bytes=1),))
    with pytest.raises(SpecError, match="tp: 2: a layer-list workload has no heads to split; use tp 1"):
        layout(workload=layers, tp=2)


def test_reading_samples_needs_the_clusters_storage_bandwidth():
    from dataclasses import replace

    node = replace(H100.node, host=replace(H100.node.host, storage_read_GBps=0.0))
    cluster = replace(H100.with_nodes(4), node=node)
    with pytest.raises(SpecError, match="^bytes_per_sample: the cluster 'dgx-h100' gives no host.storage_read_GBps"):
        build_layout(Strategy(global_batch=64, input=InputPipeline(bytes_per_sample=1000)), cluster, LLAMA7)


def test_synthetic_input_needs_no_storage_bandwidth():
    lay = layout(input=InputPipeline(bytes_per_sample=1000, source=DataSource.SYNTHETIC))
    assert lay.world_size == 32


# --- strategy field errors -----------------------------------------------------------------------
@pytest.mark.parametrize("kw,message", [
    (dict(global_batch=0), "global_batch: must be a positive integer, got 0"),
    (dict(global_batch=8, tp=0), "tp: must be a positive integer"),
    (dict(global_batch=8, virtual_stages=2), "virtual_stages: 2 chunks per rank need schedule interleaved"),
    (dict(global_batch=8, offload=Offload.OPTIMIZER), "offload: optimizer offload partitions the optimizer state"),
    (dict(global_batch=8, zero=ZeroStage.ZERO2, offload=Offload.NVME), "offload: nvme offload needs zero 3"),
    (dict(global_batch=8, zero=ZeroStage.ZERO1, dp_sync=ParamServerSync()), "zero: ZeRO partitions state"),
    (dict(global_batch=8, pp=2, layer_split=(4, 4, 4)), "layer_split: has 3 entries; give pp·virtual_stages = 2"),
    (dict(global_batch=8, zero=2), "zero: must be a ZeroStage member \\(0, 1, 2, 3\\)"),
    (dict(global_batch=8, schedule="1f1b"), "schedule: must be a ScheduleKind"),
])
def test_strategy_errors(kw, message):
    with pytest.raises(SpecError, match="^" + message):
        Strategy(**kw)


@pytest.mark.parametrize("make,message", [
    (lambda: ParamServerSync(staleness_steps=3), "staleness_steps: a synchronous parameter server has no staleness"),
    (lambda: ParamServerSync(shards=0), "ps_shards: must be a positive integer"),
    (lambda: AllReduceSync(bucket_params=10), "bucket_params: give one bucket capacity"),
    (lambda: AllReduceSync(fusion_cycle_s=-1), "fusion_cycle_s: must be a non-negative number"),
    (lambda: InputPipeline(shared_storage_GBps=10.0), "shared_storage_GBps: is only meaningful with data_source shared"),
    (lambda: StragglerModel(slowdown_prob=1.5), "slowdown_prob: is a probability"),
    (lambda: StragglerModel(speed_factors=(1.0, 0.0)), "speed_factors\\[1\\]: must be a number > 0"),
    (lambda: FailureModel(mtbf_gpu_hours=0, checkpoint_interval_steps=1, checkpoint_cost_s=1, restart_cost_s=1),
     "mtbf_gpu_hours: must be a number > 0"),
])
def test_part_errors(make, message):
    with pytest.raises(SpecError, match="^" + message):
        make()


def test_async_param_server_with_bound():
    sync = ParamServerSync(mode=ParamServerMode.ASYNC, staleness_steps=4)
    assert sync.staleness_steps == 4 and sync.colocated


# --- stragglers and failures ---------------------------------------------------------------------
def test_straggler_draws_are_seeded_and_near_their_probability():
    model = StragglerModel(speed_factors=(1.0, 1.1), slowdown_prob=0.1, slowdown_factor=2.0, seed=7)
    draws = [model.factor(1, step) for step in range(10_000)]
    assert draws == [model.factor(1, step) for step in range(10_000)]  # reproducible
    assert set(draws) == {1.1, 2.2}
    # binomial(10 000, 0.1): sd 0.003; ±0.015 is 5 sd
    assert sum(d == 2.2 for d in draws) / 10_000 == pytest.approx(0.1, abs=0.015)
    assert StragglerModel(seed=1, slowdown_prob=0.5, slowdown_factor=3).factor(0, 0) in (1.0, 3.0)


def test_failure_model_young_interval():
    # 1000 GPU-hours MTBF over 8 GPUs: 1000·3600/8 = 450 000 s; Young: √(2·60·450 000) = 7348.47 s
    fm = FailureModel(mtbf_gpu_hours=1000, checkpoint_interval_steps=100, checkpoint_cost_s=60, restart_cost_s=300)
    assert fm.job_mtbf_s(8) == pytest.approx(450_000)
    assert fm.young_interval_s(8) == pytest.approx(7348.469, abs=1e-3)


# --- flat keys -----------------------------------------------------------------------------------
def test_flat_keys_read_text():
    s = strategy_from_flat({"global_batch": 16, "schedule": "interleaved", "virtual_stages": 2, "pp": 2,
                            "zero": "zero1", "placement": "tp-dp-pp", "allreduce_algorithm": "hierarchical",
                            "bucket_bytes": "64MiB", "recompute": "selective", "data_source": "shared",
                            "mtbf_gpu_hours": 5e4, "checkpoint_interval_steps": 500, "checkpoint_cost_s": 30,
                            "restart_cost_s": 600})
    assert s.schedule is ScheduleKind.INTERLEAVED and s.zero is ZeroStage.ZERO1
    assert s.placement is PlacementOrder.TP_DP_PP and s.recompute is Recompute.SELECTIVE
    assert s.dp_sync.algorithm is AllReduceAlgorithm.HIERARCHICAL and s.dp_sync.bucket_bytes == 64 * MiB
    assert s.input.source is DataSource.SHARED and s.failures.restart_cost_s == 600
    assert "ps_mode" in ALL_KEYS


@pytest.mark.parametrize("values,message", [
    ({"global_batch": 8, "tpp": 2}, "tpp: unknown strategy key; known: global_batch"),
    ({"global_batch": 8, "zero": "zero5"}, "zero: unknown ZeRO stage 'zero5'; use 0, 1, 2 or 3"),
    ({"global_batch": 8, "allreduce_algorithm": "butterfly"}, "allreduce_algorithm: unknown algorithm 'butterfly'"),
    ({"global_batch": 8, "placement": "dp-tp"}, "placement: unknown order 'dp-tp'; known: tp-pp-dp"),
    ({"global_batch": 8, "dp_sync": "param-server", "bucket_bytes": 10}, "bucket_bytes: applies to all-reduce, not to param-server"),
    ({"global_batch": 8, "mtbf_gpu_hours": 10}, "checkpoint_interval_steps: the failure model needs all four"),
    ({"global_batch": 8, "bucket_bytes": 10, "bucket_params": 10}, "bucket_params: give bucket_bytes or"),
])
def test_flat_errors(values, message):
    with pytest.raises(SpecError, match="^" + message):
        strategy_from_flat(values)


def test_zero_2_3_with_a_pipeline_is_refused_unless_the_framework_runs_it():
    """DeepSpeed's pipeline engine asserts ZeRO < 2 (deepspeed/runtime/pipe/engine.py) and Megatron-LM's
    distributed optimizer is ZeRO-1, so ZeRO-2/3 with pp > 1 under DeepSpeed (the default framework at
    ZeRO >= 1) is a one-line error naming the fix; FSDP2 runs with torch pipelining (torchtitan)."""
    import pytest

    from simulator.cluster.io import load_cluster
    from simulator.errors import SpecError
    from simulator.strategy import Framework, Strategy, ZeroStage, build_layout
    from simulator.workload import get_preset

    cluster, model = load_cluster("dgx-a100", nodes=1), get_preset("gpt3-125m")
    for zero in (ZeroStage.ZERO2, ZeroStage.ZERO3):
        for framework in (None, Framework.DEEPSPEED):
            with pytest.raises(SpecError) as err:
                build_layout(Strategy(global_batch=16, dp=4, pp=2, zero=zero, framework=framework), cluster, model)
            assert err.value.field == "zero"
            assert "deepspeed" in str(err.value) and "fsdp2" in str(err.value) and "\n" not in str(err.value)
        build_layout(Strategy(global_batch=16, dp=4, pp=2, zero=zero, framework=Framework.FSDP2), cluster, model)
        build_layout(Strategy(global_batch=16, dp=8, pp=1, zero=zero), cluster, model)
    build_layout(Strategy(global_batch=16, dp=4, pp=2, zero=ZeroStage.ZERO1), cluster, model)
