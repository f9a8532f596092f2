"""The MoE token dispatch volumes per rank, against hand-worked numbers: per-expert copies
(Megatron-Core's alltoall dispatcher), DeepEP's one copy per destination node plus NVLink forwarding,
the expected distinct nodes/ranks of a token under (group-limited) uniform and round-robin routing,
sequence parallelism (each tp rank dispatches its own seq/tp tokens), and the DES replaying the
same calls as the closed form."""

from dataclasses import replace
from math import comb

import pytest
from hypothesis import given, settings, strategies as st

from simulator.analytical import estimate_work
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import CostCache, compile_step
from simulator.errors import SpecError
from simulator.results import Category
from simulator.strategy import PlacementOrder, Strategy
from simulator.work import CommKind
from simulator.workload import get_preset
from simulator.workload.moe import MoESpec
from simulator.workload.moe_routing import Dispatcher, Routing, distinct_units

H100 = load_preset("dgx-h100", 4)  # 8 GPUs per node
MIXTRAL = get_preset("mixtral-8x7b").with_seq(4096)   # E 8, k 2, h 4096, bf16
TOKEN_BYTES = 4096 * 2                                 # h · e


def work(**kw):
    kw = {"global_batch": 64, "pp": 4, "ep": 8, **kw}
    return compile_step(H100, MIXTRAL, Strategy(**kw), memory=False)


def ep_calls(w):
    chunk = w.stages[0].chunks[0]
    return [c for c in (*chunk.tp_fwd, *chunk.tp_bwd) if c.kind is CommKind.EP]


def test_distinct_units_hand_worked():
    mixtral = MIXTRAL.moe
    # 8 experts on 4 nodes of 2: a node is missed when both picks avoid its 2 experts, C(6,2)/C(8,2) = 15/28
    assert distinct_units(mixtral, Routing.LEARNED, 4) == pytest.approx(4 * (1 - 15 / 28), rel=1e-12)
    assert distinct_units(mixtral, Routing.LEARNED, 8) == pytest.approx(2.0, rel=1e-12)   # k distinct experts
    # DeepSeek-V3 on 8 nodes (32 experts = one routing group each), 4 groups of 8 per token: a node is
    # selected with probability 1/2, then missed with C(96,8)/C(128,8)
    v3 = get_preset("deepseek-v3").moe
    assert (v3.expert_groups, v3.groups_per_token) == (8, 4)
    expected = 8 * 0.5 * (1 - comb(96, 8) / comb(128, 8))
    assert distinct_units(v3, Routing.LEARNED, 8) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(3.629, abs=1e-3) and expected <= 4   # the node limit of §2.1.2
    unlimited = replace(v3, expert_groups=1, groups_per_token=None)
    assert distinct_units(unlimited, Routing.LEARNED, 8) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)))
    # AutoModel's fake balanced gate: 8 consecutive experts from a multiple of 8: one node, two ranks of 4
    assert distinct_units(v3, Routing.ROUND_ROBIN, 8) == 1.0
    assert distinct_units(v3, Routing.ROUND_ROBIN, 64) == 2.0
    # k = 2 consecutive of 8 over 4 units of 2, starts 0, 2, 4, 6: always one unit; over 8 units: two
    assert distinct_units(mixtral, Routing.ROUND_ROBIN, 4) == 1.0
    assert distinct_units(replace(mixtral, top_k=3), Routing.ROUND_ROBIN, 4) == 2.0   # 3 consecutive span 2
    with pytest.raises(SpecError):
        distinct_units(mixtral, Routing.LEARNED, 3)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([8, 16, 64, 256]), st.integers(1, 8), st.sampled_from([1, 2, 4, 8]), st.sampled_from(list(Routing)))
def test_distinct_units_bounds(experts, k, units, routing):
    moe = MoESpec(experts=experts, top_k=k, expert_ffn=64)
    n = distinct_units(moe, routing, units)
    assert 1.0 - 1e-12 <= n <= min(units, k) + 1e-12


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.integers(1, 4), st.sampled_from([2, 4, 8, 16]))
def test_group_limit_never_adds_nodes(groups, per_token, units):
    per_token = min(per_token, groups)
    free = MoESpec(experts=64, top_k=4, expert_ffn=64)
    limited = replace(free, expert_groups=groups, groups_per_token=per_token)
    assert distinct_units(limited, Routing.LEARNED, units) <= distinct_units(free, Routing.LEARNED, units) + 1e-12


