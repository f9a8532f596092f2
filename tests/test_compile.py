"""compile_step: the calls and times a step is made of (Megatron-LM, DDP, ZeRO, ZeRO-Offload/Infinity)."""

import math
from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.strategy.kinds import MixedPrecision
from simulator.compile import CostCache, ParamFetch, adam_bytes_per_param, compile_step
from simulator.errors import SpecError
from simulator.strategy import AllReduceSync, Framework, Offload, Recompute, Strategy, ZeroStage
from simulator.units import MiB
from simulator.work import CommKind
from simulator.workload import DtypePolicy, ParamCountModel, get_preset, model_flops_per_token



CPU_ADAM_PARAMS_PER_S = 2e9
"""A test figure for the node's CPU Adam rate (the preset has none); not a measurement."""


@pytest.fixture(scope="module")
def cluster():
    base = load_preset("dgx-a100", 2)
    host = replace(base.node.host, cpu_adam_params_per_s=CPU_ADAM_PARAMS_PER_S)
    return replace(base, node=replace(base.node, host=host))


@pytest.fixture(scope="module")
def model():
    return get_preset("megatron-1.7b")  # 24 layers, h 2304, 24 heads, s 2048


@pytest.fixture(scope="module")
def cache(cluster):
    return CostCache(cluster)


def test_megatron_tp_calls_per_layer(cluster, model, cache):
    """Megatron (Shoeybi et al. 2019 §3): 2 all-reduces forward and 2 backward per block of b·s·h elements;
    the embedding adds one forward all-reduce on the first chunk, the logits one backward on the last."""
    work = compile_step(cluster, model, Strategy(global_batch=8, tp=4, pp=2, framework=Framework.MEGATRON), cache=cache,
                        memory=False)  # torch's DTensor list: tests/test_torch_tp_calls.py
    first, last = work.stages[0].chunks[0], work.stages[1].chunks[0]
    assert first.layers == last.layers == 12
    assert len(first.tp_fwd) == 2 * 12 + 1 and len(first.tp_bwd) == 2 * 12
    assert len(last.tp_fwd) == 2 * 12 and len(last.tp_bwd) == 2 * 12 + 1
    assert all(c.op is Op.ALL_REDUCE and c.nbytes == 1 * 2048 * 2304 * 2 for c in first.tp_fwd)
    assert first.tp_fwd[0].concurrent_groups == work.layout.dp == 2


def test_sequence_parallel_swaps_all_reduce_for_rs_ag(cluster, model, cache):
    """Korthikanti et al. 2022 §4.2.2: with SP each all-reduce becomes a reduce-scatter + all-gather and the
    pipeline p2p carries 1/t of the activations; full recompute repeats the forward calls in backward. Megatron
    holds the bf16 stream (param-dtype); under torch's autocast the stream a stage sends is fp32: twice."""
    s = Strategy(global_batch=8, tp=4, pp=2, sequence_parallel=True, recompute=Recompute.FULL,
                 mixed_precision=MixedPrecision.PARAM_DTYPE, framework=Framework.MEGATRON)
    ch = compile_step(cluster, model, s, cache=cache, memory=False).stages[0].chunks[0]
    ops = [c.op for c in ch.tp_fwd[1:]]
    assert ops.count(Op.ALL_GATHER) == ops.count(Op.REDUCE_SCATTER) == 24
    assert len(ch.tp_bwd) == 2 * len(ch.tp_fwd[1:])
    assert ch.p2p_fwd.nbytes == 2048 * 2304 * 2 // 4 and ch.p2p_bwd is None
    amp = compile_step(cluster, model, replace(s, mixed_precision=MixedPrecision.AUTOCAST, framework=Framework.TORCH_DDP),
                       cache=cache, memory=False).stages[0].chunks[0]
    assert amp.p2p_fwd.nbytes == 2 * ch.p2p_fwd.nbytes
    assert {c.nbytes for c in amp.tp_fwd} == {c.nbytes for c in ch.tp_fwd}  # tp collectives stay 16-bit


