"""Mixture-of-experts compute and expert-parallel communication in the compiled step, against hand-worked
numbers: the experts' grouped GEMMs (FLOPs = the active weights, independent of ep; routing skew and
capacity scale the busiest rank's), the dispatch/combine all-to-alls (count, bytes, rank groups, their
placement inside or across nodes), the expert gradients over the expert-data-parallel group, and the
EP category of the analytical breakdown."""

from dataclasses import replace

import pytest

from simulator.analytical import estimate_work
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import CostCache, compile_step
from simulator.results import Category
from simulator.strategy import PlacementOrder, Recompute, Strategy, ZeroStage
from simulator.work import CommKind
from simulator.workload import TransformerSpec, get_preset
from simulator.workload.flops import layer_fwd_flops
from simulator.workload.kinds import ActivationKind, BiasKind, NormKind, PositionKind
from simulator.workload.moe import MoESpec
from simulator.workload.blocks import block_work
from simulator.workload.ops import OpKind

H100 = load_preset("dgx-h100", 4)  # 8 GPUs per node
TINY = TransformerSpec(name="tiny-moe", layers=4, hidden=512, heads=8, kv_heads=8, ffn=1024, vocab=1024,
                       seq_len=256, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                       position=PositionKind.ROTARY, bias=BiasKind.NONE, tied_embeddings=False,
                       moe=MoESpec(experts=8, top_k=2, expert_ffn=256, shared_experts=1, dense_layers=(0,)))


def fwd_gemm_flops(ops, kinds=None):
    return sum(k.flops for w in ops if kinds is None or w.op in kinds for k in w.fwd if k.gemm)


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_moe_layer_forward_flops_are_the_active_weights(ep):
    # T tokens · 2 · (active matmul weights) + attention scores: layer_fwd_flops(moe_layer=True) × T, for any ep
    b, s = 2, TINY.seq_len
    ops = block_work(TINY, b, s, 1, moe_layer=True, ep=ep)
    assert fwd_gemm_flops(ops) == pytest.approx(b * s * layer_fwd_flops(TINY, s, moe_layer=True), rel=1e-12)
    assert OpKind.ROUTER in [w.op for w in ops]


def test_expert_gemm_shape_and_skew():
    # 512 tokens, k = 2, 8 experts over ep = 4: 2 local experts of m = 512·2/2 = 512 rows; h 512, f_e 256
    ops = block_work(TINY, 2, 256, 1, moe_layer=True, ep=4)
    experts_in = next(k for w in ops if w.op is OpKind.MLP for k in w.fwd if k.name == "experts_in")
    assert (experts_in.shape.m, experts_in.shape.n, experts_in.shape.k, experts_in.shape.batch) == (512, 512, 512, 2)
    skewed = block_work(TINY, 2, 256, 1, moe_layer=True, ep=4, routing_skew=1.5)
    expert_flops = lambda o: sum(k.flops for w in o if w.op is OpKind.MLP for k in w.fwd if k.name.startswith("experts"))
    assert expert_flops(skewed) == pytest.approx(1.5 * expert_flops(ops), rel=1e-12)
    capped = replace(TINY, moe=replace(TINY.moe, capacity_factor=1.25))
    assert expert_flops(block_work(capped, 2, 256, 1, moe_layer=True, ep=4, routing_skew=3.0)) == \
        pytest.approx(1.25 * expert_flops(ops), rel=1e-12)


def mixtral_work(**kw):
    kw = {"global_batch": 64, "pp": 4, "ep": 8, **kw}
    return compile_step(H100, get_preset("mixtral-8x7b").with_seq(4096), Strategy(**kw), memory=False)


def ep_calls(chunk):
    return [c for c in (*chunk.tp_fwd, *chunk.tp_bwd) if c.kind is CommKind.EP]


