"""Context parallelism (issue 14 §2): the sequence split, its causal balance, the ring's exposed KV
traffic, Ulysses' all-to-alls, the dp-cp gradient group, memory ÷ cp, and the rules.

Hand-worked numbers use Llama 3 8B (h 4096, 32 heads of 128, 8 KV heads: q 4096, kv 1024)
[src: llama3-2024] with 2-byte activations."""

import numpy as np
from hypothesis import given, settings, strategies as st
import pytest

from simulator.analytical import estimate
from simulator.attention_efficiency import AttentionBackend
from simulator.analytical_vec import estimate_many
from simulator.cluster.io import load_cluster
from simulator.compile import CostCache, compile_step
from simulator.compile.cp_part import ring_exposed_s
from simulator.compute import Phase, layer_times
from simulator.engine.step import simulate
from simulator.errors import SpecError
from simulator.memory import memory_report
from simulator.memory.stage_acts import stage_activations
from simulator.strategy import build_layout
from simulator.strategy.flat import strategy_from_flat
from simulator.work import CommKind, Transport
from simulator.workload import load_model
from simulator.workload.context import ContextKind, ContextSplit
from simulator.workload.layers import LayerListWorkload, LayerSpec
from simulator.workload.ops import OpKind, layer_work

LLAMA = load_model("llama3-8b")


def _op(works, kind):
    return next(w for w in works if w.op is kind)


def test_causal_imbalance_of_an_unbalanced_ring_and_the_balanced_split():
    # Rank j of a contiguous causal ring does j + 1/2 block units, the mean is cp/2: the last is 2 − 1/cp × it.
    assert ContextSplit(4, ContextKind.RING, balanced=False).imbalance == pytest.approx(1.75)
    assert ContextSplit(2, ContextKind.RING, balanced=False).imbalance == pytest.approx(1.5)
    # Head-tail split (Megatron-Core, torch context_parallel): every rank 2cp small units, the mean.
    assert ContextSplit(4, ContextKind.RING, balanced=True).imbalance == 1.0
    assert ContextSplit(4, ContextKind.ALL_TO_ALL, balanced=False).imbalance == 1.0
    assert ContextSplit(4).chunks() == 8 and ContextSplit(4, balanced=False).chunks() == 4
    assert ContextSplit(4, ContextKind.ALL_TO_ALL).chunks() == 4 and ContextSplit().chunks() == 1


def test_ring_splits_every_token_wise_op_and_the_attention_core():
    s, b = 4096, 1
    full = layer_work(LLAMA, b, s)
    ring = layer_work(LLAMA, b, s, context=ContextSplit(2))
    # QKV GEMM on s/2 tokens: 2·(s/2)·h·(q + 2kv) = 2·2048·4096·6144 FLOPs.
    assert _op(ring, OpKind.QKV).fwd[0].flops == 2 * 2048 * 4096 * 6144
    for kind in (OpKind.QKV, OpKind.OUT_PROJ, OpKind.MLP):
        assert sum(k.flops for k in _op(ring, kind).fwd) == pytest.approx(sum(k.flops for k in _op(full, kind).fwd) / 2)
    for kind in (OpKind.NORM, OpKind.ELEMENTWISE):  # memory-bound: the local tokens' bytes (GEMMs also read weights)
        assert sum(k.bytes for k in _op(ring, kind).fwd) == pytest.approx(sum(k.bytes for k in _op(full, kind).fwd) / 2)
    core = [k for k in _op(ring, OpKind.ATTENTION).fwd if k.attention]  # the ring's step kernels (ring_steps)
    assert sum(k.flops for k in core) == pytest.approx(4 * 4096**2 * 4096 / 2)       # 4·b·s²·q ÷ cp
    # reads its s/cp queries (Q and O: 2q) and every K, V block once (2kv over s): 2·(2048·8192 + 4096·2048)
    assert sum(k.bytes for k in core) == 2 * (2048 * 2 * 4096 + 4096 * 2 * 1024)
    unbalanced = _op(layer_work(LLAMA, b, s, context=ContextSplit(2, balanced=False)), OpKind.ATTENTION).fwd
    assert sum(k.flops for k in unbalanced) == pytest.approx(sum(k.flops for k in core) * 1.5)


