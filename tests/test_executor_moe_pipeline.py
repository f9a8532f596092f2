"""Mixture-of-experts layers inside pipeline stages, with expert parallelism (ep × pp; issue 14 §4).

Four gloo ranks, pp 2 × dp 2: each stage's MoE layers exchange tokens over the ep group of that stage's two
dp ranks (ep 2) and reduce the experts' gradients over the stage's expert-data-parallel group (one rank
here: every rank holds half of its stage's experts), the dense gradients over dp
(executor/strategies/stage_experts.py). The tiny presets (``--scale tiny``: Mixtral 8 experts top-2, its
top-1 variant, Qwen1.5-MoE 60 experts top-4 with a gated shared expert) train 3 AdamW steps, fp32, under
GPipe, 1F1B and interleaved 1F1B (torch.distributed.pipelining running the simulator's action lists),
and are compared with one process on the whole global batch (executor.reference). Tolerance 1e-5
relative on the loss and the gradient norm: the same float32 sums in another order; an expert gradient
not divided by dp, or the experts left out of the dp average at ep 1, moves the norm or the second
step's loss far more. Model-state bytes per rank are the memory model's (``simulator.memory``: the stage's
dense tensors over dp, its E/ep experts over the expert-data-parallel group), byte for byte.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from moe_runs import STEPS, assert_matches_one_process, expected_states, launch_plans, tiny_plan
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.plan_file import Plan
from simulator.strategy import Framework, ZeroStage
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import get_preset

pytestmark = pytest.mark.multiproc

MIXTRAL = get_preset("mixtral-8x7b")
TOP1 = replace(MIXTRAL, name="mixtral-top1", moe=replace(MIXTRAL.moe, top_k=1))
QWEN = get_preset("qwen1.5-moe-a2.7b")
TOL = 1e-5
WORLD = 4

PLANS = {
    "mixtral top-2 ep2 gpipe": (MIXTRAL, {"ep": 2, "schedule": "gpipe"}),
    "mixtral top-2 ep2 1f1b": (MIXTRAL, {"ep": 2, "schedule": "1f1b"}),
    "top-1 ep2 gpipe": (TOP1, {"ep": 2, "schedule": "gpipe"}),
    "top-1 ep2 1f1b": (TOP1, {"ep": 2, "schedule": "1f1b"}),
    "qwen top-4 shared ep2 1f1b round-robin": (QWEN, {"ep": 2, "schedule": "1f1b", "moe_routing": "round-robin"}),
    "mixtral top-2 ep2 1f1b zero3": (MIXTRAL, {"ep": 2, "schedule": "1f1b", "zero": 3, "framework": "fsdp2"}),
    "mixtral top-2 ep2 interleaved": (MIXTRAL, {"ep": 2, "schedule": "interleaved", "virtual_stages": 2}),
    "mixtral top-2 ep1 1f1b": (MIXTRAL, {"schedule": "1f1b"}),  # experts replicated: averaged over dp with the rest
}


def _plan(model, flat: dict):
    """4 micro-batches per pipeline."""
    return tiny_plan(model, WORLD, {"global_batch": 8, "micro_batch": 1, "dp": 2, "pp": 2} | flat)


class _LayerLog:
    """Stands in for a MoE layer's clock: logs which layer issued each all-to-all, then runs it timed."""

    def __init__(self, layer: int, clock, log: list):
        self.layer, self.clock, self.log = layer, clock, log

    def all_to_all(self, *args):
        self.log.append(self.layer)
        self.clock.all_to_all(*args)


def _rank(rank: int, world: int, plans: tuple) -> list:
    from executor.moe import moe_layers
    from moe_runs import build_runner, train_record

    out = []
    for plan in plans:
        ctx, runner = build_runner(plan, rank, world)
        issued: list[int] = []  # the model layer of each all-to-all this rank issued (every layer is MoE here)
        for stage, first in zip(runner.modules, _first_layers(ctx.layout, runner.coord.pp)):
            for i, moe in enumerate(moe_layers(stage)):
                if moe.ep is not None:
                    moe.clock = _LayerLog(first + i, moe.clock, issued)
        out.append(train_record(runner) | {"issued": issued, "coord": (runner.coord.dp, runner.coord.pp)})
    return out


def _first_layers(layout, pp_rank: int) -> list[int]:
    """First model layer of each stage pp rank ``pp_rank`` holds (its MoE layers follow in order)."""
    return [sum(layout.layers_per_stage[:s]) for s in range(pp_rank, layout.pp * layout.v, layout.pp)]


