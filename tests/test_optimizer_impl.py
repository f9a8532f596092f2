"""The Adam(W) implementation (``optimizer_impl``): its bytes, the framework defaults, and the executor running it.

- Bytes: torch's unfused AdamW makes 20 fp32 passes per parameter (hand count of ``_multi_tensor_adam`` in torch
  2.13.0, ``UNFUSED_ADAMW_PASSES``' docstring): 80 B against the fused kernel's 28 B in bf16 mixed precision.
  Their ratio, 2.86, is checked against our H200 measurement of both on 2^26 fp32 parameters, foreach 1561 µs
  and fused 556 µs: 2.81 [src: own-h200-2026-11-24] (docs/hardware_measured.md, memory-bound kernels; tolerance
  5 %: the two ran at 84 % and 86 % of the preset's achievable bandwidth).
- Defaults: torch's own default (foreach on a GPU, the for-loop on the CPU) for the torch frameworks, fused for
  Megatron-LM and DeepSpeed; a strategy's ``optimizer_impl`` wins.
- Executor: every family builds ``torch.optim.AdamW`` with the plan's implementation (1 gloo rank).
"""

import pytest

from simulator.cluster.io import load_cluster
from simulator.compile import offload_part
from simulator.compile.offload_part import UNFUSED_ADAMW_PASSES, adam_bytes_per_param, gpu_optimizer_s
from simulator.strategy import Framework, Strategy
from simulator.strategy.flat import strategy_from_flat
from simulator.strategy.kinds import OptimizerImpl
from simulator.workload import DtypePolicy

H200_FOREACH_US, H200_FUSED_US = 1561.0, 556.0
"""AdamW over 2^26 fp32 parameters on the H200, foreach and fused (docs/hardware_measured.md)."""


def test_unfused_adamw_moves_twenty_fp32_passes_per_parameter():
    assert UNFUSED_ADAMW_PASSES == 2 + 3 + 2 + 3 + 2 + 2 + 2 + 4  # the operators, in adam.py's order
    for dtype in DtypePolicy:
        for impl in (OptimizerImpl.FOREACH, OptimizerImpl.FOR_LOOP):
            assert adam_bytes_per_param(dtype, impl) == 80
    assert adam_bytes_per_param(DtypePolicy.BF16_MIXED, OptimizerImpl.FUSED) == 28
    assert adam_bytes_per_param(DtypePolicy.BF16_MIXED) == 28  # fused unless told


def test_unfused_to_fused_ratio_matches_the_h200_measurement():
    model = adam_bytes_per_param(DtypePolicy.FP32, OptimizerImpl.FOREACH) / adam_bytes_per_param(DtypePolicy.FP32)
    assert model == pytest.approx(H200_FOREACH_US / H200_FUSED_US, rel=0.05)


@pytest.mark.parametrize("framework, gpu, cpu", [
    (Framework.TORCH_DDP, OptimizerImpl.FOREACH, OptimizerImpl.FOR_LOOP),
    (Framework.FSDP2, OptimizerImpl.FOREACH, OptimizerImpl.FOR_LOOP),
    (Framework.MEGATRON, OptimizerImpl.FUSED, OptimizerImpl.FUSED),
    (Framework.DEEPSPEED, OptimizerImpl.FUSED, OptimizerImpl.FUSED),
])
def test_framework_defaults_follow_the_device(framework, gpu, cpu):
    assert framework.optimizer_impl(foreach_device=True) is gpu
    assert framework.optimizer_impl(foreach_device=False) is cpu
    zero = 3 if framework is Framework.FSDP2 else 0
    s = strategy_from_flat({"global_batch": 8, "framework": framework.value, "zero": zero})
    assert offload_part.optimizer_impl(s, load_cluster("hgx-h200").device) is gpu
    assert offload_part.optimizer_impl(s, load_cluster("localhost-cpu").device) is cpu