def test_all_to_all_runs_full_sequence_attention_on_heads_over_cp():
    a2a = _op(layer_work(LLAMA, 1, 4096, tp=2, context=ContextSplit(4, ContextKind.ALL_TO_ALL)), OpKind.ATTENTION)
    core = a2a.fwd[0]
    assert core.flops == pytest.approx(4 * 4096**2 * 4096 / 8)      # heads ÷ (tp·cp)
    # the whole sequence, q/(tp·cp) = 512 wide, 8 KV heads over 8 ranks: one head (128) each
    assert core.bytes == 2 * 4096 * (2 * 512 + 2 * 128)


def test_ring_exposed_time_per_step():
    # 4 ranks: 3 transfers, each against one block of attention (8 ms / 4 = 2 ms)
    assert ring_exposed_s(send_s=3e-3, attention_s=8e-3, cp=4) == pytest.approx(3 * 1e-3)
    assert ring_exposed_s(send_s=1e-3, attention_s=8e-3, cp=4) == 0.0
    assert ring_exposed_s(send_s=5e-3, attention_s=0.0, cp=2) == pytest.approx(5e-3)


def _chunk(cluster, workload, **keys):
    work = compile_step(cluster, workload, strategy_from_flat(keys), memory=False)
    return work, work.stages[0].chunks[0]


