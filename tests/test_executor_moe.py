"""Mixture-of-experts blocks and expert parallelism in the executor (executor/moe.py, issue 14 §4).

The tiny MoE models are the presets scaled by ``--scale tiny`` (Mixtral: 8 experts, top-2; Qwen1.5-MoE:
60 experts, top-4, a gated shared expert) and Mixtral with top-1 routing. Each plan runs 3 AdamW steps,
fp32, on 2 and 4 gloo ranks, with ep = dp and ep < dp, DDP and ZeRO-1, and is compared with one process
training the same model on the whole global batch (executor.reference: every expert local, no
all-to-all). Tolerance 1e-5 relative on the loss and on the gradient norm: the same float32 sums in
another order. A token sent to the wrong rank or expert, a combine that puts rows back in the wrong
order, an expert gradient averaged over dp by DDP (or not divided by dp) moves the second step's loss
or the gradient norm far more. Model-state bytes per rank are compared with the memory model
(``simulator.memory``: dense tensors over dp, the rank's E/ep experts over the expert-data-parallel
group), byte for byte.

Round-robin routing (the plan's ``moe_routing``): the same equivalence against one process routing
each token as the rank whose micro-batch holds it (Qwen's 60 experts and top-4 make a token's experts
depend on its index within the micro-batch, so a wrong count of the index moves the loss), and every
expert's rows in every call equal ep·T·k/E (Mixtral, E divides T·k), which the learned gate misses.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from executor.launch import run
from executor.model import build_gpt
from executor.moe import round_robin_experts
from executor.moe_parallel import EpGroups, apply_expert_parallel
from moe_runs import assert_matches_one_process
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.memory.moe import add_states, split_experts
from simulator.memory.shapes import stage_param_shapes, transformer_param_shapes
from simulator.memory.states import model_state_bytes
from simulator.plan_file import Plan
from simulator.plan_scale import Scale, scale_plan
from simulator.strategy import Framework, ZeroStage
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import DtypePolicy, get_preset
from simulator.workload.moe_routing import Routing

pytestmark = pytest.mark.multiproc

MIXTRAL = get_preset("mixtral-8x7b")
TOP1 = replace(MIXTRAL, name="mixtral-top1", moe=replace(MIXTRAL.moe, top_k=1))
QWEN = get_preset("qwen1.5-moe-a2.7b")
TOL = 1e-5


def _plan(model, n: int, flat: dict) -> Plan:
    keys = {"global_batch": 8, "micro_batch": 8 // (2 * n), "dp": n} | flat  # two micro-batches per replica
    plan = Plan(model=model, cluster=load_cluster("dgx-h100"), gpus=n, strategy=strategy_from_flat(keys))
    return scale_plan(plan, Scale.parse("tiny"), n).run


PLANS = {
    2: {"mixtral top-2 ep2 ddp": (MIXTRAL, {"ep": 2}),
        "top-1 ep2 ddp no-overlap": (TOP1, {"ep": 2, "overlap_grad_reduce": False}),
        "qwen top-4 shared ep2 zero1": (QWEN, {"ep": 2, "zero": 1}),
        "mixtral ep1 cp2 ddp": (MIXTRAL, {"dp": 1, "cp": 2}),  # each cp rank routes its own tokens
        "mixtral top-2 ep2 round-robin ddp": (MIXTRAL, {"ep": 2, "moe_routing": "round-robin"}),
        "qwen top-4 ep2 round-robin zero1": (QWEN, {"ep": 2, "zero": 1, "moe_routing": "round-robin"}),
        "mixtral top-2 ep2 zero3": (MIXTRAL, {"ep": 2, "zero": 3})},
    4: {"top-1 ep4 ddp": (TOP1, {"ep": 4}),
        "top-1 ep4 round-robin ddp": (TOP1, {"ep": 4, "moe_routing": "round-robin"}),
        "mixtral top-2 ep2<dp4 zero2": (MIXTRAL, {"ep": 2, "zero": 2}),
        "qwen top-4 ep2<dp4 zero3 recompute": (QWEN, {"ep": 2, "zero": 3, "recompute": "full"}),
        "qwen top-4 ep2<dp4 round-robin ddp": (QWEN, {"ep": 2, "moe_routing": "round-robin"}),
        "mixtral top-2 ep1 dp4 round-robin recompute": (MIXTRAL, {"moe_routing": "round-robin",
                                                                  "recompute": "full"}),
        "mixtral top-2 ep2<dp4 ddp": (MIXTRAL, {"ep": 2}),
        "mixtral top-2 ep2<dp4 zero1": (MIXTRAL, {"ep": 2, "zero": 1}),
        "top-1 ep2<dp4 zero1 recompute": (TOP1, {"ep": 2, "zero": 1, "recompute": "full"})},
}


def _rank(rank: int, world: int, plans: tuple) -> list:
    from executor.moe import moe_layers
    from moe_runs import build_runner, train_record

    out = []
    for plan in plans:
        _, runner = build_runner(plan, rank, world)
        rows: list[int] = []  # rows each local expert of every MoE layer ran on, every call
        for moe in moe_layers(runner.model):
            for expert in moe.experts:
                expert.register_forward_hook(lambda module, args, result: rows.append(args[0].shape[0]))
        out.append(train_record(runner) | {"expert_rows": rows})
    return out


@pytest.fixture(scope="module", params=[2, 4])
def launch(request):
    n = request.param
    plans = {name: _plan(model, n, flat) for name, (model, flat) in PLANS[n].items()}
    per_rank = run(_rank, n, args=(tuple(plans.values()),), backend="gloo", timeout_s=600.0)
    return n, plans, per_rank


def test_losses_and_gradient_norms_match_one_process(launch):
    n, plans, per_rank = launch
    assert_matches_one_process(plans, per_rank, TOL)


def test_round_robin_gives_every_expert_an_equal_share_and_says_so(launch):
    """Every call of every expert runs on ep·T·k/E rows under round-robin (Mixtral and its top-1: E divides
    T·k); the learned gate's calls differ (what this test would see if the plan's routing were ignored)."""
    n, plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        s, spec = plan.strategy, plan.model
        round_robin = s.moe_routing is Routing.ROUND_ROBIN
        for got in per_rank:
            assert got[i]["components"]["moe routing"].startswith(s.moe_routing.value), name
            if spec.moe.experts == 8:
                share = plan.layout().ep * s.micro_batch * spec.seq_len * spec.moe.top_k // spec.moe.experts
                assert (set(got[i]["expert_rows"]) == {share}) == round_robin, (name, got[i]["expert_rows"])


def test_round_robin_experts_are_distinct_consecutive_and_balanced():
    """Hand-worked: E = 8, k = 3, period 4: token 5 is token 1 of its micro-batch, experts 3, 4, 5; token 2
    wraps to 6, 7, 0. Over a 8-token micro-batch every expert gets 3 copies."""
    chosen = round_robin_experts(8, 3, 8, 4)
    assert chosen[5].tolist() == [3, 4, 5] and chosen[2].tolist() == [6, 7, 0]
    assert all(len(set(row)) == 3 for row in chosen.tolist())
    assert torch.bincount(round_robin_experts(8, 3, 8, 8).reshape(-1), minlength=8).tolist() == [3] * 8


def test_the_all_to_all_is_its_own_phase(launch):
    n, plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        ep = plan.layout().ep
        for got in per_rank:
            assert ("ep" in got[i]["phases"]) == (ep > 1), name
            if ep > 1:
                assert all(s > 0 for s in got[i]["ep_s"]), name


def test_model_state_bytes_equal_the_memory_model_per_rank(launch):
    """Dense tensors: states over dp (ZeRO-1: ZeroRedundancyOptimizer's greedy whole-tensor split over dp;
    ZeRO-2/3: FSDP2's dim-0 padded shards); the rank's E/ep experts: over the expert-data-parallel group
    (its index there: dp rank // ep)."""
    n, plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        layout, zero = plan.layout(), plan.strategy.zero
        dense, experts = split_experts(stage_param_shapes(plan.model, ep=layout.ep))
        framework = Framework.FSDP2 if zero >= ZeroStage.ZERO2 else Framework.TORCH_DDP  # what torch runs
        for rank, got in enumerate(per_rank):
            d = layout.coords(rank).dp
            model = model_state_bytes(dense, dp=n, zero=zero, dtype=DtypePolicy.FP32, framework=framework, rank=d)
            if experts:
                model = add_states(model, model_state_bytes(experts, dp=n // layout.ep, zero=zero,
                                                            dtype=DtypePolicy.FP32, framework=framework,
                                                            rank=d // layout.ep))
            states = got[i]["states"]
            assert (states["params_bytes"], states["grads_bytes"], states["optimizer_bytes"]) == (  # after the step
                model.params_at_rest_bytes, model.grads_bytes, model.optimizer_bytes + model.optimizer_step_bytes), \
                (name, rank)
        if zero is ZeroStage.ZERO0 and layout.ep > 1:  # each rank holds only its share of the experts
            full = sum(4 * torch.Size(s).numel() for _, s in transformer_param_shapes(plan.model))
            assert per_rank[0][i]["states"]["params_bytes"] < full


def test_parameters_follow_the_memory_model_and_each_rank_keeps_its_experts():
    spec = scale_plan(Plan(model=QWEN, cluster=load_cluster("dgx-h100"), gpus=1,
                           strategy=strategy_from_flat({"global_batch": 2})), Scale.parse("tiny")).run.model
    spec = replace(spec, layers=3, moe=replace(spec.moe, dense_layers=(1,)))  # MoE, dense, MoE
    full = build_gpt(spec)
    assert [(n, tuple(p.shape)) for n, p in full.named_parameters()] == transformer_param_shapes(spec)
    assert sum(p.numel() for p in full.parameters()) == spec.params
    part = build_gpt(spec)
    groups = EpGroups(ranks=(0, 1, 2), index=1, group=None, expert_dp_ranks=(1,), expert_dp_group=None)
    apply_expert_parallel(part, groups)  # rank 1 of 3 keeps experts 20..39 of 60, renumbered 0..19
    assert [(n, tuple(p.shape)) for n, p in part.named_parameters()] == stage_param_shapes(spec, ep=3)
    assert torch.equal(part.layers[2].moe.experts[0].up.weight, full.layers[2].moe.experts[20].up.weight)
    assert not hasattr(part.layers[1], "moe")


def test_what_the_executor_does_not_run_with_experts_is_refused_in_one_line():
    from executor.strategies import load_families
    from executor.strategies.base import family_spec

    load_families()
    cluster = load_cluster("dgx-h100")
    for flat, field in (({"dp": 2, "ep": 2, "zero": 3, "offload": "params"}, "plan.strategy.offload"),
                        ({"dp": 2, "dp_sync": "param-server", "moe_routing": "round-robin"},
                         "plan.strategy.moe_routing")):
        ps = flat.get("dp_sync") == "param-server"  # lays out over every GPU of its cluster
        plan = Plan(model=MIXTRAL, cluster=load_cluster("localhost-cpu") if ps else cluster, gpus=2,
                    strategy=strategy_from_flat({"global_batch": 8} | flat))
        with pytest.raises(SpecError) as err:
            family_spec(plan.layout()).check(plan, plan.layout())
        assert err.value.field == field and "\n" not in str(err.value)
    with pytest.raises(SpecError, match="capacity_factor"):
        build_gpt(replace(TOP1, moe=replace(TOP1.moe, capacity_factor=1.25)))


@pytest.mark.parametrize("model, flat, needle", [
    ("deepseek-v2-lite", {"dp": 2, "ep": 2}, "model: deepseek-v2-lite-tiny has latent attention"),
    ("mixtral-8x7b", {"dp": 2, "ep": 2, "zero": 3, "offload": "params"}, "plan.strategy.offload: params with ep 2"),
])
def test_execute_refuses_before_launch_in_one_line(tmp_path, capsys, model, flat, needle):
    from trainplan.__main__ import main

    path = tmp_path / "plan.json"
    Plan(model=get_preset(model), cluster=load_cluster("dgx-h100"), gpus=2,
         strategy=strategy_from_flat({"global_batch": 8} | flat)).save(path)
    assert main(["execute", str(path), "--scale", "tiny"]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_execute_writes_the_ep_phase_and_validate_sets_it_beside_the_estimate(tmp_path, capsys):
    """The whole path: a planned Mixtral dp 16 ep 8 plan run tiny on 2 processes (dp 2, ep 2), its results
    file (the ep phase, how it was measured, the expert-parallel component), and `validate`'s ep row and
    model-state bytes, which equal the memory model's."""
    import json

    from trainplan.__main__ import main

    plan, out = tmp_path / "plan.json", tmp_path / "results.json"
    Plan(model=MIXTRAL, cluster=load_cluster("dgx-h100", nodes=2), gpus=16,
         strategy=strategy_from_flat({"global_batch": 32, "micro_batch": 1, "dp": 16, "ep": 8})).save(plan)
    assert main(["execute", str(plan), "--nproc", "2", "--scale", "tiny", "--steps", "2", "--precision", "fp32",
                 "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert "ep 8→2" in " ".join(results["run"]["notes"])
    assert "all-to-all" in results["run"]["phases"]["ep"] and "ep=2" in results["run"]["components"]["expert parallel"]
    assert all(min(r["phases_s"]["ep"]) > 0 for r in results["ranks"])
    capsys.readouterr()
    assert main(["validate", str(out), "--cluster", "localhost-cpu"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "ep" in rows and "+0.00%" in rows["model_state_bytes"]
