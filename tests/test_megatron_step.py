"""Megatron-LM 2021's per-step gradient and parameter passes under its unbuffered local DDP
(:mod:`simulator.compile.megatron_step`) [src: megatron-2021-fp16-optimizer, megatron-ddp-main-grad].

Hand-worked per parameter, 2-byte gradients and parameters: flatten, divide and copy back 3 · (2 + 2) = 12; the
fp16 gradients copied into fp32 main gradients 2 + 4 = 6; unscale and inf check 4 + 4 = 8; the L2 norm 4; the fp32
main parameters copied back 4 + 2 = 6: 36 bytes; less the first micro-batch's add, which autograd does not make (it
assigns ``.grad``; :func:`simulator.compile.grad_adds.first_add_bytes_per_param`), 3 · 2 = 6: 30 bytes net. fp32
(``FP32Optimizer``): 3 · 8 + 4 = 28.

GPT-3 125M on one dgx-a100 node, dp 8: a rank holds N = 125,226,240 parameters (tests/test_grad_accum.py), so the
step's optimizer phase grows by 30 · N B at 2039 GB/s × 0.79 (the achievable HBM bandwidth): 2.3322 ms."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.compile.grad_adds import first_add_bytes_per_param
from simulator.compile.megatron_step import step_bytes_per_param
from simulator.errors import SpecError
from simulator.strategy import Framework, Strategy, ZeroStage, build_layout
from simulator.strategy.kinds import GradReduceDtype, MixedPrecision
from simulator.workload import get_preset
from simulator.workload.kinds import DtypePolicy

CLUSTER = load_preset("dgx-a100", 1)
MODEL = get_preset("gpt3-125m")
N = 12 * 7_087_872 + 40_171_776
HBM_BPS = 2039e9 * 0.79
BUFFERED = Strategy(global_batch=64, dp=8, micro_batch=2, framework=Framework.MEGATRON,
                    mixed_precision=MixedPrecision.PARAM_DTYPE, grad_reduce_dtype=GradReduceDtype.PARAM_DTYPE,
                    unfused_grad_accumulation=True)
UNBUFFERED = replace(BUFFERED, megatron_unbuffered_grads=True)


def test_bytes_per_parameter():
    assert step_bytes_per_param(DtypePolicy.FP16_MIXED, UNBUFFERED) == 36
    assert step_bytes_per_param(DtypePolicy.BF16_MIXED, UNBUFFERED) == 36  # taken as the fp16 run it stands for
    assert step_bytes_per_param(DtypePolicy.FP32, UNBUFFERED) == 28
    assert step_bytes_per_param(DtypePolicy.FP16_MIXED, BUFFERED) == 0
    assert first_add_bytes_per_param(MODEL.dtype, build_layout(UNBUFFERED, CLUSTER, MODEL)) == 6
    assert first_add_bytes_per_param(MODEL.dtype, build_layout(BUFFERED, CLUSTER, MODEL)) == 0  # main_grad adds


@pytest.mark.parametrize("global_batch", [16, 64])
def test_the_optimizer_phase_carries_the_passes_once_per_step(global_batch):
    """Once per step whatever the micro-batches (the backward's adds are per micro-batch and unchanged)."""
    base = compile_step(CLUSTER, MODEL, replace(BUFFERED, global_batch=global_batch), memory=False).stages[0]
    legacy = compile_step(CLUSTER, MODEL, replace(UNBUFFERED, global_batch=global_batch), memory=False).stages[0]
    assert MODEL.params == N
    assert legacy.optimizer_s - base.optimizer_s == pytest.approx(30 * N / HBM_BPS, rel=1e-9)
    assert legacy.optimizer_s - base.optimizer_s == pytest.approx(2.3322e-3, rel=1e-4)
    assert legacy.chunks[0].bwd_s == base.chunks[0].bwd_s


@pytest.mark.parametrize("change", [dict(framework=Framework.TORCH_DDP, unfused_grad_accumulation=False),
                                    dict(zero=ZeroStage.ZERO1), dict(unfused_grad_accumulation=False)])
def test_only_megatron_zero0_unfused_runs_it(change):
    with pytest.raises(SpecError, match="^megatron_unbuffered_grads: is Megatron-LM's local DDP"):
        replace(UNBUFFERED, **change)
