"""What the MoE executor tests share: build a plan's runner on one gloo rank, train it a few steps and record
what the tests compare (losses, gradient norms, the ep phase, model-state bytes), and the one-process reference
run the losses must match. Imported by the test modules and by their rank processes (tests/ is on sys.path)."""

from __future__ import annotations

from dataclasses import asdict
from functools import cache

STEPS = 3
"""Optimizer steps of every MoE executor run and of its one-process reference."""


def tiny_plan(model, world: int, keys: dict):
    """The plan of flat strategy ``keys`` for ``model`` on ``world`` dgx-h100 GPUs, as run at ``--scale tiny``."""
    from simulator.cluster.io import load_cluster
    from simulator.plan_file import Plan
    from simulator.plan_scale import Scale, scale_plan
    from simulator.strategy.flat import strategy_from_flat

    plan = Plan(model=model, cluster=load_cluster("dgx-h100"), gpus=world, strategy=strategy_from_flat(keys))
    return scale_plan(plan, Scale.parse("tiny"), world).run


class IssueLog:
    """Stands in for a MoE layer's clock: logs (layer, rows sent) of each all-to-all, then runs it timed; anything
    else (the tp gathers, ``EpClock.timed``) goes to the clock unlogged."""

    def __init__(self, layer: int, clock, log: list):
        self.layer, self.clock, self.log = layer, clock, log

    def all_to_all(self, out, x, out_splits, in_splits, group):
        self.log.append((self.layer, len(x)))
        self.clock.all_to_all(out, x, out_splits, in_splits, group)

    def __getattr__(self, name):
        return getattr(self.clock, name)


def build_runner(plan, rank: int, world: int):
    """(context, runner) of ``plan``'s family on ``rank`` of ``world`` gloo ranks, fp32, seed 0."""
    from executor.run import build_context
    from executor.strategies import load_families
    from executor.strategies.base import Backend, Precision, family_spec

    load_families()
    ctx = build_context(plan, rank=rank, world=world, local_rank=rank, backend=Backend.GLOO, seed=0,
                        precision=Precision.FP32)
    return ctx, family_spec(ctx.layout).build(ctx)


def logged_runner(plan, rank: int, world: int):
    """(runner, issued, MoE layers): ``plan``'s runner with each expert-parallel MoE layer's all-to-alls logged
    into ``issued`` as (layer index, rows sent)."""
    from executor.moe import moe_layers

    _, runner = build_runner(plan, rank, world)
    issued: list = []
    layers = moe_layers(runner.model)
    for i, moe in enumerate(layers):
        if moe.ep is not None:
            moe.clock = IssueLog(i, moe.clock, issued)
    return runner, issued, layers


def launch_plans(rank_fn, plans: dict, world: int):
    """(plans, per-rank results): ``rank_fn(rank, world, plans)`` on ``world`` gloo ranks over every plan."""
    from executor.launch import run

    return plans, run(rank_fn, world, args=(tuple(plans.values()),), backend="gloo", timeout_s=600.0)


def train_record(runner) -> dict:
    """Train :data:`STEPS` steps; the losses, gradient norms, ep phase seconds, phase names of the first step,
    model-state bytes and components of the run."""
    from executor.strategies.base import Phase

    records = [runner.train_step(step) for step in range(STEPS)]
    return {"loss": [r.loss for r in records], "norm": [r.grad_norm for r in records],
            "ep_s": [r.phases_s.get(Phase.EP) for r in records],
            "phases": sorted(p.value for p in records[0].phases_s),
            "states": asdict(runner.model_state_bytes()), "components": runner.components()}


@cache
def moe_reference(spec, routing, micro_batch: int):
    """(losses, gradient norms) of one process on the whole batch of 8 (several plans share a model); round-robin
    routing reads each token's index in its micro-batch, so it runs the plan's micro-batch."""
    from executor.reference import reference_run
    from simulator.workload.moe_routing import Routing

    return reference_run(spec, seed=0, steps=STEPS, global_batch_size=8, moe_routing=routing,
                         micro_batch=micro_batch if routing is Routing.ROUND_ROBIN else 1)


def expected_states(model, layout, rank: int, zero, framework) -> tuple[float, float, float]:
    """(parameters at rest, gradients, optimizer + step tensors) the memory model gives ``rank`` of ``layout``
    in fp32: its stage's dense tensors over dp·cp, the routed experts (ep > 1) over the (dp/ep)·cp ranks holding
    them (``ParallelLayout.expert_dp_group``, ``rank``'s place in it) — what a MoE executor run's
    ``model_state_bytes`` must equal byte for byte."""
    from simulator.memory.moe import add_states, split_experts
    from simulator.memory.shapes import stage_param_shapes
    from simulator.memory.states import model_state_bytes
    from simulator.workload import DtypePolicy

    c = layout.coords(rank)
    shapes = stage_param_shapes(model, tp=layout.tp, pp=layout.pp, stage=c.pp, layers=layout.layer_indices(c.pp),
                                ep=layout.ep)
    dense, experts = split_experts(shapes) if layout.ep > 1 else (shapes, [])
    states = model_state_bytes(dense, dp=layout.dp_cp, zero=zero, dtype=DtypePolicy.FP32, framework=framework,
                               rank=c.dp)
    if experts:
        holders = layout.expert_dp_group(c.pp, c.tp, c.dp)
        states = add_states(states, model_state_bytes(experts, dp=len(holders), zero=zero, dtype=DtypePolicy.FP32,
                                                      framework=framework, rank=holders.index(rank)))
    return states.params_at_rest_bytes, states.grads_bytes, states.optimizer_bytes + states.optimizer_step_bytes


def assert_matches_one_process(plans: dict, per_rank: list, rel: float) -> None:
    """Every rank's losses and gradient norms equal the one-process reference's (:func:`moe_reference`) within
    ``rel``, and the reference's losses move (the steps train)."""
    import pytest

    for i, (name, plan) in enumerate(plans.items()):
        want_loss, want_norm = moe_reference(plan.model, plan.strategy.moe_routing, plan.strategy.micro_batch)
        for rank, got in enumerate(per_rank):
            assert got[i]["loss"] == pytest.approx(want_loss, rel=rel), (name, rank)
            assert got[i]["norm"] == pytest.approx(want_norm, rel=rel), (name, rank)
        assert want_loss[0] != want_loss[1], name
