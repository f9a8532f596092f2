"""torch DDP's bucket copies charged in the step (simulator/compile/ddp_copies.py), by hand.

GPT-3 125M (125,226,240 parameters) under autocast keeps fp32 gradients: b = 4. On dgx-a100 a memory-bound kernel
moves 2039 GB/s × 0.79 = 1,610.81 GB/s. Without bucket views torch DDP moves 6·4 = 24 B per parameter per step,
24 × 125,226,240 = 3,005,429,760 B: 3,005,429,760 / 1.61081e12 = 1.8658 ms; with views only the division,
8 B per parameter: 1,001,809,920 B, 0.6219 ms [src: torch-ddp-bucket-copies]. They are charged on the compute
stream after the last bucket's all-reduce, before the optimizer: the optimizer category grows by them, the dp
category does not, in both engines.
"""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from simulator.analytical import estimate_work
from simulator.cluster.presets import load_preset
from simulator.compile import CostCache, compile_step
from simulator.compile.ddp_copies import ddp_copy_s
from simulator.compile.step import stage_work
from simulator.engine.step import simulate
from simulator.results import Category
from simulator.strategy import AllReduceSync, Framework, Strategy, ZeroStage, build_layout
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-a100", 1), get_preset("gpt3-125m")
PARAMS = 125_226_240
B_HBM = 2039e9 * 0.79
DDP = Strategy(global_batch=16, micro_batch=2, dp=8, framework=Framework.TORCH_DDP)


def _copy_s(s: Strategy) -> float:
    return ddp_copy_s(CLUSTER.device, MODEL.dtype, 4, PARAMS, build_layout(s, CLUSTER, MODEL))


def test_bytes_per_step_by_hand():
    assert MODEL.params == PARAMS
    assert _copy_s(DDP) == pytest.approx(3_005_429_760 / B_HBM, rel=1e-12)  # 1.8658 ms
    assert _copy_s(replace(DDP, gradient_as_bucket_view=True)) == pytest.approx(1_001_809_920 / B_HBM, rel=1e-12)


def test_sync_after_backward_copies_whatever_the_views():
    """overlap off: the executor's torch.cat, div_ and copy back, 24 B per parameter with views too."""
    off = replace(DDP, gradient_as_bucket_view=True, dp_sync=AllReduceSync(overlap_grad_reduce=False))
    assert _copy_s(off) == pytest.approx(3_005_429_760 / B_HBM, rel=1e-12)


@pytest.mark.parametrize("s", [
    replace(DDP, zero=ZeroStage.ZERO2, framework=Framework.FSDP2),
    replace(DDP, zero=ZeroStage.ZERO3, framework=Framework.FSDP2),
    replace(DDP, zero=ZeroStage.ZERO1, framework=Framework.DEEPSPEED),
    replace(DDP, framework=Framework.MEGATRON),
])
def test_other_frameworks_pay_nothing(s):
    assert _copy_s(s) == 0.0


def test_zero1_under_torch_pays_them():
    """ZeroRedundancyOptimizer wraps a DDP model: the reducer still copies."""
    assert _copy_s(replace(DDP, zero=ZeroStage.ZERO1)) == pytest.approx(3_005_429_760 / B_HBM, rel=1e-12)


def test_stage_optimizer_carries_them():
    """Rank 0's optimizer time without views less with views: (24 − 8) B per parameter it holds."""
    def opt(views: bool) -> float:
        layout = build_layout(replace(DDP, gradient_as_bucket_view=views), CLUSTER, MODEL)
        return stage_work(CostCache(CLUSTER), MODEL, layout, 0).optimizer_s
    assert opt(False) - opt(True) == pytest.approx(16 * PARAMS / B_HBM, rel=1e-9)  # 1.2438 ms