def test_dp_buckets_and_ready_fractions(cluster, model, cache):
    """DDP (Li et al. VLDB 2020): ⌈G / bucket⌉ buckets, ready at their cumulative byte fraction; off: all at 1."""
    s = Strategy(global_batch=16, dp_sync=AllReduceSync(bucket_bytes=25 * MiB))
    st = compile_step(cluster, model, s, cache=cache, memory=False).stages[0]
    grad_bytes = model.params * 4  # fp32 gradients of the whole model (tp = pp = 1): torch DDP under autocast
    assert len(st.grad_sync) == math.ceil(grad_bytes / (25 * MiB))
    assert st.grad_ready_fraction[-1] == pytest.approx(1.0)
    assert st.grad_ready_fraction[0] == pytest.approx(25 * MiB / grad_bytes, rel=1e-6)
    off = Strategy(global_batch=16, dp_sync=AllReduceSync(overlap_grad_reduce=False))
    assert set(compile_step(cluster, model, off, cache=cache, memory=False).stages[0].grad_ready_fraction) == {1.0}


def test_zero_stages_change_the_calls(cluster, model, cache):
    """ZeRO (Rajbhandari et al. SC'20): stage 2 reduce-scatters gradients and all-gathers parameters after the
    step; stage 3 gathers every block forward and backward instead. The reduce-scatters run in every
    micro-batch's backward (DeepSpeed's backward hooks; FSDP2 per fully_shard unit), so they are in the
    chunk's ``zero_bwd`` and not in the once-per-step ``grad_sync``: DeepSpeed one per reduce bucket,
    FSDP2 one per block."""
    z2 = compile_step(cluster, model, Strategy(global_batch=16, zero=ZeroStage.ZERO2), cache=cache, memory=False)
    st = z2.stages[0]
    assert st.grad_sync == ()
    ch = st.chunks[0]
    grad_bytes = model.params * 2
    assert {c.op for c in ch.zero_bwd} == {Op.REDUCE_SCATTER} and ch.zero_fwd == ()
    assert len(ch.zero_bwd) == math.ceil(grad_bytes / z2.layout.bucket_bytes)
    assert sum(c.nbytes for c in ch.zero_bwd) == pytest.approx(grad_bytes, rel=1e-6)
    assert {c.kind for c in st.after_step} == {CommKind.ZERO} and st.after_step[0].op is Op.ALL_GATHER
    z3 = compile_step(cluster, model, Strategy(global_batch=16, zero=ZeroStage.ZERO3, framework=Framework.FSDP2),
                      cache=cache, memory=False)
    ch = z3.stages[0].chunks[0]
    assert len(ch.zero_fwd) == 24 + 1 and z3.stages[0].after_step == ()  # the root module's gather, then 24 blocks'
    # re-gathered for the backward, each block's reduce-scatter after the next gather on FSDP's one stream (fsdp_order)
    ag, rs = Op.ALL_GATHER, Op.REDUCE_SCATTER
    assert [c.op for c in ch.zero_bwd] == [ag, ag] + [ag, rs] * 23 + [rs, rs]
    assert ch.zero_fwd[0].nbytes != ch.zero_fwd[1].nbytes == ch.zero_fwd[2].nbytes  # the embedding gathered apart
    # DeepSpeed (the default framework at ZeRO-3) gathers per tensor instead (tests/test_ds_zero3.py):
    # token and position embeddings, then Q/K/V, output, fc1, fc2 of each of the 24 blocks
    ds = compile_step(cluster, model, Strategy(global_batch=16, zero=ZeroStage.ZERO3), cache=cache, memory=False)
    ch = ds.stages[0].chunks[0]
    assert len(ch.zero_fwd) == 2 + 4 * 24 and ds.stages[0].after_step == ()
    # backward re-gathers in reverse, except what DeepSpeed keeps under stage3_max_reuse_distance = 1e9 elements
    # (z3big23): a tensor of block i waits for 2 · (the blocks after it + the tied 51200 · 2304 head) elements,
    # about 2 · (k · 63.7M + 118M), under 1e9 for k <= 5, so blocks 18-23 (24 tensors) stay gathered
    assert [c for c in ch.zero_bwd if c.op is Op.ALL_GATHER] == list(ch.zero_fwd[::-1])[24:]


