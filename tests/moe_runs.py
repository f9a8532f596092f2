"""What the MoE executor tests share: build a plan's runner on one gloo rank, train it a few steps and record
what the tests compare (losses, gradient norms, the ep phase, model-state bytes), and the one-process reference
run the losses must match. Imported by the test modules and by their rank processes (tests/ is on sys.path)."""

from __future__ import annotations

from dataclasses import asdict
from functools import cache

STEPS = 3
"""Optimizer steps of every MoE executor run and of its one-process reference."""


def build_runner(plan, rank: int, world: int):
    """(context, runner) of ``plan``'s family on ``rank`` of ``world`` gloo ranks, fp32, seed 0."""
    from executor.run import build_context
    from executor.strategies import load_families
    from executor.strategies.base import Backend, Precision, family_spec

    load_families()
    ctx = build_context(plan, rank=rank, world=world, local_rank=rank, backend=Backend.GLOO, seed=0,
                        precision=Precision.FP32)
    return ctx, family_spec(ctx.layout).build(ctx)


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
