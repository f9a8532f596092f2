"""Mixture-of-experts layers with tensor parallelism, with and without expert parallelism (ep × tp; issue 14 §4).

Four gloo ranks: tp 2 × dp 2 with ep 2 (each tp coordinate exchanges tokens over its own ep group of two dp
ranks, every rank holds half the experts, each split over tp: executor/moe_tp.py), the same with ep 1
(experts replicated over dp, split over tp), with and without sequence parallelism, ZeRO 0, 2 (FSDP2) and 3
(each expert FSDP2 over its expert-data-parallel group on a mesh cut from the run's), and tp 2 × pp 2 (MoE
layers split over tp inside 1F1B stages); full recomputation on one of them.
The tiny presets (``--scale tiny``: Mixtral 8 experts top-2; Qwen1.5-MoE 60 experts top-4 with a gated shared
expert, learned and round-robin routing) train 3 AdamW steps, fp32, compared with one process on the whole global batch
(executor.reference); a dense Llama under tp 2 with sequence parallelism checks the gradient norm the tp
families now report (tp shards summed over tp, replicated tensors counted once). Tolerance 1e-5 relative on the loss and the gradient norm: the same float32 sums in
another order. A missing tp all-reduce of the experts' partial outputs, of their input gradient, or of the
router's partial gradient, an expert shard with the gate and up rows mixed, or tokens sent over the wrong
ep group move the loss or the norm far more. The ep peers log the same all-to-alls in the same order, and
model-state bytes per rank are the memory model's (``simulator.memory.shapes.stage_param_shapes`` at tp 2:
experts of width f_e/tp, the router replicated), byte for byte.
"""

from __future__ import annotations


import pytest

from moe_runs import STEPS, assert_matches_one_process, expected_states, launch_plans, tiny_plan
from simulator.cluster.io import load_cluster
from simulator.plan_file import Plan
from simulator.strategy import Framework, ZeroStage
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import Recompute, get_preset

pytestmark = pytest.mark.multiproc

MIXTRAL = get_preset("mixtral-8x7b")
QWEN = get_preset("qwen1.5-moe-a2.7b")
LLAMA = get_preset("llama2-7b")
TOL = 1e-5
WORLD = 4

PLANS = {
    "mixtral top-2 tp2 ep2": (MIXTRAL, {"dp": 2, "tp": 2, "ep": 2}),
    "qwen top-4 shared tp2 ep2 round-robin": (QWEN, {"dp": 2, "tp": 2, "ep": 2, "moe_routing": "round-robin"}),
    "mixtral top-2 tp2 ep2 sp recompute": (MIXTRAL, {"dp": 2, "tp": 2, "ep": 2, "sequence_parallel": True,
                                                     "recompute": "full"}),
    "qwen top-4 shared tp2 ep2 sp round-robin": (QWEN, {"dp": 2, "tp": 2, "ep": 2, "sequence_parallel": True,
                                                        "moe_routing": "round-robin"}),
    "qwen top-4 shared tp2 ep1 sp zero2": (QWEN, {"dp": 2, "tp": 2, "sequence_parallel": True, "zero": 2}),
    "mixtral top-2 tp2 ep2 zero3": (MIXTRAL, {"dp": 2, "tp": 2, "ep": 2, "zero": 3}),
    "mixtral top-2 tp2 pp2 1f1b": (MIXTRAL, {"tp": 2, "pp": 2, "schedule": "1f1b"}),
    "dense llama tp2 sp": (LLAMA, {"dp": 2, "tp": 2, "sequence_parallel": True}),  # the tp gradient norm
}


def _plan(model, flat: dict):
    return tiny_plan(model, WORLD, {"global_batch": 8, "micro_batch": 2} | flat)


def _rank(rank: int, world: int, plans: tuple) -> list:
    from moe_runs import logged_runner, train_record

    out = []
    for plan in plans:
        runner, issued, _ = logged_runner(plan, rank, world)
        coord = runner.coord
        out.append(train_record(runner) | {"issued": issued, "coord": (coord.dp, coord.pp, coord.tp)})
    return out


@pytest.fixture(scope="module")
def launch():
    return launch_plans(_rank, {name: _plan(model, flat) for name, (model, flat) in PLANS.items()}, WORLD)