def test_a_given_implementation_wins_and_sets_the_optimizer_time():
    h200 = load_cluster("hgx-h200")
    s = strategy_from_flat({"global_batch": 8, "optimizer_impl": "fused"})
    assert s.optimizer_impl is OptimizerImpl.FUSED
    assert offload_part.optimizer_impl(s, h200.device) is OptimizerImpl.FUSED
    unfused = gpu_optimizer_s(h200, DtypePolicy.BF16_MIXED, 1e9, OptimizerImpl.FOREACH)
    assert unfused / gpu_optimizer_s(h200, DtypePolicy.BF16_MIXED, 1e9) == pytest.approx(80 / 28, rel=1e-12)


def test_an_unknown_implementation_is_refused_naming_the_field():
    from simulator.errors import SpecError

    with pytest.raises(SpecError, match="optimizer_impl"):
        strategy_from_flat({"global_batch": 8, "optimizer_impl": "apex"})
    with pytest.raises(SpecError, match="optimizer_impl"):
        Strategy(global_batch=8, optimizer_impl="fused")


def test_make_optimizer_runs_the_asked_implementation():
    import torch

    from executor.reference import make_optimizer

    p = torch.nn.Parameter(torch.zeros(4))
    for impl, fused, foreach in ((None, None, None), (OptimizerImpl.FUSED, True, None),
                                 (OptimizerImpl.FOREACH, None, True), (OptimizerImpl.FOR_LOOP, None, False)):
        opt = make_optimizer([p], impl=impl)
        assert (opt.defaults["fused"], opt.defaults["foreach"]) == (fused, foreach), impl


def _built(rank, world):
    from parallel_runs import GPT_TINY, context, plan_for

    from executor.reference import adam_state  # noqa: F401 (the runners' own import path)
    from executor.strategies.data_parallel import DataParallelRunner
    from executor.strategies.parallel import ParallelRunner

    def defaults(opt):
        inner = getattr(opt, "optimizers", [opt])[0]
        inner = getattr(inner, "optim", inner)  # ZeroRedundancyOptimizer's local AdamW
        return inner.defaults["fused"], inner.defaults["foreach"]

    out = {}
    for name, family, flat in (("ddp", DataParallelRunner, {"zero": 0}),
                               ("zero1", DataParallelRunner, {"zero": 1}),
                               ("fsdp2", DataParallelRunner, {"zero": 3}),
                               ("parallel", ParallelRunner, {})):
        runner = family(context(plan_for(GPT_TINY, {**flat, "optimizer_impl": "fused"}), rank, world))
        out[name] = defaults(getattr(runner, "opt", None) or runner.optimizer)
    return out


@pytest.mark.multiproc
def test_every_family_builds_the_plans_implementation(one_rank):
    res = one_rank["built"]
    assert set(res) == {"ddp", "zero1", "fsdp2", "parallel"}
    assert all(v == (True, None) for v in res.values()), res


def _mixed(rank, world):
    from parallel_runs import GPT_TINY, plan_for

    from executor.run import build_context
    from executor.strategies.base import Backend, Precision
    from executor.strategies.data_parallel import DataParallelRunner

    out = {}
    for name, flat in (("fsdp2", {"zero": 3}), ("fsdp2-autocast", {"zero": 3, "mixed_precision": "autocast"}),
                       ("fsdp2-fp32-reduce", {"zero": 3, "framework": "fsdp2"}),
                       ("fsdp2-bf16-reduce", {"zero": 3, "framework": "fsdp2", "grad_reduce_dtype": "param-dtype"}), ("ddp", {"zero": 0})):
        ctx = build_context(plan_for(GPT_TINY, flat), rank=rank, world=world, local_rank=rank,
                            backend=Backend.GLOO, seed=0, precision=Precision.BF16_AUTOCAST)
        runner = DataParallelRunner(ctx)
        dtypes = set()
        hook = runner.model.layers[0].attn.qkv.register_forward_pre_hook(
            lambda m, args: dtypes.add(str(m.weight.dtype)))
        record = runner.train_step(0)
        hook.remove()
        out[name] = (ctx.bf16_params, sorted(dtypes), record.loss == record.loss, str(ctx.mp_policy().reduce_dtype))
    return out