def test_per_expert_dispatch_bytes_and_sequence_parallel_split():
    # T = 4096 tokens of a micro-batch, k = 2: T·k·h·e per rank in one all-to-all over the ep group
    plain = ep_calls(work(placement=PlacementOrder.TP_DP_PP))
    assert plain[0].op is Op.ALL_TO_ALL and plain[0].nbytes == 4096 * 2 * TOKEN_BYTES
    # tp 2 with sequence parallelism: each tp rank dispatches its own 2048 tokens, then the tp group
    # gathers the 4096·2 copies (Megatron-Core alltoall dispatcher with tp > 1)
    sp = ep_calls(work(tp=2, pp=2, sequence_parallel=True, placement=PlacementOrder.TP_DP_PP))
    a2a = [c for c in sp if c.op is Op.ALL_TO_ALL]
    assert {c.nbytes for c in a2a} == {2048 * 2 * TOKEN_BYTES}
    gathers = [c for c in sp if c.op in (Op.ALL_GATHER, Op.REDUCE_SCATTER)]
    assert {c.nbytes for c in gathers} == {4096 * 2 * TOKEN_BYTES} and {len(c.group) for c in gathers} == {2}
    assert len(a2a) == len(gathers) and sp[:4] == [a2a[0], gathers[0], gathers[1], a2a[1]]   # per block
    assert gathers[0].concurrent_groups == 8                   # dp 8: a stage's 16 ranks in tp groups of 2
    # without sequence parallelism every tp rank holds (and dispatches) all 4096 tokens
    no_sp = ep_calls(work(tp=2, pp=2, placement=PlacementOrder.TP_DP_PP))
    assert {c.op for c in no_sp} == {Op.ALL_TO_ALL} and {c.nbytes for c in no_sp} == {4096 * 2 * TOKEN_BYTES}


def test_deepep_dispatch_bytes_across_nodes():
    # placement tp-pp-dp with pp 4: the ep group is dp ranks 0, 4, ..., 28: 2 per node on 4 nodes
    calls = ep_calls(work(placement=PlacementOrder.TP_PP_DP, moe_dispatcher=Dispatcher.DEEPEP))
    inter, intra = calls[0], calls[1]
    assert inter.group == (0, 8, 16, 24) and intra.group == (0, 4)
    # network: one copy per distinct node, 4·(1 − 15/28) = 13/7 per token; NVLink: one per distinct rank, 2
    assert inter.nbytes == round(4096 * 13 / 7 * TOKEN_BYTES)
    assert intra.nbytes == 4096 * 2 * TOKEN_BYTES
    per_expert = ep_calls(work(placement=PlacementOrder.TP_PP_DP))
    assert len(calls) == 2 * len(per_expert)                   # two legs per all-to-all
    assert inter.concurrent_groups == 2 and intra.concurrent_groups == 4   # 2 rails, 4 nodes of one ep group
    # bytes leaving a node per rank: DeepEP 13/7 · 3/4 = 1.39 T, per-expert 2 · 6/8 = 1.5 T (h·e each)
    assert inter.nbytes * 3 / 4 < per_expert[0].nbytes * 6 / 8
    rr = ep_calls(work(placement=PlacementOrder.TP_PP_DP, moe_dispatcher=Dispatcher.DEEPEP,
                       moe_routing=Routing.ROUND_ROBIN))
    assert rr[0].nbytes == 4096 * 1 * TOKEN_BYTES              # two consecutive experts: one node


def test_deepep_inside_one_node_sends_one_copy_per_rank():
    calls = ep_calls(work(placement=PlacementOrder.TP_DP_PP, moe_dispatcher=Dispatcher.DEEPEP,
                          moe_routing=Routing.ROUND_ROBIN))
    assert {c.group for c in calls} == {tuple(range(8))}       # no network leg
    assert {c.nbytes for c in calls} == {4096 * 2 * TOKEN_BYTES}   # 1 expert per rank: 2 ranks per token


def test_des_replays_the_deepep_legs():
    from simulator.engine.step import simulate

    w = work(placement=PlacementOrder.TP_PP_DP, global_batch=16, moe_dispatcher=Dispatcher.DEEPEP)
    des = simulate(w, H100, trace=True)
    analytical = estimate_work(w, CostCache(H100))
    tl = des.timeline
    rows = tl[(tl["category"] == Category.EP.value) & (tl["rank"] == 0)]
    assert len(rows) == w.micro_batches * len(ep_calls(w))
    assert des.breakdown[Category.EP] == pytest.approx(analytical.breakdown[Category.EP], rel=0.05)   # 1.5 % here


def test_group_limited_routing_from_a_config_and_through_a_plan_file():
    import json

    from simulator.plan_file import model_from_dict, model_to_dict
    from simulator.workload import spec_from_hf_config

    v3 = get_preset("deepseek-v3")
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
           "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
           "first_k_dense_replace": 3, "n_routed_experts": 256, "n_shared_experts": 1, "num_attention_heads": 128,
           "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "q_lora_rank": 1536,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "v_head_dim": 128, "vocab_size": 129280, "n_group": 8, "topk_group": 4}  # deepseek-ai/DeepSeek-V3 keys
    assert spec_from_hf_config(cfg, "v3").moe == v3.moe
    lite = spec_from_hf_config({**cfg, "n_group": 1, "topk_group": 1}, "one-group").moe
    assert (lite.expert_groups, lite.groups_per_token) == (1, None)       # 1 of 1 group: no limit
    spec = replace(v3, name="v3-copy")
    assert model_from_dict(json.loads(json.dumps(model_to_dict(spec)))).moe == v3.moe


@pytest.mark.parametrize("bad,field", [(dict(expert_groups=3), "model.moe.expert_groups"),
                                       (dict(expert_groups=8, groups_per_token=9), "model.moe.groups_per_token"),
                                       (dict(expert_groups=64, groups_per_token=1), "model.moe.groups_per_token")])
def test_bad_routing_groups_are_refused(bad, field):
    with pytest.raises(SpecError) as err:
        MoESpec(experts=256, top_k=8, expert_ffn=64, **bad)          # 64 groups of 4 < k = 8 experts
    assert err.value.field == field
