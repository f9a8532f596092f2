"""The gradient-reduction format (strategy field ``grad_reduce_dtype``, :mod:`simulator.strategy.formats`):
framework defaults from their sources, and the one rule every consumer follows — the compiled data-parallel
calls, the layout's element buckets, Megatron's ``main_grad`` bytes and FSDP2's reduce-scatter input."""

from __future__ import annotations

from dataclasses import fields

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.memory import memory_report
from simulator.memory.buffers import buffer_bytes
from simulator.memory.states import model_state_bytes
from simulator.strategy import AllReduceSync, Strategy, ZeroStage, build_layout
from simulator.strategy.formats import grad_reduce_dtype
from simulator.strategy.framework import Framework
from simulator.strategy.kinds import GradReduceDtype, MixedPrecision
from simulator.collectives.base import Op
from simulator.work import CommCall, CommKind
from simulator.workload import DtypePolicy, get_preset

FP32, PARAM = GradReduceDtype.FP32, GradReduceDtype.PARAM_DTYPE
BF16, FP16 = DtypePolicy.BF16_MIXED, DtypePolicy.FP16_MIXED


@pytest.mark.parametrize("framework, dtype, expected", [
    (Framework.MEGATRON, BF16, FP32),    # arguments.py forces fp32 accumulate/all-reduce for bf16
    (Framework.MEGATRON, FP16, PARAM),   # ... and not for fp16
    (Framework.FSDP2, BF16, FP32),       # torchtitan mixed_precision_reduce = "float32"
    (Framework.DEEPSPEED, BF16, PARAM),  # communication_data_type defaults to the model's
    (Framework.TORCH_DDP, BF16, PARAM),  # DDP reduces the gradients as they are
])
def test_framework_defaults(framework, dtype, expected):
    assert framework.grad_reduce_dtype(dtype) is expected
    s = Strategy(global_batch=8, framework=framework, zero=ZeroStage(framework.zero_stages[0]))
    assert s.resolved_grad_reduce_dtype(dtype) is expected
    assert Strategy(global_batch=8, framework=framework, zero=ZeroStage(framework.zero_stages[0]),
                    grad_reduce_dtype=PARAM if expected is FP32 else FP32).resolved_grad_reduce_dtype(dtype) \
        is not expected


def test_format_on_the_wire():
    """fp32 where asked, the states' format otherwise: fp32 under autocast whatever is asked, and an fp32 model
    stays fp32."""
    megatron = Strategy(global_batch=8, framework=Framework.MEGATRON, zero=ZeroStage.ZERO1)
    assert grad_reduce_dtype(BF16, megatron) is DtypePolicy.FP32
    assert grad_reduce_dtype(BF16, Strategy(global_batch=8, framework=Framework.MEGATRON, zero=ZeroStage.ZERO1,
                                            grad_reduce_dtype=PARAM)) is BF16
    assert grad_reduce_dtype(FP16, megatron) is FP16
    assert grad_reduce_dtype(DtypePolicy.FP32, megatron) is DtypePolicy.FP32
    autocast = Strategy(global_batch=8, mixed_precision=MixedPrecision.AUTOCAST, grad_reduce_dtype=PARAM)
    assert grad_reduce_dtype(BF16, autocast) is DtypePolicy.FP32


def _calls(step, kind: CommKind) -> list[CommCall]:
    """Every call of ``kind`` on stage 0's representative: its per-chunk tuples and its gradient sync."""
    st = step.stages[0]
    out = [c for c in st.grad_sync if c.kind is kind]
    for chunk in st.chunks:
        for f in fields(chunk):
            v = getattr(chunk, f.name)
            if isinstance(v, tuple):
                out += [c for c in v if isinstance(c, CommCall) and c.kind is kind]
    return out


def _step(**kw):
    cluster, model = load_preset("dgx-a100"), get_preset("gpt3-1.3b").with_seq(1024)
    return compile_step(cluster, model, Strategy(global_batch=16, dp=8, **kw), memory=False), model


@pytest.mark.parametrize("reduce, bytes_per_param", [(None, 4), (FP32, 4), (PARAM, 2)])
def test_megatron_all_reduce_moves_the_reduction_format(reduce, bytes_per_param):
    """One rank's DP all-reduce buckets add up to its parameters × the format's bytes (Megatron ZeRO-0, one
    stage: every parameter is in the buckets), and the element buckets hold the same number of gradients
    either way (40M elements: Megatron's ``bucket_size``, fp32 or bf16)."""
    sync = AllReduceSync(bucket_bytes=None, bucket_params=40_000_000)
    step, model = _step(framework=Framework.MEGATRON, zero=ZeroStage.ZERO0, grad_reduce_dtype=reduce, dp_sync=sync)
    calls = _calls(step, CommKind.DP)
    assert sum(c.nbytes for c in calls) == pytest.approx(model.params * bytes_per_param, rel=1e-9)
    assert step.layout.bucket_bytes == step.strategy.dp_sync.bucket_params * bytes_per_param