def _both(rank, world):
    """``_built`` and ``_mixed`` in one process: each builds its own runners from fresh plans, so neither reads
    the other's state; one launch instead of two saves a rank's start-up (torch import, about 2 s of CPU)."""
    return {"built": _built(rank, world), "mixed": _mixed(rank, world)}


@pytest.fixture(scope="module")
def one_rank():
    from executor.launch import run

    (res,) = run(_both, 1, timeout_s=180)
    return res


@pytest.mark.multiproc
def test_fsdp2_holds_bf16_parameters_under_param_dtype_and_ddp_autocasts(one_rank):
    """The executor runs the plan's mixed precision: FSDP2's default (param-dtype) gathers bf16 parameters through
    its MixedPrecisionPolicy and runs no autocast, reducing in the plan's grad_reduce_dtype (fp32 by default); asked
    for autocast, FSDP2 keeps fp32 parameters; DDP (the torch framework) autocasts over fp32 parameters."""
    res = one_rank["mixed"]
    assert res["fsdp2"] == (True, ["torch.bfloat16"], True, "torch.bfloat16"), res  # zero 3 alone: deepspeed's bf16
    assert res["fsdp2-fp32-reduce"] == (True, ["torch.bfloat16"], True, "torch.float32"), res  # torchtitan's
    assert res["fsdp2-bf16-reduce"] == (True, ["torch.bfloat16"], True, "torch.bfloat16"), res
    assert res["fsdp2-autocast"] == (False, ["torch.float32"], True, "None"), res
    assert res["ddp"] == (False, ["torch.float32"], True, "None"), res


def test_a_ddp_plan_asking_for_bf16_parameters_runs_as_autocast_and_says_so():
    from parallel_runs import GPT_TINY, plan_for

    from executor.options import _as_torch_runs
    from simulator.plan_scale import Scale, ScaledPlan, ScaleKind
    from simulator.strategy.kinds import MixedPrecision

    plan = plan_for(GPT_TINY, {"zero": 0, "mixed_precision": "param-dtype"})
    scaled = _as_torch_runs(ScaledPlan(planned=plan, run=plan, scale=Scale(ScaleKind.AS_PLANNED), notes=()))
    assert scaled.run.strategy.mixed_precision is MixedPrecision.AUTOCAST
    assert any("param-dtype → autocast" in n for n in scaled.notes)
    fsdp = plan_for(GPT_TINY, {"zero": 3, "framework": "fsdp2"})
    same = ScaledPlan(planned=fsdp, run=fsdp, scale=Scale(ScaleKind.AS_PLANNED), notes=())
    assert _as_torch_runs(same) is same


def test_an_fsdp1_plan_runs_as_fsdp2_and_is_estimated_with_fsdp2s_copies():
    """The executor has no FSDP1 path: a plan with ``fsdp1_flat_params`` runs as FSDP2, so the run plan that
    validation re-simulates drops the field (and with it the FSDP1 model's missing compute-stream copies), with
    a note; without the clearing, validate would compare an FSDP2 run to an FSDP1 estimate."""
    from parallel_runs import GPT_TINY, plan_for

    from executor.options import _as_torch_runs
    from simulator.plan_scale import Scale, ScaledPlan, ScaleKind

    plan = plan_for(GPT_TINY, {"zero": 3, "framework": "fsdp2", "fsdp1_flat_params": True})
    scaled = _as_torch_runs(ScaledPlan(planned=plan, run=plan, scale=Scale(ScaleKind.AS_PLANNED), notes=()))
    assert scaled.run.strategy.fsdp1_flat_params is False
    assert scaled.planned.strategy.fsdp1_flat_params is True
    assert any(n.startswith("fsdp1_flat_params → off") for n in scaled.notes), scaled.notes