@pytest.fixture(scope="module")
def launch():
    return launch_plans(_rank, {name: _plan(model, flat) for name, (model, flat) in PLANS.items()}, WORLD)


def test_losses_and_gradient_norms_match_one_process(launch):
    plans, per_rank = launch
    for name, plan in plans.items():
        assert plan.layout().pp == 2 and plan.layout().dp == 2, name
    assert_matches_one_process(plans, per_rank, TOL)


def test_ep_peers_issue_the_same_all_to_alls_in_the_same_order(launch):
    """The two dp ranks of a stage (its ep group) log the same sequence of (MoE layer) all-to-alls: 4 per
    layer and micro-batch (counts, dispatch, combine; combine's backward and dispatch's backward), plus
    torch's first-step metadata inference."""
    plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        if plan.layout().ep == 1:
            assert all(not got[i]["issued"] for got in per_rank), name
            continue
        by_stage: dict[int, list] = {}
        for got in per_rank:
            by_stage.setdefault(got[i]["coord"][1], []).append(got[i]["issued"])
        m = plan.layout().micro_batches
        for pp_rank, (a, b) in by_stage.items():
            assert a == b, (name, pp_rank)
            assert len(a) >= STEPS * m * 5, (name, pp_rank, len(a))  # counts + 2 forward + 2 backward


def test_the_all_to_all_is_its_own_phase(launch):
    plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        ep = plan.layout().ep
        for got in per_rank:
            assert ("ep" in got[i]["phases"]) == (ep > 1), name
            assert {"forward", "backward", "pp", "bubble"} <= set(got[i]["phases"]), name
            if ep > 1:
                assert all(s > 0 for s in got[i]["ep_s"]), name
                assert "inside each pipeline stage" in got[i]["components"]["expert parallel"], name
            assert got[i]["components"]["moe routing"].startswith(plan.strategy.moe_routing.value), name


def test_model_state_bytes_equal_the_memory_model_per_rank(launch):
    """The rank's stage (simulator.memory.shapes.stage_param_shapes at its pp rank and layers): dense tensors
    over dp (FSDP2: dim-0 padded shards), the stage's E/ep experts over the expert-data-parallel group."""
    plans, per_rank = launch
    for i, (name, plan) in enumerate(plans.items()):
        layout, zero = plan.layout(), plan.strategy.zero
        framework = Framework.FSDP2 if zero >= ZeroStage.ZERO2 else Framework.TORCH_DDP
        for rank, got in enumerate(per_rank):
            states = got[i]["states"]
            assert (states["params_bytes"], states["grads_bytes"], states["optimizer_bytes"]) == expected_states(
                plan.model, layout, rank, zero, framework), (name, rank)


def test_expert_parallelism_with_tp_and_pp_passes_the_checks_but_not_with_zero_1():
    """ep × tp × pp is checked as runnable (tests/test_executor_moe_tp.py runs tp × pp and ep × tp on 4 ranks);
    ZeRO-1 with tp (no family runs it) stays a one-line refusal naming the field."""
    from executor.strategies import load_families
    from executor.strategies.base import family_spec

    load_families()
    cluster = load_cluster("dgx-h100")
    for flat, field in (({"dp": 2, "ep": 2, "tp": 2}, None), ({"dp": 2, "ep": 2, "tp": 2, "pp": 2}, None),
                        ({"pp": 2, "tp": 2, "sequence_parallel": True}, None),
                        ({"dp": 2, "tp": 2, "ep": 2, "zero": 3}, None),
                        ({"dp": 2, "tp": 2, "ep": 2, "zero": 1}, "plan.strategy.zero")):
        gpus = flat.get("dp", 1) * flat["tp"] * flat.get("pp", 1)
        plan = Plan(model=MIXTRAL, cluster=cluster, gpus=gpus, strategy=strategy_from_flat({"global_batch": 8} | flat))
        if field is None:
            family_spec(plan.layout()).check(plan, plan.layout())
            continue
        with pytest.raises(SpecError) as err:
            family_spec(plan.layout()).check(plan, plan.layout())
        assert err.value.field == field and "\n" not in str(err.value), flat
    plan = _plan(MIXTRAL, {"ep": 2, "schedule": "1f1b"})
    family_spec(plan.layout()).check(plan, plan.layout())  # ep × pp runs