def test_all_to_alls_per_moe_layer_bytes_and_group():
    work = mixtral_work(placement=PlacementOrder.TP_DP_PP)
    chunk = work.stages[0].chunks[0]                         # 8 MoE layers per stage
    calls = ep_calls(chunk)
    assert len(calls) == 8 * 4                               # dispatch + combine, forward and backward
    c = calls[0]
    assert c.op is Op.ALL_TO_ALL and c.nbytes == 4096 * 2 * 4096 * 2   # b·s·k·h·e
    assert c.group == tuple(range(8))                        # ep = dp 0..7: one NVLink node
    assert c.concurrent_groups == 1 * 1                      # dp/ep · tp
    full = mixtral_work(placement=PlacementOrder.TP_DP_PP, recompute=Recompute.FULL)
    assert len(ep_calls(full.stages[0].chunks[0])) == 8 * 6  # the forward pair repeated in backward
    skew = mixtral_work(placement=PlacementOrder.TP_DP_PP, routing_skew=2.0)
    assert ep_calls(skew.stages[0].chunks[0])[0].nbytes == 2 * c.nbytes


def test_an_ep_group_across_nodes_is_slower_than_one_inside():
    inside = ep_calls(mixtral_work(placement=PlacementOrder.TP_DP_PP).stages[0].chunks[0])[0]
    across = ep_calls(mixtral_work(placement=PlacementOrder.TP_PP_DP).stages[0].chunks[0])[0]
    assert across.group == tuple(range(0, 32, 4))            # dp stride pp = 4: two ranks per node
    assert across.time_s > 2 * inside.time_s


def test_no_all_to_all_without_ep_and_dense_layers_have_none():
    assert not ep_calls(mixtral_work(ep=1).stages[0].chunks[0])
    work = compile_step(H100.with_nodes(1), TINY, Strategy(global_batch=16, pp=2, ep=4), memory=False)
    first, second = work.stages[0].chunks[0], work.stages[1].chunks[0]   # layers 0-1 (0 dense), 2-3
    assert len(ep_calls(first)) == 1 * 4 and len(ep_calls(second)) == 2 * 4


def test_expert_gradients_are_reduced_over_the_expert_data_parallel_group():
    spec = get_preset("mixtral-8x7b").with_seq(4096)
    work = compile_step(H100, spec, Strategy(global_batch=64, pp=4, ep=2, placement=PlacementOrder.TP_DP_PP),
                        memory=False)
    st = work.stages[0]                                      # dp 8: ep groups of 2, expert-dp groups of 4
    grads = 4  # fp32 gradients: the torch framework (zero 0) runs autocast over fp32 parameters (sync_dtype)
    experts = 8 * spec.expert_params / spec.layers / 2        # 8 MoE layers' experts ÷ ep 2 (tp 1)
    expert_calls = [c for c in st.grad_sync if len(c.group) == 4]
    assert expert_calls and expert_calls[0].group == (0, 2, 4, 6)
    assert sum(c.nbytes for c in expert_calls) == pytest.approx(experts * grads, abs=len(expert_calls))
    dense = [c for c in st.grad_sync if len(c.group) == 8]
    held = 8 * (spec.block_params(0) - spec.expert_params / spec.layers) + spec.vocab * spec.hidden
    assert sum(c.nbytes for c in dense) == pytest.approx(held * grads, abs=len(dense))


def test_breakdown_books_the_all_to_alls_as_ep():
    work = mixtral_work(placement=PlacementOrder.TP_DP_PP)
    result = estimate_work(work, CostCache(H100))
    per_micro_batch = sum(c.time_s for c in ep_calls(work.stages[0].chunks[0]))
    assert result.breakdown[Category.EP] == pytest.approx(work.micro_batches * per_micro_batch, rel=1e-9)
    assert result.breakdown[Category.TP] == 0.0
    assert sum(result.breakdown.values()) == pytest.approx(result.step_time_s, rel=1e-9)


def test_des_replays_the_all_to_alls_on_the_links():
    from simulator.engine.step import simulate

    work = mixtral_work(placement=PlacementOrder.TP_DP_PP, global_batch=16)
    des = simulate(work, H100, trace=True)
    analytical = estimate_work(work, CostCache(H100))
    assert des.breakdown[Category.EP] > 0
    tl = des.timeline
    rows = tl[(tl["category"] == Category.EP.value) & (tl["rank"] == 0)]
    assert len(rows) == work.micro_batches * len(ep_calls(work.stages[0].chunks[0]))  # every call on stage 0's rank
    # no other traffic shares the NVLink ports here, so the replay matches the closed form closely
    assert des.breakdown[Category.EP] == pytest.approx(analytical.breakdown[Category.EP], rel=0.05)