def test_ring_calls_on_the_real_placement():
    """Two DGX H100 nodes, tp 8, cp 2: the cp ring is ranks 0 and 8, one InfiniBand hop each way (Megatron-Core's
    ring: Transformer Engine's p2p, no torch merges; torch's ring: test_ring_steps.py)."""
    cluster = load_cluster("dgx-h100", nodes=2)
    w = LLAMA.with_seq(8192)
    work, ch = _chunk(cluster, w, global_batch=2, tp=8, cp=2, framework="megatron")
    assert work.layout.cp_group(0, 0, 0) == (0, 8) and work.world_size == 16
    cp = [c for c in ch.tp_fwd if c.kind is CommKind.CP]
    assert len(cp) == w.layers and all(c.transport is Transport.OVERLAPPED for c in cp)
    block = 2 * 1 * 4096 * (1024 // 8) * 2                          # K and V of 4096 tokens, kv/tp wide, bf16
    assert cp[0].nbytes == block
    cache = CostCache(cluster)
    send = max(cache.p2p(0, 8, block), cache.p2p(8, 0, block))
    rows = layer_times(w, cluster.device, 1, w.seq_len, 8, context=ContextSplit(2),
                       attention_backend=AttentionBackend.CUDNN)  # TE's attention on Hopper
    attn = sum(r.time_s for r in rows if r.op is OpKind.ATTENTION and r.phase is Phase.FWD)
    assert cp[0].time_s == pytest.approx(ring_exposed_s(send, attn, 2), abs=1e-12)
    back = [c for c in ch.tp_bwd if c.kind is CommKind.CP]
    assert back[0].nbytes == 2 * block                               # KV and dKV
    # a short sequence on a slow hop: the transfer outlasts the block of attention and shows
    short = LLAMA.with_seq(256)
    _, ch = _chunk(cluster, short, global_batch=2, tp=8, cp=2, framework="megatron")
    assert next(c for c in ch.tp_fwd if c.kind is CommKind.CP).time_s > 0


def test_ulysses_all_to_alls_and_their_sizes():
    cluster = load_cluster("dgx-h100", nodes=1)
    _, ch = _chunk(cluster, LLAMA.with_seq(8192), global_batch=2, tp=2, cp=4, cp_kind="all-to-all")
    a2a = [c for c in ch.tp_fwd if c.kind is CommKind.CP]
    assert len(a2a) == 2 * LLAMA.layers
    qkv, out = a2a[0], a2a[1]
    # 2048 local tokens × (q/tp + 2·kv/tp) = (2048 + 1024) wide, bf16; the output 2048 wide
    assert qkv.nbytes == 2048 * (2048 + 1024) * 2 and out.nbytes == 2048 * 2048 * 2
    assert qkv.group == (0, 2, 4, 6) and qkv.transport is Transport.COLLECTIVE


def test_gradients_and_zero_over_the_dp_cp_group():
    cluster = load_cluster("dgx-h100", nodes=1)
    w = LLAMA.with_seq(8192)
    work, _ = _chunk(cluster, w, global_batch=4, tp=2, cp=2, dp=2, zero=1)
    assert work.layout.dp_cp == 4
    assert len(work.stages[0].grad_sync[0].group) == 4
    # ZeRO-1 partitions the optimizer over dp·cp = 4 ranks: the same states as dp 4 without cp
    with_cp = memory_report(w, cluster, strategy_from_flat(dict(global_batch=4, tp=2, cp=2, dp=2, zero=1)))
    without = memory_report(w, cluster, strategy_from_flat(dict(global_batch=4, tp=2, dp=4, zero=1)))
    assert with_cp.worst.placed.gpu == without.worst.placed.gpu


def test_activations_are_those_of_the_local_tokens():
    cluster = load_cluster("dgx-h100", nodes=1)
    keys = dict(global_batch=4, tp=2, recompute="selective")
    cp = build_layout(strategy_from_flat(dict(keys, cp=4)), cluster, LLAMA.with_seq(32768))
    plain = build_layout(strategy_from_flat(dict(keys, dp=4)), cluster, LLAMA.with_seq(8192))
    a, b = stage_activations(LLAMA.with_seq(32768), cp, 0), stage_activations(LLAMA.with_seq(8192), plain, 0)
    assert a.blocks_bytes == b.blocks_bytes and a.head_bytes == b.head_bytes


def test_a_128k_llama_needs_cp_to_fit_without_recomputation():
    """Llama 3 8B at 131072 tokens on 4 DGX H100 nodes, tp 8, ZeRO-1: no recomputation fits only with cp 4."""
    cluster = load_cluster("dgx-h100", nodes=4)
    w = LLAMA.with_seq(131072)
    fits = {cp: memory_report(w, cluster, strategy_from_flat(dict(global_batch=4, tp=8, cp=cp, zero=1))).fits
            for cp in (1, 2, 4)}
    assert fits == {1: False, 2: False, 4: True}
    full = estimate(cluster, w, strategy_from_flat(dict(global_batch=4, tp=8, recompute="full", zero=1)))
    cp4 = estimate(cluster, w, strategy_from_flat(dict(global_batch=4, tp=8, cp=4, zero=1)))
    assert full.memory.fits and cp4.step_time_s < full.step_time_s


def test_estimate_many_agrees_with_estimate():
    cluster = load_cluster("dgx-h100", nodes=2)
    w = LLAMA.with_seq(16384)
    keys = [dict(global_batch=4, tp=8, cp=2), dict(global_batch=4, tp=4, cp=4, cp_kind="all-to-all"),
            dict(global_batch=4, tp=8, cp=2, cp_balanced=False), dict(global_batch=4, tp=8, dp=2)]
    strategies = [strategy_from_flat(k) for k in keys]
    many = estimate_many(cluster, w, strategies)
    one = [estimate(cluster, w, s).step_time_s for s in strategies]
    assert np.allclose(many.step_time_s.values, one, rtol=1e-12)
    assert one[2] > one[0]                                           # the unbalanced ring waits for its last rank


@pytest.mark.parametrize("seq, keys, match", [
    (8196, dict(cp=4), r"sequence of 8196 tokens does not split into 8 equal chunks \(2·cp"),
    (8194, dict(cp=4, cp_balanced=False), "does not split into 4 equal chunks"),
    (8196, dict(cp=4, cp_balanced=False), None),                  # 4 divides 8196: an unbalanced ring may
    (8192, dict(cp=2, cp_kind="all-to-all", tp=4), None),
    (8192, dict(cp=8, cp_kind="all-to-all", tp=8), "32 heads over tp·cp = 64"),
])
def test_rules(seq, keys, match):
    cluster = load_cluster("dgx-h100", nodes=8)
    s = strategy_from_flat(dict(global_batch=64, **keys))
    if match is None:
        assert build_layout(s, cluster, LLAMA.with_seq(seq)).cp == keys["cp"]
        return
    with pytest.raises(SpecError, match=match) as err:
        build_layout(s, cluster, LLAMA.with_seq(seq))
    assert err.value.field == "cp"


def test_world_size_counts_cp_and_derived_dp_leaves_room_for_it():
    cluster = load_cluster("dgx-h100", nodes=2)
    layout = build_layout(strategy_from_flat(dict(global_batch=8, tp=2, cp=4)), cluster, LLAMA)
    assert (layout.dp, layout.world_size, layout.dp_cp) == (2, 16, 8)
    with pytest.raises(SpecError, match=r"dp·tp·pp·cp = 4·2·1·4 = 32 does not match the 16 GPUs; use dp 2"):
        build_layout(strategy_from_flat(dict(global_batch=8, tp=2, cp=4, dp=4)), cluster, LLAMA)


def test_cp_refuses_eager_attention_and_layer_lists():
    with pytest.raises(SpecError, match="flash"):
        strategy_from_flat(dict(global_batch=8, cp=2, attention="eager"))
    layers = LayerListWorkload(name="x", layers=(LayerSpec(name="a", params=1, fwd_flops=1, activation_bytes=1),))
    with pytest.raises(SpecError, match="only a transformer has a sequence"):
        build_layout(strategy_from_flat(dict(global_batch=8, cp=2)), load_cluster("dgx-h100", nodes=1), layers)


def test_des_plays_cp_and_agrees_with_the_closed_form_without_contention():
    """Ring calls are timed delays (their exposed remainder), Ulysses all-to-alls replay on the links; one
    node, so nothing contends beyond the cp group itself: the DES equals the analytical step time."""
    cluster = load_cluster("dgx-h100", nodes=1)
    w = LLAMA.with_seq(16384)
    for keys in (dict(global_batch=4, tp=4, cp=2), dict(global_batch=4, tp=2, cp=4, cp_kind="all-to-all"),
                 dict(global_batch=8, tp=2, cp=2, pp=2)):
        s = strategy_from_flat(keys)
        des = simulate(compile_step(cluster, w, s), cluster, seed=0, steps=1).step_time_s
        assert des == pytest.approx(estimate(cluster, w, s).step_time_s, rel=2e-3), keys


def test_executor_and_parameter_server_refuse_cp():
    cluster = load_cluster("dgx-h100", nodes=1)
    work = compile_step(cluster, LLAMA.with_seq(8192), strategy_from_flat(dict(global_batch=2, tp=4, cp=2)))
    from executor.strategies.base import family_spec

    with pytest.raises(SpecError, match="context parallelism with tp = pp = 1"):
        family_spec(work.layout)
    with pytest.raises(SpecError, match="parameter server"):
        strategy_from_flat(dict(global_batch=2, cp=2, dp_sync="param-server"))


@settings(max_examples=40, deadline=None)
@given(cp=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2, 4, 8]), b=st.integers(1, 4),
       chunks=st.integers(1, 64), kind=st.sampled_from(list(ContextKind)), balanced=st.booleans())
