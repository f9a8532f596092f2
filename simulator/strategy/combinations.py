"""The rules between a strategy's fields, each written here only.

:meth:`simulator.strategy.spec.Strategy.__post_init__` checks every field alone (its declaration in
:mod:`simulator.strategy.fields`) and then calls :func:`check_combinations`. A rule that needs the
cluster or the workload (divisibility of degrees and batch) is a layout rule
(:mod:`simulator.strategy.rules`), not one of these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.errors import SpecError
from simulator.schedules import ScheduleKind, interleaved_ok
from simulator.strategy.framework import Framework, resolve_framework
from simulator.strategy.kinds import AttentionKind, GradReduceDtype, MixedPrecision, Offload, ZeroStage
from simulator.strategy.sync import ParamServerSync
from simulator.workload import Recompute
from simulator.workload.fp8 import Fp8Recipe, MatmulPrecision
from simulator.workload.protocol import divisors, one_of

if TYPE_CHECKING:
    from simulator.strategy.spec import Strategy


def check_combinations(s: Strategy) -> None:
    """Raise :class:`SpecError` naming the field and the fix for the first broken rule between fields."""
    _check_schedule_and_offload(s)
    _check_sync(s)
    _, framework = resolve_framework(s.zero, s.partitioning, s.framework)
    _check_fp8(s, framework)
    _check_framework_options(s, framework)
    _check_layer_split(s)


def _check_schedule_and_offload(s: Strategy) -> None:
    if s.virtual_stages > 1 and s.schedule is not ScheduleKind.INTERLEAVED:
        raise SpecError("virtual_stages", f"{s.virtual_stages} chunks per rank need schedule interleaved, "
                        f"not {s.schedule.value}; or use virtual_stages 1")
    if s.offload is Offload.OPTIMIZER and s.zero < ZeroStage.ZERO1:
        raise SpecError("offload", "optimizer offload partitions the optimizer state: use zero 1, 2 or 3")
    if s.offload in (Offload.PARAMS, Offload.NVME) and s.zero is not ZeroStage.ZERO3:
        raise SpecError("offload", f"{s.offload.value} offload needs zero 3 (DeepSpeed offload_param is "
                        "stage-3 only)")
    if s.offload_activations and s.recompute is not Recompute.FULL:
        raise SpecError("offload_activations", "only activation checkpoints (the layer inputs kept by full "
                        "recomputation) go to the host; use recompute full")


def _check_sync(s: Strategy) -> None:
    if isinstance(s.dp_sync, ParamServerSync) and s.zero is not ZeroStage.ZERO0:
        raise SpecError("zero", "ZeRO partitions state over an all-reduce group; with a parameter server "
                        "use zero 0")
    if s.cp > 1 and isinstance(s.dp_sync, ParamServerSync):
        raise SpecError("cp", "a parameter server's workers are whole data-parallel replicas; use the "
                        "all-reduce gradient sync with cp, or cp 1")
    if s.cp > 1 and s.attention is not AttentionKind.FLASH:
        raise SpecError("cp", "context parallelism runs the attention core as flash attention (Transformer "
                        "Engine's context-parallel attention is fused); use attention flash or cp 1")


def _check_framework_options(s: Strategy, framework: Framework) -> None:
    """Options that only one framework has."""
    if (framework is Framework.TORCH_DDP and s.grad_reduce_dtype is GradReduceDtype.FP32
            and s.resolved_mixed_precision is MixedPrecision.PARAM_DTYPE):  # [src: torch-ddp]
        raise SpecError("grad_reduce_dtype", "fp32 cannot be run by torch DDP under mixed_precision param-dtype: "
                        "DDP all-reduces gradients in their own (bf16/fp16) dtype; drop grad_reduce_dtype, "
                        "or use mixed_precision autocast or framework megatron/fsdp2")
    if s.fsdp1_flat_params and (framework is not Framework.FSDP2 or s.zero < ZeroStage.ZERO2):
        raise SpecError("fsdp1_flat_params", "is torch FSDP1's sharding, modelled on FSDP2's: use framework fsdp2 "
                        "with zero 2 or 3, or drop it")
    if s.moe_a2a_overlap and (framework is not Framework.MEGATRON or s.ep < 2):
        raise SpecError("moe_a2a_overlap", "is Megatron-Core's overlap of the expert-parallel all-to-alls: use "
                        "framework megatron with ep 2 or more, or drop it")
    if s.unfused_grad_accumulation and framework is not Framework.MEGATRON:
        raise SpecError("unfused_grad_accumulation", f"is Megatron-LM's gradient-accumulation option; "
                        f"{framework.value}'s adds follow from the framework (simulator.workload.grad_accum): "
                        "use framework megatron, or drop it")
    if s.megatron_unbuffered_grads and (framework is not Framework.MEGATRON or s.zero is not ZeroStage.ZERO0
                                        or not s.unfused_grad_accumulation):
        raise SpecError("megatron_unbuffered_grads", "is Megatron-LM's local DDP without gradient buffers: use "
                        "framework megatron with zero 0 and unfused_grad_accumulation, or drop it")
    if s.gradient_as_bucket_view and framework is not Framework.TORCH_DDP:
        raise SpecError("gradient_as_bucket_view", f"is a torch DDP option; {framework.value} has no DDP "
                        "buckets (use framework torch with zero 0 or 1)")


def _check_fp8(s: Strategy, framework: Framework) -> None:
    if s.precision is not MatmulPrecision.FP8:
        for name in ("fp8_recipe", "fp8_all_gather"):
            if getattr(s, name):
                raise SpecError(name, "is meaningful with precision fp8 only; add precision fp8 or drop it")
        return
    recipe = s.resolved_fp8_recipe
    if recipe is None:
        raise SpecError("fp8_recipe", f"{framework.value} has no FP8 recipe of its own here; give fp8_recipe "
                        "te (Transformer Engine modules) or torchao")
    if s.fp8_all_gather and (recipe is not Fp8Recipe.TORCHAO or framework is not Framework.FSDP2
                             or s.zero < ZeroStage.ZERO2):
        raise SpecError("fp8_all_gather", "is FSDP2's float8 all-gather (torchao): use fp8_recipe torchao with "
                        "framework fsdp2 and zero 2 or 3")


def _check_layer_split(s: Strategy) -> None:
    if s.layer_split is None:
        return
    if not isinstance(s.layer_split, tuple) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in s.layer_split):
        raise SpecError("layer_split", f"must be a tuple of positive integers, got {s.layer_split!r}")
    if len(s.layer_split) != s.pp * s.virtual_stages:
        raise SpecError("layer_split", f"has {len(s.layer_split)} entries; give pp·virtual_stages = "
                        f"{s.pp * s.virtual_stages}")


def check_schedules_per_step(s: Strategy, m: int) -> None:
    """``schedules_per_step`` k against the m micro-batches per pipeline and step: k > 1 needs a pipeline, k must
    divide m, and an interleaved schedule needs each schedule's m / k a multiple of pp
    (:func:`simulator.schedules.interleaved_ok`)."""
    k = s.schedules_per_step
    if k == 1:
        return
    if s.pp == 1:
        raise SpecError("schedules_per_step", f"{k} schedules per step need pp > 1 (without a pipeline the "
                        "micro-batches already run one after another); use 1")
    if m % k:
        raise SpecError("schedules_per_step", f"{k} does not divide the {m} micro-batches per pipeline and step; "
                        f"use {one_of(divisors(m))}")
    if s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1 and not interleaved_ok(m // k, s.pp):
        raise SpecError("schedules_per_step", f"each of {k} interleaved schedules gets {m // k} micro-batches, not "
                        f"a multiple of pp {s.pp}; use a k that leaves a multiple of {s.pp}")
