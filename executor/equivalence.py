"""Does the executor train the same model? Per-step losses of plans run on gloo vs one process.

``distributed_losses(plans, nproc=2, steps=3)`` runs every plan (each already laid out for
``nproc`` ranks, e.g. by :func:`simulator.plan_scale.scale_plan`) in one set of ``nproc`` gloo
processes (:func:`executor.launch.run`, which also reports a failing rank), fp32, and returns each
plan's loss and gradient norm per step as rank 0 saw them; :func:`executor.reference.reference_run`
gives the single-process ones of the same model, init, data and AdamW. They agree to floating-point
tolerance when the strategy trains the same model: the same gradients, summed in another order.
"""

from __future__ import annotations

from executor.launch import run
from executor.strategies import load_families
from executor.strategies.base import Backend, Precision, family_spec


def _rank_losses(rank: int, world: int, plans: tuple, steps: int, seed: int) -> list:
    from executor.run import build_context

    load_families()
    out = []
    for plan in plans:
        ctx = build_context(plan, rank=rank, world=world, local_rank=rank, backend=Backend.GLOO, seed=seed,
                            precision=Precision.FP32)
        runner = family_spec(ctx.layout).build(ctx)
        records = [runner.train_step(step) for step in range(steps)]
        out.append(([r.loss for r in records], [r.grad_norm for r in records]))
    return out


def distributed_losses(plans, *, nproc: int, steps: int = 3,
                       seed: int = 0) -> list[tuple[list[float], list[float | None]]]:
    """Per plan, (loss, gradient norm) of each step (equal on every rank: checked), fp32 on ``nproc`` gloo ranks."""
    load_families()
    for plan in plans:
        family_spec(plan.layout()).check(plan, plan.layout())
    per_rank = run(_rank_losses, nproc, args=(tuple(plans), steps, seed), backend="gloo", timeout_s=600.0)
    for r, losses in enumerate(per_rank[1:], start=1):
        if losses != per_rank[0]:
            raise AssertionError(f"rank {r} reports other losses than rank 0: {losses} vs {per_rank[0]}")
    return per_rank[0]