def test_fsdp2_issues_per_block_calls_and_gathers_zero2_in_forward(cluster, model, cache):
    """FSDP2 (fully_shard per block, then the root): ZeRO-3 reduce-scatters each block's gradients (24 blocks),
    then the root's edge gradients apart, besides re-gathering them; ZeRO-2 (reshard_after_forward=False) gathers
    each module in every forward, keeps it for the backward, and has no all-gather after the step."""
    z3 = compile_step(cluster, model, Strategy(global_batch=16, zero=ZeroStage.ZERO3, framework=Framework.FSDP2),
                      cache=cache, memory=False)
    ch = z3.stages[0].chunks[0]
    rs = [c for c in ch.zero_bwd if c.op is Op.REDUCE_SCATTER]
    assert len(rs) == 24 + 1 and rs[0].nbytes == rs[23].nbytes != rs[24].nbytes
    z2 = compile_step(cluster, model, Strategy(global_batch=16, zero=ZeroStage.ZERO2, framework=Framework.FSDP2),
                      cache=cache, memory=False)
    st = z2.stages[0]
    assert [c.op for c in st.chunks[0].zero_fwd] == [Op.ALL_GATHER] * 25
    assert [c.op for c in st.chunks[0].zero_bwd] == [Op.REDUCE_SCATTER] * 25
    assert st.after_step == () and st.grad_sync == ()


def test_gradient_accumulation_reduce_scatters_every_micro_batch(cluster, model, cache):
    """Under accumulation ZeRO-2 reduce-scatters its gradients once per micro-batch (m times a step), DDP
    all-reduces once (no_sync): 4 micro-batches move 4× the gradient bytes under ZeRO-2, 1× under DDP. ZeRO-2
    (DeepSpeed, bf16 parameters) reduces bf16 gradients; DDP (torch, autocast over fp32 parameters) fp32 ones."""
    grad_bytes = model.params * 2
    for gbs, m in ((16, 1), (64, 4)):
        z2 = compile_step(cluster, model, Strategy(global_batch=gbs, zero=ZeroStage.ZERO2), cache=cache, memory=False)
        assert z2.micro_batches == m
        per_micro_batch = sum(c.nbytes for c in z2.stages[0].chunks[0].zero_bwd)
        assert per_micro_batch * z2.micro_batches == pytest.approx(m * grad_bytes, rel=1e-6)
        ddp = compile_step(cluster, model, Strategy(global_batch=gbs), cache=cache, memory=False)
        assert sum(c.nbytes for c in ddp.stages[0].grad_sync) == pytest.approx(2 * grad_bytes, rel=1e-6)
        assert ddp.stages[0].chunks[0].zero_bwd == ()


def test_gpu_optimizer_is_one_pass_over_states(cluster, model, cache):
    """Adam reads K + grad and writes K + weights: 28 bytes per parameter in bf16 mixed precision."""
    assert adam_bytes_per_param(DtypePolicy.BF16_MIXED) == 28
    assert adam_bytes_per_param(DtypePolicy.FP32) == 28
    st = compile_step(cluster, model, Strategy(global_batch=16, zero=ZeroStage.ZERO1), cache=cache,
                      memory=False).stages[0]
    hbm = cluster.device.hbm_bw_GBps * 1e9
    partition = math.ceil(model.params / 16)
    assert st.optimizer_s >= partition * 28 / hbm  # at most the full HBM bandwidth
    assert st.optimizer_s < 2 * partition * 28 / hbm