def test_losses_and_gradient_norms_match_one_process(launch):
    plans, per_rank = launch
    for name, plan in plans.items():
        assert plan.layout().tp == 2, name
    assert_matches_one_process(plans, per_rank, TOL)


def test_ep_peers_issue_the_same_all_to_alls_in_the_same_order(launch):
    """The ranks of each ep group (same tp coordinate, consecutive dp indices) issue all-to-alls for the same
    MoE layers in the same order: the expert counts, dispatch and combine forward, and the two backward, per
    layer and micro-batch; each tp rank dispatches its replica's T·k copies (the whole micro-batch's tokens),
    the tp peers of a replica the same (layer, rows) sequence, or, under sequence parallelism, the copies of
    its own T/tp tokens."""
    plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        layout = plan.layout()
        if layout.ep == 1:
            assert all(not got[i]["issued"] for got in per_rank), name
            continue
        by_rank = {rank: got[i]["issued"] for rank, got in enumerate(per_rank)}
        for rank, issued in by_rank.items():
            c = layout.coords(rank)
            assert per_rank[rank][i]["coord"] == (c.dp, c.pp, c.tp), name
            for peer in layout.ep_group(c.pp, c.tp, c.dp):  # rows differ: each peer sends what it routed
                assert [layer for layer, _ in by_rank[peer]] == [layer for layer, _ in issued], (name, rank, peer)
            if not layout.sequence_parallel:  # the same tokens and routes on the tp peers
                assert by_rank[layout.rank_of(c.dp, c.pp, 1 - c.tp)] == issued, (name, rank)
        spec, m = plan.model, layout.micro_batches
        copies = plan.strategy.micro_batch * spec.seq_len * spec.moe.top_k // (2 if layout.sequence_parallel else 1)
        issued = by_rank[0]
        per_layer = 5 + (3 if plan.strategy.recompute is Recompute.FULL else 0)  # the forward's 3 rerun in backward
        assert len(issued) == STEPS * m * spec.layers * per_layer, (name, len(issued))
        assert [issued[j] for j in (0, 1, 3, 4)] == [(0, spec.moe.experts), (0, copies), (1, spec.moe.experts),
                                                     (1, copies)], name  # counts, dispatch per layer


def test_the_all_to_all_and_the_tp_time_are_their_own_phases(launch):
    plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        ep = plan.layout().ep
        for got in per_rank:
            assert ("ep" in got[i]["phases"]) == (ep > 1) and "tp" in got[i]["phases"], name
            if ep > 1:
                assert all(s > 0 for s in got[i]["ep_s"]), name
            if plan.model.moe is not None:
                assert "split over tp=2" in got[i]["components"]["expert tensor parallel"], name


def test_model_state_bytes_equal_the_memory_model_per_rank(launch):
    """The rank's tp shard of its stage (stage_param_shapes at tp 2): dense tensors over dp, the E/ep experts
    (each f_e/tp wide) over the expert-data-parallel group (ZeRO-2/3: FSDP2's dim-0 padded shards of the tp
    shards); the router replicated."""
    plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        layout, zero = plan.layout(), plan.strategy.zero
        for rank, got in enumerate(per_rank):
            framework = Framework.FSDP2 if zero >= ZeroStage.ZERO2 else Framework.TORCH_DDP  # what torch runs
            states = got[i]["states"]
            assert (states["params_bytes"], states["grads_bytes"], states["optimizer_bytes"]) == expected_states(
                plan.model, layout, rank, zero, framework), (name, rank)


def test_a_tp_that_does_not_split_the_experts_is_refused_before_launch_in_one_line():
    from dataclasses import replace

    from executor.strategies import load_families
    from executor.strategies.base import family_spec
    from simulator.errors import SpecError

    load_families()
    odd = replace(MIXTRAL, moe=replace(MIXTRAL.moe, expert_ffn=MIXTRAL.moe.expert_ffn + 1))
    plan = Plan(model=odd, cluster=load_cluster("dgx-h100"), gpus=4,
                strategy=strategy_from_flat({"global_batch": 8, "dp": 2, "tp": 2, "ep": 2}))
    with pytest.raises(SpecError) as err:
        family_spec(plan.layout()).check(plan, plan.layout())
    assert err.value.field == "plan.strategy.tp" and "expert width" in str(err.value)
    assert "\n" not in str(err.value)
