"""estimate_many gives estimate's numbers for every candidate, and handles bad candidates."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from simulator.workload.context import ContextKind
from simulator.workload.fp8 import Fp8Recipe, MatmulPrecision
from simulator.workload.kinds import KernelFusion, ModelCode
from simulator.workload.moe_routing import Dispatcher, Routing

from simulator.analytical import estimate
from simulator.analytical_vec import OnInvalid, estimate_many
from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.errors import SpecError
from simulator.results import Category
from simulator.attention_efficiency import AttentionBackend
from simulator.strategy.kinds import GradReduceDtype, MixedPrecision, OptimizerImpl
from simulator.strategy import (AllReduceAlgorithm, AllReduceSync, AttentionKind, Framework, InputPipeline, Offload,
                                ParamServerSync, PlacementOrder, Recompute, Role, ScheduleKind, Strategy,
                                Partitioning, StragglerModel, ZeroStage)
from simulator.workload import get_preset


@pytest.fixture(scope="module")
def setup():
    base = load_preset("dgx-a100", 2)
    host = replace(base.node.host, cpu_adam_params_per_s=2e9, storage_read_GBps=0.5)  # test figures
    return replace(base, node=replace(base.node, host=host)), get_preset("megatron-1.7b")


CANDIDATES = [
    Strategy(global_batch=32),
    Strategy(global_batch=64, tp=2, pp=4, schedule=ScheduleKind.GPIPE),
    Strategy(global_batch=64, tp=2, pp=4),
    Strategy(global_batch=32, tp=2, pp=4),  # same structure as the one above, another batch
    Strategy(global_batch=64, tp=2, pp=4, schedule=ScheduleKind.INTERLEAVED, virtual_stages=3,
             sequence_parallel=True, recompute=Recompute.FULL),
    Strategy(global_batch=32, tp=4, zero=ZeroStage.ZERO2, dp_sync=AllReduceSync(algorithm=AllReduceAlgorithm.RING)),
    Strategy(global_batch=32, zero=ZeroStage.ZERO3, recompute=Recompute.SELECTIVE),
    # the same structure but eager attention: must not share the flash candidate's compiled numbers
    Strategy(global_batch=32, zero=ZeroStage.ZERO3, recompute=Recompute.SELECTIVE, attention=AttentionKind.EAGER),
    Strategy(global_batch=32, zero=ZeroStage.ZERO3, recompute=Recompute.SELECTIVE_OP),  # torchtitan's op-level
    Strategy(global_batch=32, zero=ZeroStage.ZERO3, offload=Offload.PARAMS),
    Strategy(global_batch=32, zero=ZeroStage.ZERO1, offload=Offload.OPTIMIZER,
             dp_sync=AllReduceSync(overlap_grad_reduce=False)),
    Strategy(global_batch=32, dp_sync=ParamServerSync(shards=4)),
    # FSDP2 under torch's pipelining: the share of actions that gather depends on m (simulator.gather_reuse), so
    # each batch compiles its own structure (analytical_structures.batch_bound)
    Strategy(global_batch=32, pp=2, zero=ZeroStage.ZERO2, framework=Framework.FSDP2),
    Strategy(global_batch=64, pp=2, zero=ZeroStage.ZERO2, framework=Framework.FSDP2),
    Strategy(global_batch=64, tp=2, pp=4, schedules_per_step=2),  # two chained schedules of 16
    Strategy(global_batch=64, pp=2, input=InputPipeline(bytes_per_sample=50_000_000)),
    Strategy(global_batch=64, pp=2, input=InputPipeline(bytes_per_sample=50_000_000, prefetch_batches=0)),
]


def test_estimate_many_equals_estimate(setup):
    cluster, model = setup
    cache = CostCache(cluster)
    frame = estimate_many(cluster, model, CANDIDATES, cache=cache)
    assert len(frame) == len(CANDIDATES) and (frame["error"] == "").all()
    for i, s in enumerate(CANDIDATES):
        r = estimate(cluster, model, s, cache=cache)
        row = frame.iloc[i]
        assert row["step_time_s"] == pytest.approx(r.step_time_s, rel=1e-9), i
        assert row["mfu"] == pytest.approx(r.mfu, rel=1e-9)
        for c in Category:
            assert row[c.value] == pytest.approx(r.breakdown[c], rel=1e-9, abs=1e-12), (i, c)
    assert frame.iloc[-1]["data"] > 0 and frame.iloc[-1]["step_time_s"] > frame.iloc[-2]["step_time_s"]
    assert frame.iloc[7]["step_time_s"] > frame.iloc[6]["step_time_s"]  # eager + selective recompute is slower


def test_more_micro_batches_cost_more(setup):
    cluster, model = setup
    frame = estimate_many(cluster, model, [Strategy(global_batch=g, tp=2, pp=4) for g in (16, 32, 64)])
    assert np.all(np.diff(frame["step_time_s"]) > 0)
    assert list(frame["micro_batches"]) == [8, 16, 32]  # dp = 16 / (2·4) = 2


def test_bad_candidates_raise_or_are_marked(setup):
    cluster, model = setup
    bad = [Strategy(global_batch=32), Strategy(global_batch=33), Strategy(global_batch=32, tp=5)]
    with pytest.raises(SpecError, match="candidate 1"):
        estimate_many(cluster, model, bad)
    frame = estimate_many(cluster, model, bad, on_invalid=OnInvalid.MARK)
    assert frame["error"].iloc[0] == "" and "global_batch" in frame["error"].iloc[1] and "tp" in frame["error"].iloc[2]
    assert np.isnan(frame["step_time_s"].iloc[1]) and frame["step_time_s"].iloc[0] > 0
    with pytest.raises(SpecError, match="on_invalid"):  # the enum, not its old string spelling
        estimate_many(cluster, model, bad, on_invalid="mark")


def test_warm_cache_gives_the_same_frame(setup):
    """A second call finds every structure remembered in the cache; its numbers must not change,
    also when new structures join the stacks between calls."""
    cluster, model = setup
    cache = CostCache(cluster)
    first = estimate_many(cluster, model, CANDIDATES[:4], cache=cache)
    estimate_many(cluster, model, CANDIDATES[4:], cache=cache)
    again = estimate_many(cluster, model, CANDIDATES, cache=cache)
    fresh = estimate_many(cluster, model, CANDIDATES)
    pd.testing.assert_frame_equal(again, fresh, check_exact=True)
    pd.testing.assert_frame_equal(again.iloc[:4], first, check_exact=True)


def test_non_strategy_and_interleaved_batch_are_marked(setup):
    cluster, model = setup
    inter = Strategy(global_batch=36, tp=2, pp=4, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2)  # m = 18
    frame = estimate_many(cluster, model, [CANDIDATES[0], "not a strategy", inter], on_invalid=OnInvalid.MARK)
    assert frame["error"].iloc[0] == "" and "Strategy" in frame["error"].iloc[1]
    assert "multiple of pp=4" in frame["error"].iloc[2] and np.isnan(frame["mfu"].iloc[2])
    with pytest.raises(SpecError, match="candidate 1"):
        estimate_many(cluster, model, [CANDIDATES[0], "not a strategy", inter])


STRUCTURE_VARIANTS = {
    "moe_dispatcher": dict(moe_dispatcher=Dispatcher.DEEPEP), "moe_routing": dict(moe_routing=Routing.ROUND_ROBIN),
    "micro_batch": dict(micro_batch=2), "dp": dict(dp=4), "tp": dict(tp=2), "pp": dict(pp=2),
    "placement": dict(placement=PlacementOrder.DP_TP_PP), "schedule": dict(schedule=ScheduleKind.GPIPE),
    "virtual_stages": dict(pp=2, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2),
    "schedules_per_step": dict(pp=2, schedules_per_step=2),
    "layer_split": dict(pp=2, layer_split=(4, 8)), "sequence_parallel": dict(tp=2, sequence_parallel=True),
    "zero": dict(zero=ZeroStage.ZERO1), "offload": dict(zero=ZeroStage.ZERO1, offload=Offload.OPTIMIZER),
    "recompute": dict(recompute=Recompute.FULL), "attention": dict(attention=AttentionKind.EAGER),
    "dp_sync": dict(dp_sync=AllReduceSync(bucket_bytes=1 << 20)),
    "framework": dict(framework=Framework.DEEPSPEED), "partitioning": dict(partitioning=Partitioning.FLAT),
    "kernel_fusion": dict(kernel_fusion=KernelFusion.MEGATRON),
    "model_code": dict(model_code=ModelCode.TORCHTITAN_2024_12),
    "ep": dict(ep=2), "routing_skew": dict(routing_skew=1.5),
}
STRUCTURE_VARIANTS.update({  # activation offload's host copies are compiled (simulator.compile.act_offload_part)
    "offload_activations": dict(recompute=Recompute.FULL, offload_activations=True),
})
STRUCTURE_VARIANTS.update({  # context parallelism (issue 14 §2)
    "cp": dict(cp=2), "cp_kind": dict(cp_kind=ContextKind.ALL_TO_ALL), "cp_balanced": dict(cp_balanced=False),
})
STRUCTURE_VARIANTS.update({  # FP8 (issue 14 §3)
    "precision": dict(precision=MatmulPrecision.FP8),
    "fp8_recipe": dict(precision=MatmulPrecision.FP8, fp8_recipe=Fp8Recipe.TE),
    "fp8_all_gather": dict(precision=MatmulPrecision.FP8, framework=Framework.FSDP2, zero=ZeroStage.ZERO3,
                           fp8_all_gather=True),
})
STRUCTURE_VARIANTS.update({  # the Adam(W) implementation's update bytes (simulator.compile.offload_part)
    "optimizer_impl": dict(optimizer_impl=OptimizerImpl.FUSED),
    "mixed_precision": dict(mixed_precision=MixedPrecision.PARAM_DTYPE),  # casts (simulator.workload.autocast)
    "attention_backend": dict(attention_backend=AttentionBackend.CUDNN),  # the fused kernel's rates
    "fsdp1_flat_params": dict(framework=Framework.FSDP2, zero=ZeroStage.ZERO3, fsdp1_flat_params=True),  # copies
    "unfused_grad_accumulation": dict(framework=Framework.MEGATRON, unfused_grad_accumulation=True),  # the adds
    "megatron_unbuffered_grads": dict(framework=Framework.MEGATRON, unfused_grad_accumulation=True,
                                      megatron_unbuffered_grads=True),  # the per-step passes (megatron_step)
    "moe_a2a_overlap": dict(framework=Framework.MEGATRON, ep=2, moe_a2a_overlap=True),  # the all-to-alls' remainder
    "grad_reduce_dtype": dict(grad_reduce_dtype=GradReduceDtype.FP32),  # the DP all-reduce's bytes (torch DDP
    # refuses fp32 under param-dtype mixed precision; under its default autocast the field is accepted)
})
"""One change of each structural field (:data:`Role.STRUCTURE`), to prove it reaches the key."""


def test_structure_key_follows_the_field_declarations():
    """Every field declared STRUCTURE changes the cache key, every other field leaves it alone; a new
    structural field fails here until it has a variant (so two different strategies can never share
    one compiled structure)."""
    from dataclasses import replace

    from simulator.analytical_structures import COMPILED_SCENARIO, KEY_FIELDS as _KEY_FIELDS, structure_key as _key
    from simulator.strategy.fields import declared
    structural = {f.name for f, d in declared(Strategy) if d.role is Role.STRUCTURE} | set(COMPILED_SCENARIO)
    assert set(_KEY_FIELDS) == structural == set(STRUCTURE_VARIANTS)
    base = Strategy(global_batch=64)
    for name, change in STRUCTURE_VARIANTS.items():
        assert _key(replace(base, **change)) != _key(base), name
    same = replace(base, global_batch=128, profile="ddp", stragglers=StragglerModel(seed=3))
    assert _key(same) == _key(base)


def test_a_cache_of_another_cluster_is_refused():
    """estimate_many compiles with the cache's cluster and times with its own: they must be one cluster."""
    other = CostCache(load_preset("dgx-a100", 2))
    with pytest.raises(SpecError, match="^cache: the cost cache belongs to another cluster"):
        estimate_many(load_preset("dgx-h100"), get_preset("gpt3-125m"), [Strategy(global_batch=8)], cache=other)


@pytest.mark.parametrize("bad", [Strategy(global_batch=32, tp=5), "not a strategy"])
@pytest.mark.filterwarnings("error")
def test_only_invalid_candidates_warn_nothing(setup, bad):
    """A batch of only invalid candidates has no structure row: the batch rules once read a placeholder
    row of zeros and divided by its pp and micro-batch (numpy's divide-by-zero RuntimeWarning that
    `trainplan plan` printed, issue 15). Warnings are errors here; the candidate is still marked."""
    cluster, model = setup
    frame = estimate_many(cluster, model, [bad], on_invalid=OnInvalid.MARK)
    assert frame["error"].iloc[0] != "" and np.isnan(frame["step_time_s"].iloc[0])
    mixed = estimate_many(cluster, model, [bad, CANDIDATES[0]], on_invalid=OnInvalid.MARK)
    assert mixed["error"].iloc[1] == "" and mixed["step_time_s"].iloc[1] > 0