def test_optimizer_offload_runs_adam_on_the_cpu(cluster, model, cache):
    """ZeRO-Offload (Ren et al. ATC'21): gradient partition to host, CPU Adam at the node's rate shared by its
    GPUs, parameters back over PCIe."""
    host = cluster.node.host
    st = compile_step(cluster, model, Strategy(global_batch=16, zero=ZeroStage.ZERO2, offload=Offload.OPTIMIZER),
                      cache=cache, memory=False).stages[0]
    partition = math.ceil(model.params / 16)
    assert st.optimizer_s == pytest.approx(partition * 8 / host.cpu_adam_params_per_s)
    assert st.grad_sync[-1].kind is CommKind.OFFLOAD
    assert st.grad_sync[-1].time_s == pytest.approx(host.h2d_latency_us * 1e-6 + partition * 2 / (host.h2d_bw_GBps * 1e9))


def test_infinity_fetch_beats_owner_broadcast(cluster, model, cache):
    """ZeRO-Infinity §6.1: each rank copies 1/dp of a block over its own PCIe link, so the fetch uses dp links
    at once; the owner's broadcast pushes the whole block through one link."""
    s = Strategy(global_batch=16, zero=ZeroStage.ZERO3, offload=Offload.PARAMS)
    inf = compile_step(cluster, model, s, cache=cache, memory=False).stages[0].chunks[0].zero_fwd[1]
    own = compile_step(cluster, model, s, fetch=ParamFetch.OWNER_BROADCAST, cache=cache,
                       memory=False).stages[0].chunks[0].zero_fwd[1]
    block = model.layer_params * 2
    pcie = cluster.node.host.h2d_bw_GBps * 1e9
    assert own.time_s > block / pcie and inf.time_s < own.time_s
    assert inf.kind is own.kind is CommKind.OFFLOAD


def test_flops_tokens_memory(cluster, model, cache):
    work = compile_step(cluster, model, Strategy(global_batch=16, recompute=Recompute.FULL), cache=cache)
    assert work.tokens_per_step == 16 * 2048
    assert work.model_flops_per_step == pytest.approx(model_flops_per_token(model) * 16 * 2048)
    assert work.hardware_flops_per_step > work.model_flops_per_step
    assert work.memory is not None and work.peak_flops_per_gpu == 312e12


def test_offload_without_cpu_adam_rate_is_an_error(model):
    base = load_preset("dgx-a100", 2)
    cluster = replace(base, node=replace(base.node, host=replace(base.node.host, cpu_adam_params_per_s=0.0)))
    with pytest.raises(SpecError, match="cpu_adam_params_per_s"):
        compile_step(cluster, model, Strategy(global_batch=16, zero=ZeroStage.ZERO1, offload=Offload.OPTIMIZER))


def test_bad_inputs(cluster, model):
    with pytest.raises(SpecError, match="parameter count"):
        compile_step(cluster, ParamCountModel(params=10**9), Strategy(global_batch=16))
    with pytest.raises(SpecError, match="dp"):
        compile_step(cluster, model, Strategy(global_batch=16, dp=3))
    with pytest.raises(SpecError, match="fetch"):
        compile_step(cluster, model, Strategy(global_batch=16), fetch="infinity")


def test_calls_say_how_their_bytes_move():
    # The engines match on CommCall.transport, never on a string: TP/DP/ZeRO calls are registry
    # collectives (auto resolved to an algorithm), pipeline sends are P2P, optimizer-offload copies HOST.
    from simulator.work import CollectiveAlgorithm, Transport

    cluster = load_preset("dgx-a100", 2)
    work = compile_step(cluster, get_preset("gpt3-1.3b"), Strategy(global_batch=16, tp=2, pp=2))
    chunk = work.stages[0].chunks[0]
    assert {c.transport for c in chunk.tp_fwd} == {Transport.COLLECTIVE}
    assert all(isinstance(c.algorithm, CollectiveAlgorithm) for c in chunk.tp_fwd + work.stages[0].grad_sync)
    assert chunk.p2p_fwd.transport is Transport.P2P and chunk.p2p_fwd.algorithm is None
    with pytest.raises(SpecError, match="algorithm"):
        replace(chunk.p2p_fwd, transport=Transport.COLLECTIVE)