@pytest.mark.parametrize("engine", ["analytical", "des"])
def test_time_lands_before_the_optimizer(engine):
    """Both engines: the optimizer category grows by the copies, the step by the same, dp and backward not."""
    def breakdown(views: bool):
        work = compile_step(CLUSTER, MODEL, replace(DDP, gradient_as_bucket_view=views))
        return (estimate_work(work) if engine == "analytical" else simulate(work, CLUSTER)).breakdown

    copies, views = breakdown(False), breakdown(True)
    extra = 16 * PARAMS / B_HBM
    assert copies[Category.OPTIMIZER] - views[Category.OPTIMIZER] == pytest.approx(extra, rel=1e-6)
    for cat in (Category.BACKWARD, Category.FORWARD, Category.DP):
        assert copies.get(cat, 0.0) == pytest.approx(views.get(cat, 0.0), rel=1e-9, abs=1e-12)


def test_tensor_and_pipeline_families_average_their_own_buckets():
    """tp or pp > 1: no DDP wrapper; the executor's average_gradients (torch.cat, /= size, copy back) moves 24 B
    per parameter at dp > 1, bucket views or not, and nothing at dp = 1. Rank 0 of pp = 2 holds fewer parameters:
    the bytes per parameter are checked, and the seconds for the model's count."""
    from simulator.compile.ddp_copies import bucket_bytes_per_param

    def per_param(**kw) -> int:
        return bucket_bytes_per_param(build_layout(replace(DDP, **kw), CLUSTER, MODEL), 4)
    assert per_param(dp=4, pp=2) == 24
    assert per_param(dp=4, tp=2, gradient_as_bucket_view=True) == 24
    assert per_param(dp=1, tp=2, pp=4) == 0
    assert _copy_s(replace(DDP, dp=4, tp=2)) == pytest.approx(3_005_429_760 / B_HBM, rel=1e-12)


def test_world_size_one_still_copies():
    """The data-parallel family wraps DDP at world size 1 too (our H200 runs: 292 reducer copies per step)."""
    from simulator.compile.ddp_copies import bucket_bytes_per_param
    layout = build_layout(replace(DDP, dp=1, global_batch=2), CLUSTER, MODEL, gpus=1)
    assert bucket_bytes_per_param(layout, 4) == 24


def test_the_grad_sync_memo_tells_views_apart():
    """gradient_as_bucket_view changes grad_sync's answer, so it must stay in its memo key."""
    from simulator.compile.grad_sync import grad_sync_key
    a, b = (build_layout(replace(DDP, gradient_as_bucket_view=v), CLUSTER, MODEL) for v in (False, True))
    assert grad_sync_key(MODEL, a) != grad_sync_key(MODEL, b)


@settings(max_examples=40, deadline=None)
@given(params=st.floats(1e3, 1e11), grad_bytes=st.sampled_from([2, 4]), views=st.booleans(),
       overlap=st.booleans(), framework=st.sampled_from(list(Framework)))
def test_copies_are_linear_in_parameters_and_views_never_cost_more(params, grad_bytes, views, overlap, framework):
    s = replace(DDP, gradient_as_bucket_view=views and framework is Framework.TORCH_DDP,
                dp_sync=AllReduceSync(overlap_grad_reduce=overlap), framework=framework,
                zero=ZeroStage.ZERO0 if ZeroStage.ZERO0 in framework.zero_stages else min(framework.zero_stages))
    layout = build_layout(s, CLUSTER, MODEL)
    one = ddp_copy_s(CLUSTER.device, MODEL.dtype, grad_bytes, params, layout)
    assert ddp_copy_s(CLUSTER.device, MODEL.dtype, grad_bytes, 2 * params, layout) == pytest.approx(2 * one)
    if framework is not Framework.TORCH_DDP:
        assert one == 0.0
    else:
        without = ddp_copy_s(CLUSTER.device, MODEL.dtype, grad_bytes, params,
                             build_layout(replace(s, gradient_as_bucket_view=False), CLUSTER, MODEL))
        assert 0 < one <= without == pytest.approx(params * 6 * grad_bytes / B_HBM)
