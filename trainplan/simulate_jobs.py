"""``trainplan simulate --jobs JOBS.yaml``: several jobs on one cluster, each one's step alone and together.

    trainplan simulate --jobs JOBS.yaml [--job-placement packed|scattered] [--steps N] [--json]

Reads the jobs file (:mod:`simulator.jobs_file`), runs :func:`simulator.engine.jobs.simulate_jobs` and
prints one row per job and its link time per tier. The model, cluster and strategy come from the file,
so their flags are refused with it; the DES is the engine.
"""

from __future__ import annotations

import argparse

from simulator.checks import positive_int
from simulator.cluster.placement import PlacementPolicy
from simulator.errors import SpecError
from trainplan import cli_common
from trainplan.strategy_flags import FLAG_OF, strategy_keys

_NOT_WITH_JOBS = ("plan", "model", "cluster", "nodes", "gpus", "seq", "profile", "trace", "plot", "save_plan",
                  "train_steps", "param_fetch")


def run(args: argparse.Namespace) -> int:
    from simulator.engine.jobs import simulate_jobs
    from simulator.jobs_file import load_jobs

    _refuse_flags(args)
    steps = 1 if args.steps is None else positive_int("--steps", args.steps)
    policy = PlacementPolicy(args.job_placement) if args.job_placement else None
    try:
        spec = load_jobs(args.jobs, policy)
        result = simulate_jobs(spec.cluster, list(spec.jobs), steps=steps)
    except SpecError as err:
        if err.field.startswith("--"):
            raise
        raise SpecError("--jobs", f"{args.jobs}: {err}") from None
    if args.json:
        cli_common.print_json({"cluster": spec.cluster.name, "nodes": spec.cluster.nodes,
                               "placement": spec.placement.value if spec.placement else "listed"}
                              | result.to_dict())
    else:
        print(format_jobs(spec, result))
    return 0


def _refuse_flags(args) -> None:
    for name in _NOT_WITH_JOBS:
        if getattr(args, name, None) is not None:
            raise cli_common.UsageError(f"--{name.replace('_', '-')}: the jobs file gives each job's model, the "
                                        "cluster and the strategies; drop it, or drop --jobs")
    given = list(strategy_keys(args)) + (["straggler"] if args.straggler else [])
    if given:
        flag = FLAG_OF.get(given[0], f"--{given[0]}")
        raise cli_common.UsageError(f"{flag}: with --jobs, strategy keys go in each job of the file")
    if args.engine == "analytical":
        raise cli_common.UsageError("--engine analytical: several jobs share links only in the discrete-event "
                                    "engine; drop --engine")


def format_jobs(spec, result) -> str:
    """A header, one row per job (alone, together, slowdown), then each co-simulated job's link time per tier."""
    c, net = spec.cluster, spec.cluster.network
    spine = (f"{net.nodes_per_leaf or c.nodes} nodes per leaf, {net.leaf_uplinks.value} uplinks "
             f"{net.oversubscription:g}:1") if net is not None else "one node"
    where = spec.placement.value if spec.placement else "listed nodes"
    lines = [f"{len(result.jobs)} jobs on {c.name} ({c.nodes} nodes, {spine}); placement {where}; "
             f"{result.steps} step{'s' if result.steps != 1 else ''} each",
             f"{'job':<12} {'GPUs':>5} {'alone s':>10} {'together s':>11} {'slowdown':>9}  nodes / shares links with"]
    for j in result.jobs:
        shares = ", ".join(j.shares_with) if j.shares_with else "nobody (simulated alone)"
        lines.append(f"{j.name:<12} {j.gpus:>5} {j.alone_step_s:>10.4f} {j.together_step_s:>11.4f} "
                     f"{j.slowdown:>8.3f}x  {_nodes(j.nodes)} / {shares}")
    tiers = [j for j in result.jobs if j.tiers]
    if tiers:
        lines.append("link time per tier (sum of the job's flow times in its steps), alone -> together:")
        for j in tiers:
            parts = [f"{t.tier.value} {t.alone_s:.4f} -> {t.together_s:.4f} s ({t.slowdown:.2f}x)" for t in j.tiers]
            lines.append(f"  {j.name:<10} " + "; ".join(parts))
    return "\n".join(lines)


def _nodes(nodes: tuple[int, ...]) -> str:
    text = ",".join(map(str, nodes))
    return text if len(text) <= 24 else text[:21] + "..."