def test_fsdp2_reduce_scatters_twice_the_bytes_in_fp32():
    fp32, _ = _step(framework=Framework.FSDP2, zero=ZeroStage.ZERO3)
    bf16, _ = _step(framework=Framework.FSDP2, zero=ZeroStage.ZERO3, grad_reduce_dtype=PARAM)
    rs32 = [c for c in _calls(fp32, CommKind.ZERO) if c.op is Op.REDUCE_SCATTER]
    rs16 = [c for c in _calls(bf16, CommKind.ZERO) if c.op is Op.REDUCE_SCATTER]
    assert rs16 and [c.nbytes for c in rs32] == [2 * c.nbytes for c in rs16]
    gathers = lambda step: [c.nbytes for c in _calls(step, CommKind.ZERO) if c.op is Op.ALL_GATHER]  # noqa: E731
    assert gathers(fp32) == gathers(bf16)  # parameters are gathered in bf16 either way


@pytest.mark.parametrize("reduce, zero0, zero1_d4", [
    (FP32, 18, 6 + 12 / 4),    # "bf16 param, fp32 grads" [src: megatron-distopt]
    (PARAM, 20, 4 + 16 / 4),   # 16-bit main_grad + the optimizer's fp32 copy, as the table's "fp16 param, fp16 grads"
])
def test_megatron_main_grad_follows_the_reduction(reduce, zero0, zero1_d4):
    shapes = [("w", (1000,))]
    z0 = model_state_bytes(shapes, dp=4, zero=ZeroStage.ZERO0, dtype=BF16, framework=Framework.MEGATRON,
                           grad_reduce_dtype=reduce)
    z1 = model_state_bytes(shapes, dp=4, zero=ZeroStage.ZERO1, dtype=BF16, framework=Framework.MEGATRON,
                           grad_reduce_dtype=reduce)
    assert (z0.total_bytes, z1.total_bytes) == (zero0 * 1000, zero1_d4 * 1000)


def test_fsdp2_reduce_scatter_input_is_allocated_in_the_reduction_format():
    """ZeRO-3 under FSDP2: two gathered bf16 blocks, the block's bf16 gradients and the reduce-scatter input
    in ``reduce_dtype`` (``foreach_reduce``) [src: torch-fsdp2]; 1000-element block, exact."""
    common = dict(local_params=10_000, largest_block=1000, zero=ZeroStage.ZERO3, dtype=BF16,
                  framework=Framework.FSDP2)
    assert buffer_bytes(**common).gathered_params_bytes == 1000 * (2 * 2 + 2 + 2)
    assert buffer_bytes(**common, reduce_bytes=4).gathered_params_bytes == 1000 * (2 * 2 + 2 + 4)


def test_memory_cache_keeps_strategies_apart():
    """A search shares one memory cache: two strategies differing only in the reduction format (or in the
    mixed precision, or the optimizer) must not share their states."""
    cluster, model = load_preset("dgx-a100"), get_preset("gpt3-1.3b").with_seq(1024)
    cache: dict = {}
    def grads(**kw):
        s = Strategy(global_batch=16, dp=8, framework=Framework.MEGATRON, zero=ZeroStage.ZERO1, **kw)
        return memory_report(model, cluster, build_layout(s, cluster, model), cache=cache).worst.grads_bytes
    assert grads() == 2 * grads(grad_reduce_dtype=PARAM)


def test_torch_ddp_refuses_fp32_reduction_of_bf16_parameters():
    """torch DDP all-reduces each gradient in its own dtype [src: torch-ddp]: under param-dtype mixed precision
    the gradients are bf16, so fp32 is refused, naming the field and the fix; under autocast they are fp32 already."""
    with pytest.raises(ValueError, match="^grad_reduce_dtype: fp32 cannot be run by torch DDP .*drop grad_reduce_dtype"):
        Strategy(global_batch=8, framework=Framework.TORCH_DDP, mixed_precision=MixedPrecision.PARAM_DTYPE,
                 grad_reduce_dtype=FP32)
    Strategy(global_batch=8, framework=Framework.TORCH_DDP, grad_reduce_dtype=FP32)  # autocast: accepted
    Strategy(global_batch=8, framework=Framework.MEGATRON, mixed_precision=MixedPrecision.PARAM_DTYPE,
             grad_reduce_dtype=FP32)


def test_cli_refuses_it_in_one_line_with_exit_2(capsys):
    from trainplan.__main__ import main
    code = main(["simulate", "--model", "gpt3-125m", "--cluster", "dgx-a100", "--gpus", "8", "--gbs", "16",
                 "--framework", "torch", "--mixed-precision", "param-dtype", "--grad-reduce-dtype", "fp32"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "grad-reduce-dtype: fp32 cannot be run by torch DDP" in err
