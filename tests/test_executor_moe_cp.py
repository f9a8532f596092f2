"""Mixture-of-experts layers with expert and context parallelism together (ep × cp; issue 14 §4).

Four gloo ranks: dp 2 × cp 2 with ep 2, tp = pp = 1 (executor/moe.py, *With context parallelism*). Each context
rank routes its own s/cp tokens of every sample and exchanges them over the ep group of its context rank (the two
replicas at the same cp coordinate, ``ParallelLayout.ep_group``); the experts' gradients are summed over the
expert-data-parallel group, which spans both context ranks of a replica ((dp/ep)·cp = 2 ranks, Megatron-Core's
expert-data-parallel group with context parallelism [src: megatron-moe-cp]), and divided by dp·cp. Plans: Mixtral
top-2 under ring attention and DDP, Qwen top-4 with its gated shared expert under the all-to-all (Ulysses) variant
and ZeRO-1, Mixtral under FSDP2 ZeRO-3 with full recomputation, Qwen under round-robin routing (a context rank's
tokens keep their index in the whole micro-batch: executor.moe.route_context_tokens). The tiny presets train 3 AdamW steps, fp32,
compared with one process on the whole global batch (executor.reference): loss and gradient norm within 1e-5
relative (the same float32 sums in another order; experts exchanged over the wrong group, or their gradients
divided by dp instead of dp·cp, or reduced over the ep group, move them far more). The ep peers log the same
all-to-alls in the same order, each dispatching the copies of its own T/cp tokens, and model-state bytes per rank
equal the memory model's (dense tensors over dp·cp, experts over their expert-data-parallel group), byte for byte.
"""

from __future__ import annotations

import pytest

from moe_runs import STEPS, assert_matches_one_process, expected_states, launch_plans, tiny_plan
from simulator.strategy import Framework, ZeroStage
from simulator.workload import Recompute, get_preset

pytestmark = pytest.mark.multiproc

MIXTRAL = get_preset("mixtral-8x7b")
QWEN = get_preset("qwen1.5-moe-a2.7b")
TOL = 1e-5
WORLD = 4

PLANS = {
    "mixtral top-2 ep2 cp2 ring ddp": (MIXTRAL, {"dp": 2, "cp": 2, "ep": 2}),
    "qwen top-4 shared ep2 cp2 all-to-all zero1": (QWEN, {"dp": 2, "cp": 2, "ep": 2, "cp_kind": "all-to-all",
                                                          "zero": 1}),
    "mixtral top-2 ep2 cp2 ring zero3 recompute": (MIXTRAL, {"dp": 2, "cp": 2, "ep": 2, "zero": 3,
                                                             "recompute": "full"}),
    "qwen top-4 shared ep2 cp2 ring round-robin": (QWEN, {"dp": 2, "cp": 2, "ep": 2, "moe_routing": "round-robin"}),
}


def _plan(model, flat: dict):
    return tiny_plan(model, WORLD, {"global_batch": 8, "micro_batch": 2} | flat)


def _rank(rank: int, world: int, plans: tuple) -> list:
    from moe_runs import logged_runner, train_record

    out = []
    for plan in plans:
        runner, issued, layers = logged_runner(plan, rank, world)
        groups = layers[0].ep
        out.append(train_record(runner) | {"issued": issued, "ep_ranks": groups.ranks,
                                           "expert_dp_ranks": groups.expert_dp_ranks})
    return out


@pytest.fixture(scope="module")
def launch():
    return launch_plans(_rank, {name: _plan(model, flat) for name, (model, flat) in PLANS.items()}, WORLD)


def test_losses_and_gradient_norms_match_one_process(launch):
    plans, per_rank = launch
    for name, plan in plans.items():
        layout = plan.layout()
        assert (layout.dp, layout.cp, layout.ep, layout.tp, layout.pp) == (2, 2, 2, 1, 1), name
    assert_matches_one_process(plans, per_rank, TOL)


def test_groups_are_the_layouts_ep_at_one_context_rank_and_expert_dp_over_both():
    """Placement tp-pp-dp, rank = replica·cp + context rank: the ep group of rank 0 is the two replicas at context
    rank 0, its expert-data-parallel group replica 0 at both context ranks."""
    layout = _plan(MIXTRAL, PLANS["mixtral top-2 ep2 cp2 ring ddp"][1]).layout()
    assert [layout.ep_group(0, 0, d) for d in range(4)] == [(0, 2), (1, 3), (0, 2), (1, 3)]
    assert [layout.expert_dp_group(0, 0, d) for d in range(4)] == [(0, 1), (0, 1), (2, 3), (2, 3)]


def test_ranks_exchange_over_the_layouts_groups_and_issue_the_same_all_to_alls(launch):
    """Every rank's ep and expert-dp groups are the layout's; the ep peers issue all-to-alls for the same MoE layers
    in the same order (counts, dispatch, combine forward; two backward; per layer and micro-batch; full
    recomputation reruns the forward's three), each dispatching the T·k/cp copies of its own tokens."""
    plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        layout, spec = plan.layout(), plan.model
        for rank, got in enumerate(per_rank):
            c = layout.coords(rank)
            assert got[i]["ep_ranks"] == layout.ep_group(c.pp, c.tp, c.dp), (name, rank)
            assert got[i]["expert_dp_ranks"] == layout.expert_dp_group(c.pp, c.tp, c.dp), (name, rank)
            for peer in got[i]["ep_ranks"]:
                assert [layer for layer, _ in per_rank[peer][i]["issued"]] == [layer for layer, _ in got[i]["issued"]]
        issued = per_rank[0][i]["issued"]
        per_layer = 5 + (3 if plan.strategy.recompute is Recompute.FULL else 0)
        assert len(issued) == STEPS * layout.micro_batches * spec.layers * per_layer, (name, len(issued))
        copies = plan.strategy.micro_batch * spec.seq_len // layout.cp * spec.moe.top_k
        assert issued[:2] == [(0, spec.moe.experts), (0, copies)], name


def test_model_state_bytes_equal_the_memory_model_per_rank(launch):
    plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        layout, zero = plan.layout(), plan.strategy.zero
        framework = Framework.FSDP2 if zero >= ZeroStage.ZERO2 else Framework.TORCH_DDP  # what torch runs
        for rank, got in enumerate(per_rank):
            states = got[i]["states"]
            assert (states["params_bytes"], states["grads_bytes"], states["optimizer_bytes"]) == expected_states(
                plan.model, layout, rank, zero, framework), (name, rank)
            assert "expert parallel" in got[i]["components"] and "context parallel" in got[i]["components"], name
