"""torch DDP's gradient adds (:mod:`simulator.compile.grad_accum`): autograd's ``AccumulateGrad`` adds each
micro-batch's gradient into the persisting ``.grad`` [src: torch-eager-decompositions].

Hand-worked: GPT-3 125M (N = 12 · 7,087,872 + 40,171,776 = 125,226,240 parameters per rank) on one dgx-a100 node,
dp 8, micro-batch 2. Under autocast (fp32 gradients) each micro-batch's backward adds 3 · 4 · N = 1,502,714,880 B,
at 2039 GB/s × 0.79 = 1.61081e12 B/s 0.93289 ms; under param-dtype mixed precision (bf16 gradients) half. The cost
per micro-batch does not depend on the global batch (one compiled micro-batch serves every batch)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import compile_step, step
from simulator.compile.costs import CostCache
from simulator.compile.grad_accum import accumulation_add_s, accumulation_bytes
from simulator.strategy import Framework, Strategy, ZeroStage, build_layout
from simulator.strategy.kinds import MixedPrecision
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-a100"), get_preset("gpt3-125m")
DDP = Strategy(global_batch=64, micro_batch=2, dp=8)
HBM_BPS = 2039e9 * 0.79


def _adds(strategy: Strategy) -> tuple[float, float]:
    layout, cache = build_layout(strategy, CLUSTER, MODEL), CostCache(CLUSTER)
    cc = step._chunk_compute(cache, MODEL, layout, 0)
    return accumulation_bytes(MODEL, layout, cc), accumulation_add_s(cache, MODEL, layout, cc)


def test_hand_worked_autocast_and_param_dtype():
    nbytes, per_micro_batch_s = _adds(DDP)
    assert nbytes == 1_502_714_880
    assert per_micro_batch_s == pytest.approx(1_502_714_880 / HBM_BPS, rel=1e-12)
    assert per_micro_batch_s == pytest.approx(0.93289e-3, rel=1e-4)
    assert _adds(replace(DDP, mixed_precision=MixedPrecision.PARAM_DTYPE))[0] == 1_502_714_880 / 2
    assert _adds(replace(DDP, global_batch=16)) == _adds(DDP)  # per micro-batch: the batch does not enter


@pytest.mark.parametrize("strategy", [
    replace(DDP, framework=Framework.FSDP2, zero=ZeroStage.ZERO3),  # reduce-scattered every micro-batch
    replace(DDP, framework=Framework.MEGATRON),  # its main_grad adds are not modelled (module docstring)
])
def test_no_adds_elsewhere(strategy):
    assert _adds(strategy) == (0.0, 0.0)


def test_the_compiled_backward_carries_them():
    """The compiled chunk's backward is the block compute's plus the adds (no FSDP2 copies under DDP)."""
    layout, cache = build_layout(DDP, CLUSTER, MODEL), CostCache(CLUSTER)
    cc = step._chunk_compute(cache, MODEL, layout, 0)
    chunk = compile_step(CLUSTER, MODEL, DDP, memory=False).stages[0].chunks[0]
    assert chunk.bwd_s == pytest.approx(cc.bwd_s + 1_502_714_880 / HBM_BPS, rel=1e-12)
    assert chunk.fwd_s == cc.fwd_s
