"""Memory of mixture-of-experts models under expert parallelism, against hand-worked numbers: the routed
experts ÷ ep on each rank, ZeRO partitioning the experts over the expert-data-parallel group (dp/ep) and
the rest over dp, and the activations a MoE block keeps."""

import pytest

from simulator.cluster.presets import load_preset
from simulator.memory import layer_activation, memory_report
from simulator.memory.moe import split_experts
from simulator.memory.shapes import layer_param_shapes, numel
from simulator.strategy import PlacementOrder, Strategy, ZeroStage
from simulator.workload import get_preset

H100 = load_preset("dgx-h100", 4)
MIXTRAL = get_preset("mixtral-8x7b").with_seq(4096)
H, EXPERT = 4096, 3 * 4096 * 14336                      # one SwiGLU expert
ATTN_NORMS_ROUTER = 2 * H * H + 2 * H * 1024 + 2 * H + 8 * H
EMBED = 32000 * H


def stage0(**kw):
    s = Strategy(**{"global_batch": 256, "pp": 4, "placement": PlacementOrder.TP_DP_PP, **kw})
    return memory_report(MIXTRAL, H100, s).stages[0]  # 8 MoE blocks and the embedding; dp = 8


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_parameters_hold_their_share_of_experts(ep):
    dense = 8 * ATTN_NORMS_ROUTER + EMBED
    experts = 8 * 8 * EXPERT // ep
    assert stage0(ep=ep).params_bytes == 4 * (dense + experts)  # ZeRO 0 is torch DDP: fp32 weights under autocast


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_zero1_partitions_experts_over_the_expert_data_parallel_group(ep):
    dense, experts = 8 * ATTN_NORMS_ROUTER + EMBED, 8 * 8 * EXPERT // ep
    edp = 8 // ep
    got = stage0(ep=ep, zero=ZeroStage.ZERO1).optimizer_bytes          # deepspeed flat: ⌈n/d⌉ per rank
    assert got == 12 * (-(-dense // 8) + -(-experts // edp))


def test_zero3_parameters():
    # pp 1: all 32 blocks, embedding, final norm and head on one stage; dp 32, ep 4, expert-dp 8
    dense, experts = 32 * ATTN_NORMS_ROUTER + 2 * EMBED + H, 32 * 8 * EXPERT // 4
    st = stage0(ep=4, pp=1, zero=ZeroStage.ZERO3)
    # + DeepSpeed's persistent tensors (< 1e5 elements, whole on every rank): per block two RMSNorms (2H)
    # and the router (8H = 32,768), and the final norm: 321 H (tests/test_ds_zero3.py)
    assert st.placed.gpu.params_bytes == 2 * (-(-dense // 32) + -(-experts // 8) + 321 * H)


def test_every_parameter_is_held_once_over_the_ep_ranks():
    spec = get_preset("qwen1.5-moe-a2.7b")
    ep = 4
    blocks = 0
    for i in range(spec.layers):
        shared, experts = split_experts(layer_param_shapes(spec, i, 1, ep))
        blocks += sum(numel(d) for _, d in shared) + ep * sum(numel(d) for _, d in experts)
    assert blocks == spec.blocks_params


def test_moe_block_activations_hand_worked():
    # per token: dense block terms plus, instead of the MLP's 4·f, router probabilities E, and per each
    # of k·σ token copies the permuted input h, the SwiGLU 4·f_e and the expert output h
    seq, mbs = 4096, 1
    dense = layer_activation(MIXTRAL, seq=seq, mbs=mbs)
    moe = layer_activation(MIXTRAL, seq=seq, mbs=mbs, moe_layer=True)
    skewed = layer_activation(MIXTRAL, seq=seq, mbs=mbs, moe_layer=True, skew=1.5, ep=8)
    mlp_dense, mlp_moe = 4 * 14336, 8 + 2 * (2 * H + 4 * 14336)
    assert moe.split_bytes - dense.split_bytes == seq * (mlp_moe - mlp_dense) * 2
    assert skewed.split_bytes - moe.split_bytes == seq * 0.5 * 2 * (2 * H + 4 * 14336) * 2
