"""The planner's memory verdict (:func:`simulator.memory.verdict.memory_verdict`, the stages as arrays) is the
memory report's most loaded rank and reasons: the same total bytes bit for bit (``repr``), the same stage
and the same reason strings, on generated layouts (dense, MoE, partly dense MoE; ZeRO 0-3, offload of the
optimizer, parameters and NVMe, activation offload, autocast, FP8, parameter servers, bucket sizes, every
schedule and recomputation), with its state arrays shared across layouts as a search shares them, and the
same one-line error where the report refuses a layout."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.memory import memory_report
from simulator.memory.verdict import memory_verdict
from simulator.schedules import ScheduleKind
from simulator.strategy import (AllReduceSync, AttentionKind, Framework, Offload, ParamServerSync, Strategy,
                                ZeroStage, build_layout)
from simulator.strategy.kinds import MixedPrecision, OptimizerImpl
from simulator.workload.fp8 import MatmulPrecision
from simulator.workload import Recompute, get_preset
from simulator.workload.layers import ParamCountModel

H100 = load_cluster("dgx-h100", nodes=16)
A100 = load_cluster("dgx-a100", nodes=16)
MODELS = {name: get_preset(name) for name in ("gpt3-1.3b", "llama2-7b", "mixtral-8x7b", "deepseek-v2-lite")}
GB = 2**30


@st.composite
def cases(draw):
    spec = MODELS[draw(st.sampled_from(sorted(MODELS)))].with_seq(draw(st.sampled_from([512, 4096])))
    cluster = draw(st.sampled_from([H100, A100]))
    tp, pp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 3, 4, 8, 16]))
    ep = draw(st.sampled_from([1, 2, 4])) if spec.moe is not None else 1
    dp = draw(st.sampled_from([1, 2, 4])) * ep
    mbs, m = draw(st.integers(1, 4)), draw(st.integers(1, 3 * pp))
    recompute = draw(st.sampled_from([Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL]))
    zero = draw(st.sampled_from(list(ZeroStage)))
    offload = draw(st.sampled_from([Offload.NONE, Offload.NONE, Offload.OPTIMIZER, Offload.PARAMS, Offload.NVME]))
    schedule = draw(st.sampled_from(list(ScheduleKind))) if pp > 1 else ScheduleKind.ONE_F_ONE_B
    sync = draw(st.sampled_from(["default", "bucket", "ps"]))
    fields = dict(global_batch=dp * mbs * m, dp=dp, tp=tp, pp=pp, ep=ep, micro_batch=mbs, recompute=recompute,
                  zero=zero, offload=offload, schedule=schedule,
                  attention=draw(st.sampled_from(list(AttentionKind))),
                  sequence_parallel=tp > 1 and draw(st.booleans()),
                  framework=draw(st.sampled_from([None, Framework.MEGATRON, Framework.FSDP2, Framework.DEEPSPEED,
                                                  Framework.TORCH_DDP])),
                  mixed_precision=draw(st.sampled_from([None, MixedPrecision.AUTOCAST])),
                  offload_activations=recompute is Recompute.FULL and draw(st.booleans()))
    if cluster is H100 and draw(st.booleans()):
        fields["precision"] = MatmulPrecision.FP8
    if sync == "bucket":
        fields["dp_sync"] = AllReduceSync(bucket_bytes=draw(st.sampled_from([5, 25, 100])) * 2**20)
    elif sync == "ps":
        fields["dp_sync"] = ParamServerSync()
    if schedule is ScheduleKind.INTERLEAVED:
        fields["virtual_stages"] = draw(st.sampled_from([1, 2]))
    gpus = dp * tp * pp  # on that many of the cluster's GPUs (drawing a layout for all 128 rejected 98 % of draws)
    assume(gpus <= cluster.world_size)
    try:
        layout = build_layout(Strategy(**fields), cluster, spec, gpus=gpus)
    except SpecError:
        assume(False)
    return spec, cluster, layout


def _same(verdict, report):
    assert repr(verdict.total_bytes) == repr(report.worst.total_bytes)
    assert verdict.stage == report.worst.stage
    assert verdict.reasons == report.reasons


SHARED: dict = {}
"""One cache over every example, as a search shares one over its candidates."""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(cases())
def test_the_verdict_is_the_reports_most_loaded_rank(case):
    spec, cluster, layout = case
    try:
        report = memory_report(spec, cluster, layout)
    except SpecError as err:
        with pytest.raises(SpecError) as got:
            memory_verdict(spec, cluster, layout)
        assert str(got.value) == str(err)
        return
    _same(memory_verdict(spec, cluster, layout), report)
    _same(memory_verdict(spec, cluster, layout, cache=SHARED), report)


def test_reasons_over_gpu_host_and_nvme():
    """Llama-2-7B on a node whose host memory and NVMe are too small for its offload, at a micro-batch whose
    eager-attention activations overflow the GPU: the three reasons, worded as the report words them, and a
    verdict that fits where the report fits."""
    spec = MODELS["llama2-7b"].with_seq(4096)
    host = replace(H100.node.host, cpu_memory_bytes=GB, nvme_bytes=GB)
    small = replace(H100, node=replace(H100.node, host=host))
    for offload, want in ((Offload.NVME, ("GPU", "host", "NVMe")), (Offload.OPTIMIZER, ("GPU", "host"))):
        s = Strategy(global_batch=64, zero=ZeroStage.ZERO3 if offload is Offload.NVME else ZeroStage.ZERO1,
                     offload=offload, framework=Framework.DEEPSPEED, micro_batch=8, recompute=Recompute.NONE,
                     attention=AttentionKind.EAGER)
        layout = build_layout(s, small, spec, gpus=8)
        report, verdict = memory_report(spec, small, layout), memory_verdict(spec, small, layout)
        _same(verdict, report)
        assert tuple(r.split(":")[0] for r in verdict.reasons) == want
    fits = build_layout(Strategy(global_batch=8, pp=4, zero=ZeroStage.ZERO1), H100, spec, gpus=32)
    assert memory_verdict(spec, H100, fits).reasons == () == memory_report(spec, H100, fits).reasons


def test_a_bare_parameter_count_goes_through_the_report():
    model = ParamCountModel(params=7_000_000_000)
    layout = build_layout(Strategy(global_batch=8, zero=ZeroStage.ZERO1), H100, model, gpus=8)
    _same(memory_verdict(model, H100, layout), memory_report(model, H100, layout))


def test_shared_states_are_keyed_by_mixed_precision_and_optimizer():
    """A search's shared model-state cache tells layouts apart by their mixed precision (autocast keeps fp32
    weights and gradients) and optimizer implementation (the step's temporaries), as it does by the rest of
    what a stage's states read: before the key held them, an autocast layout asked after one without got
    the other's states (Llama-2-7B on Megatron-LM: 150.6 GB instead of 151.7 GB)."""
    spec, shared = MODELS["llama2-7b"].with_seq(4096), {}
    for mixed in (None, MixedPrecision.AUTOCAST):
        for impl in (None, *OptimizerImpl):
            s = Strategy(global_batch=16, framework=Framework.MEGATRON, mixed_precision=mixed, optimizer_impl=impl)
            layout = build_layout(s, H100, spec, gpus=8)
            assert memory_report(spec, H100, layout, cache=shared) == memory_report(spec, H100, layout)
            _same(memory_verdict(spec, H100, layout, cache=shared), memory_report(spec, H100, layout))
