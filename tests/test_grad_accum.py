"""Gradient accumulation's adds inside the workload's kernels (:mod:`simulator.workload.grad_accum`): autograd's
``AccumulateGrad`` under torch DDP [src: torch-eager-decompositions], Megatron-LM's unfused adds
[src: megatron-ddp-main-grad]; none for FSDP2 (the shard is accumulated on the reduce stream [src: torch-fsdp2-copies]).

Hand-worked: GPT-3 125M on one dgx-a100 node, dp 8, micro-batch 2. One rank holds N = 12 · 7,087,872 + 40,171,776 =
125,226,240 parameters (the blocks; the tied embedding and position table, the final norm). Under torch DDP's default
autocast the gradients and ``.grad`` are fp32: each micro-batch's backward adds 3 · 4 · N = 1,502,714,880 B, at
2039 GB/s × 0.79 = 1.61081e12 B/s 0.93289 ms. Megatron-LM unfused with fp16 accumulation (Megatron-LM 2021 --fp16):
(2·2 + 2) · N = 751,357,440 B; with fp32 main_grad (bf16 models): (2·4 + 2) · N = 1,252,262,400 B."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.compile import grad_adds
from simulator.compile.grad_adds import grad_add
from simulator.errors import SpecError
from simulator.strategy import Framework, Strategy, ZeroStage, build_layout
from simulator.strategy.kinds import GradReduceDtype, MixedPrecision
from simulator.workload import get_preset
from simulator.workload.grad_accum import GradAdd, grad_add_kernel

CLUSTER = load_preset("dgx-a100", 1)
MODEL = get_preset("gpt3-125m")
DDP = Strategy(global_batch=64, dp=8, micro_batch=2)
HBM_BPS = 2039e9 * 0.79
N = 12 * 7_087_872 + 40_171_776


def _bwd(strategy: Strategy, monkeypatch=None, without: bool = False) -> tuple[float, float]:
    if without:
        monkeypatch.setattr(grad_adds, "grad_add", lambda dtype, layout: None)
        import simulator.compile.step as step
        monkeypatch.setattr(step, "grad_add", lambda dtype, layout: None)
    chunk = compile_step(CLUSTER, MODEL, strategy, memory=False).stages[0].chunks[0]
    return chunk.fwd_s, chunk.bwd_s


def test_the_formats_by_framework():
    assert MODEL.params == N
    layout = build_layout(DDP, CLUSTER, MODEL)
    assert grad_add(MODEL.dtype, layout) == GradAdd(accumulator_bytes=4, gradient_bytes=4)  # autocast: fp32 .grad
    param_dtype = replace(DDP, mixed_precision=MixedPrecision.PARAM_DTYPE)
    assert grad_add(MODEL.dtype, build_layout(param_dtype, CLUSTER, MODEL)) == GradAdd(accumulator_bytes=2,
                                                                                       gradient_bytes=2)
    megatron = replace(DDP, framework=Framework.MEGATRON, unfused_grad_accumulation=True)
    assert grad_add(MODEL.dtype, build_layout(megatron, CLUSTER, MODEL)) == GradAdd(accumulator_bytes=4,
                                                                                    gradient_bytes=2)
    fp16_acc = replace(megatron, grad_reduce_dtype=GradReduceDtype.PARAM_DTYPE)
    assert grad_add(MODEL.dtype, build_layout(fp16_acc, CLUSTER, MODEL)).bytes_per_param * N == 751_357_440
    assert grad_add(MODEL.dtype, build_layout(megatron, CLUSTER, MODEL)).bytes_per_param * N == 1_252_262_400
    for fused in (replace(DDP, framework=Framework.MEGATRON),  # gradient_accumulation_fusion: in the wgrad GEMM
                  replace(DDP, framework=Framework.FSDP2, zero=ZeroStage.ZERO3)):  # on the reduce stream
        assert grad_add(MODEL.dtype, build_layout(fused, CLUSTER, MODEL)) is None


def test_hand_worked_backward_time(monkeypatch):
    """The compiled chunk's backward carries the add, 0.93289 ms per micro-batch; the forward does not; removing
    the term removes exactly that."""
    assert grad_add_kernel(GradAdd(4, 4), N).bytes == 1_502_714_880
    fwd, bwd = _bwd(DDP)
    fwd0, bwd0 = _bwd(DDP, monkeypatch, without=True)
    assert bwd - bwd0 == pytest.approx(1_502_714_880 / HBM_BPS, rel=1e-9)
    assert bwd - bwd0 == pytest.approx(0.93289e-3, rel=1e-4)
    assert fwd == fwd0


def test_per_micro_batch_whatever_the_batch():
    """One compiled micro-batch serves every global batch (the planner's shared compilation)."""
    assert _bwd(DDP) == _bwd(replace(DDP, global_batch=16))


def test_megatron_unfused_adds_into_main_grad():
    fused = replace(DDP, framework=Framework.MEGATRON, grad_reduce_dtype=GradReduceDtype.PARAM_DTYPE,
                    mixed_precision=MixedPrecision.PARAM_DTYPE)
    _, bwd0 = _bwd(fused)
    _, bwd = _bwd(replace(fused, unfused_grad_accumulation=True))
    assert bwd - bwd0 == pytest.approx(751_357_440 / HBM_BPS, rel=1e-9)


def test_a_split_model_adds_per_stage(monkeypatch):
    """Two pipeline stages: the first holds the embedding, the position table and its 6 blocks, the last its 6
    blocks, the final norm and Megatron-style copy of the tied output matrix (V·h = 38,597,376): each stage's
    backward adds over what it holds, 3 · 2 B each (param-dtype mixed precision)."""
    s = replace(DDP, dp=4, pp=2, mixed_precision=MixedPrecision.PARAM_DTYPE)
    with_adds = [st.chunks[0].bwd_s for st in compile_step(CLUSTER, MODEL, s, memory=False).stages]
    monkeypatch.setattr(grad_adds, "grad_add", lambda dtype, layout: None)
    import simulator.compile.step as step
    monkeypatch.setattr(step, "grad_add", lambda dtype, layout: None)
    without = [st.chunks[0].bwd_s for st in compile_step(CLUSTER, MODEL, s, memory=False).stages]
    first = 6 * 7_087_872 + 38_597_376 + 2048 * 768
    last = 6 * 7_087_872 + 1536 + 38_597_376
    assert first + last == N + 38_597_376
    for a, b, held in zip(with_adds, without, (first, last)):
        assert a - b == pytest.approx(6 * held / HBM_BPS, rel=1e-9)


def test_the_field_is_megatron_only():
    with pytest.raises(SpecError, match="^unfused_grad_accumulation: is Megatron-LM's"):
        Strategy(global_batch=16, dp=8, unfused_grad_accumulation=True)


def test_bad_formats_are_refused():
    with pytest.raises(SpecError, match="^grad_add.accumulator_bytes"):
        GradAdd(accumulator_bytes=0, gradient_bytes=2)



@pytest.mark.parametrize("split, credited", [(dict(tp=2, dp=4), True), (dict(pp=2, dp=4), True), ({}, False)])
def test_the_first_micro_batch_assigns_under_the_tensor_pipeline_family(split, credited, monkeypatch):
    """torch DDP with tp > 1 or pp > 1 runs in the executor's tensor/pipeline family, which zeroes with
    ``zero_grad(set_to_none=True)``: the step's first backward hands its gradient over, so the optimizer phase is
    credited exactly one micro-batch's adds (param-dtype: 3 · 2 B per held parameter), per stage. The data-parallel
    family keeps ``.grad`` (``set_to_none=False``): no credit."""
    import simulator.compile.grad_sync as grad_sync
    import simulator.compile.step as step
    s = replace(DDP, mixed_precision=MixedPrecision.PARAM_DTYPE, **split)
    assert grad_adds.first_add_bytes_per_param(MODEL.dtype, build_layout(s, CLUSTER, MODEL)) == (6 if credited else 0)
    stages = compile_step(CLUSTER, MODEL, s, memory=False).stages
    monkeypatch.setattr(grad_sync, "first_add_bytes_per_param", lambda dtype, layout: 0)
    uncredited = compile_step(CLUSTER, MODEL, s, memory=False).stages
    monkeypatch.setattr(step, "grad_add", lambda dtype, layout: None)
    without_adds = compile_step(CLUSTER, MODEL, s, memory=False).stages
    for st, un, bare in zip(stages, uncredited, without_adds):
        one_add = st.chunks[0].bwd_s - bare.chunks[0].bwd_s
        assert one_add > 0 and st.chunks[0].bwd_s == un.chunks[0].bwd_s  # the per-micro-batch adds stay
        assert un.optimizer_s - st.optimizer_s == pytest.approx(one_add if credited else 0.0, rel=1e-9, abs=1e-15)
