"""torch DDP's gradient-accumulation adds (:mod:`simulator.compile.grad_accum`): autograd's ``AccumulateGrad`` adds
each micro-batch's gradient into ``.grad`` after the first [src: torch-eager-decompositions].

Hand-worked: GPT-3 125M (N = 12 · 7,087,872 + 40,171,776 = 125,226,240 parameters per rank) on one dgx-a100 node,
dp 8, global batch 64 at micro-batch 2: m = 4 micro-batches, 3 adds per step of 3 passes. Under autocast (fp32
gradients) 3 · 3 · 4 · N = 4,508,144,640 B per step, at 2039 GB/s × 0.79 = 1.61081e12 B/s 2.7987 ms, 0.69967 ms per
micro-batch's backward; under param-dtype mixed precision (bf16 gradients) half."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import compile_step, step
from simulator.compile.costs import CostCache
from simulator.compile.grad_accum import accumulation_add_s, accumulation_bytes_per_step
from simulator.strategy import Framework, Strategy, ZeroStage, build_layout
from simulator.strategy.kinds import MixedPrecision
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-a100"), get_preset("gpt3-125m")
DDP = Strategy(global_batch=64, micro_batch=2, dp=8)
HBM_BPS = 2039e9 * 0.79


def _adds(strategy: Strategy) -> tuple[float, float]:
    layout, cache = build_layout(strategy, CLUSTER, MODEL), CostCache(CLUSTER)
    cc = step._chunk_compute(cache, MODEL, layout, 0)
    return accumulation_bytes_per_step(MODEL, layout, cc), accumulation_add_s(cache, MODEL, layout, cc)


def test_hand_worked_autocast_and_param_dtype():
    nbytes, per_micro_batch_s = _adds(DDP)
    assert nbytes == 4_508_144_640
    assert per_micro_batch_s == pytest.approx(4_508_144_640 / HBM_BPS / 4, rel=1e-12)
    assert per_micro_batch_s == pytest.approx(0.69967e-3, rel=1e-4)
    assert _adds(replace(DDP, mixed_precision=MixedPrecision.PARAM_DTYPE))[0] == 4_508_144_640 / 2


@pytest.mark.parametrize("strategy", [
    replace(DDP, global_batch=16),  # one micro-batch: nothing to accumulate into
    replace(DDP, framework=Framework.FSDP2, zero=ZeroStage.ZERO3),  # reduce-scattered every micro-batch
    replace(DDP, framework=Framework.MEGATRON),  # its main_grad adds are not modelled (module docstring)
])
def test_no_adds_elsewhere(strategy):
    assert _adds(strategy) == (0.0, 0.0)


def test_the_compiled_backward_carries_them():
    base = compile_step(CLUSTER, MODEL, replace(DDP, global_batch=16), memory=False).stages[0].chunks[0]
    acc = compile_step(CLUSTER, MODEL, DDP, memory=False).stages[0].chunks[0]
    assert acc.bwd_s - base.bwd_s == pytest.approx(4_508_144_640 / HBM_BPS / 4, rel=1e-9)
    assert acc.fwd_s == base.fwd_s