def test_zero3_gathers_experts_over_the_expert_data_parallel_group():
    spec = get_preset("mixtral-8x7b").with_seq(4096)
    work = compile_step(H100, spec, Strategy(global_batch=64, pp=1, ep=4, zero=ZeroStage.ZERO3,
                                             placement=PlacementOrder.TP_DP_PP), memory=False)
    chunk = work.stages[0].chunks[0]                   # 32 blocks; dp 32, expert-dp groups of 8
    gathers = chunk.zero_fwd
    assert len(gathers) == 2 * 32
    dense, experts = gathers[0::2], gathers[1::2]
    assert {len(c.group) for c in dense} == {32} and {c.group for c in experts} == {tuple(range(0, 32, 4))}
    per_block_experts = 8 * 3 * 4096 * 14336 // 4     # 8 experts ÷ ep 4 per block, bf16
    assert experts[1].nbytes == 2 * per_block_experts
    assert dense[1].nbytes == 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 2 * 4096 + 8 * 4096)
    rs = chunk.zero_bwd[len(gathers):]                 # DeepSpeed buckets: the dense ones, then the experts'
    assert {len(c.group) for c in rs} == {32, 8}


def test_zero1_gathers_the_updated_experts_over_their_group():
    spec = get_preset("mixtral-8x7b").with_seq(4096)
    work = compile_step(H100, spec, Strategy(global_batch=64, pp=4, ep=2, zero=ZeroStage.ZERO1,
                                             placement=PlacementOrder.TP_DP_PP), memory=False)
    groups = {len(c.group) for c in work.stages[0].after_step}
    assert groups == {8, 4}                            # dp 8, expert-dp 8/2


@pytest.mark.parametrize("moe_layer", [False, True])
def test_mla_block_forward_flops_are_its_matmul_weights(moe_layer):
    spec = get_preset("deepseek-v2-lite")
    b, s = 1, 1024
    ops = block_work(spec, b, s, 1, moe_layer=moe_layer, ep=8)
    assert fwd_gemm_flops(ops) == pytest.approx(b * s * layer_fwd_flops(spec, s, moe_layer=moe_layer), rel=1e-12)


def test_mla_tensor_parallel_splits_heads_not_the_latent_projections():
    from simulator.memory.shapes import layer_param_shapes
    spec = get_preset("deepseek-v2-lite")
    one, two = dict(layer_param_shapes(spec, 0, 1)), dict(layer_param_shapes(spec, 0, 2))
    assert two["layers.0.attn.q.weight"] == (16 * 192 // 2, 2048)
    assert two["layers.0.attn.kv_up.weight"] == (16 * 256 // 2, 512)
    assert two["layers.0.attn.kv_down.weight"] == one["layers.0.attn.kv_down.weight"] == (576, 2048)
    assert two["layers.0.attn.out.weight"] == (2048, 16 * 128 // 2)


def test_des_replays_the_other_ep_and_expert_dp_groups_too():
    from simulator.engine.replay_work import replica_groups
    from simulator.strategy import build_layout

    lay = build_layout(Strategy(global_batch=64, pp=4, ep=4), H100, get_preset("mixtral-8x7b"))
    # tp-pp-dp: rank = pp + 4·dp; ep groups are dp 0-3 and 4-7, expert-dp groups dp {0,4}, {1,5}, ...
    assert lay.ep_group(0) == (0, 4, 8, 12)
    assert replica_groups(lay, lay.ep_group(0), 2) == [(16, 20, 24, 28)]
    assert lay.expert_dp_group(0) == (0, 16)
    assert replica_groups(lay, lay.expert_dp_group(0), 4) == [(4, 20), (8, 24), (12, 28)]
    assert replica_groups(lay, lay.dp_groups[0], 1) == []