def test_cp_splits_the_work_exactly(cp, tp, b, chunks, kind, balanced):
    """Invariants: the cp ranks together do the block's GEMM FLOPs once (token-wise ops and a balanced
    or all-to-all attention core exactly; an unbalanced ring's slowest rank (2 − 1/cp)× its share)."""
    s = 2 * 8 * chunks * 16
    split = ContextSplit(cp, kind, balanced)
    full = {w.op: w for w in layer_work(LLAMA, b, s, tp)}
    part = {w.op: w for w in layer_work(LLAMA, b, s, tp, context=split)}
    for kind_ in (OpKind.QKV, OpKind.OUT_PROJ, OpKind.MLP):
        assert cp * sum(k.flops for k in part[kind_].fwd + part[kind_].bwd) == pytest.approx(
            sum(k.flops for k in full[kind_].fwd + full[kind_].bwd), rel=1e-12)
    attn = sum(k.flops for k in part[OpKind.ATTENTION].fwd if k.attention) * cp / full[OpKind.ATTENTION].fwd[0].flops
    assert attn == pytest.approx(split.imbalance, rel=1e-12)
    assert split.imbalance == (2 - 1 / cp if kind is ContextKind.RING and not balanced and cp > 1 else 1.0)


def test_unrolled_pipelines_refuse_cp_with_one_line():
    """Several jobs / mixed clusters run unrolled pipelines, which do not replay cp groups yet: refused
    by name instead of simulating the cp ranks' traffic on the wrong groups."""
    cluster = load_cluster("dgx-h100", nodes=1)
    s = strategy_from_flat(dict(global_batch=4, tp=4, cp=2))
    with pytest.raises(SpecError, match="cp"):
        simulate(compile_step(cluster, LLAMA.with_seq(16384), s), cluster, seed=0, steps=1, unrolled=True)
