"""The flags every strategy-taking command shares, derived from the strategy's field declarations.

``add_job_flags`` adds the model, cluster and GPU count; ``add_strategy_flags`` adds one flag per
declared field that has one (:mod:`simulator.strategy.fields`), with its help and its default;
``build_job`` turns them into checked inputs — workload, cluster, strategy (under a ``--profile``'s
defaults) and the one :class:`~simulator.strategy.ParallelLayout` that memory, compile, both
engines, the planner and the executor consume. Every error names the flag the user typed
(``global_batch`` → ``--gbs``).

Sizing: ``--gpus`` counts worker GPUs (dp·tp·pp). The cluster gets ``--nodes`` nodes, or just
enough for the workers plus any dedicated parameter-server nodes. A job smaller than one node
uses part of it; a larger job uses whole nodes.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass
from enum import Enum
from math import ceil

from simulator.cluster.io import load_cluster
from simulator.checks import positive_int
from simulator.errors import SpecError
from simulator.profiles import apply_profile
from simulator.schedules import ScheduleKind
from simulator.strategy import ParallelLayout, ParamServerSync, Strategy, build_layout
from simulator.strategy.fields import FlagKind
from simulator.strategy.spec import DEFAULT_INTERLEAVED_V
from simulator.strategy.flat import FLAT, flat_keys, strategy_from_flat
from trainplan import stragglers

DEFAULT_CLUSTER = "dgx-a100"
"""The cluster every command uses when ``--cluster`` is not given (said in ``--help`` and in the header)."""
JOB_FLAGS = {"model": "--model", "seq": "--seq", "nodes": "--nodes", "gpus": "--gpus", "cluster": "--cluster",
             "profile": "--profile"}
"""Inputs that are not strategy fields → their flags."""
FLAG_OF = JOB_FLAGS | {k.key: k.decl.flag.name for k in FLAT.values() if k.decl.flag is not None}
"""Flat key → the flag that sets it (derived from the declarations), so an error names what the user typed."""


@dataclass(frozen=True)
class Job:
    """The checked inputs of a strategy-taking command."""

    workload: object
    cluster: object
    strategy: Strategy
    layout: ParallelLayout


def flag_error(err: SpecError) -> SpecError:
    """``err`` with its field replaced by the flag that sets it (``global_batch`` → ``--gbs``)."""
    base = err.field.split("[")[0].split(".")[0]
    return SpecError(FLAG_OF[base], err.problem) if base in FLAG_OF else err


def add_job_flags(parser, *, params: bool = False, plan: bool = False) -> None:
    """``--model`` (or ``--params`` with ``params``), ``--cluster``, ``--nodes``, ``--gpus``, ``--seq``;
    with ``plan``, ``--plan FILE`` instead of all of them (checked by :func:`job_from_plan`)."""
    g = parser.add_argument_group("workload and cluster")
    if plan:
        g.add_argument("--plan", metavar="PLAN.json", help="a plan file: its model, cluster, GPUs and strategy "
                                                           "instead of the flags")
    g.add_argument("--model", metavar="NAME|config.json", required=not (params or plan),
                   help="model preset, Hugging Face config.json or layer-list file")
    if params:
        g.add_argument("--params", help="a bare parameter count instead of --model (7.5e9, 7.5B): model states only")
    g.add_argument("--cluster", metavar="NAME|FILE", help=f"cluster preset or file (default: {DEFAULT_CLUSTER})")
    g.add_argument("--nodes", type=int, metavar="N", help="nodes (default: enough for --gpus plus PS nodes)")
    g.add_argument("--gpus", type=int, required=not plan, metavar="G", help="worker GPUs, = dp·tp·pp")
    g.add_argument("--seq", type=int, metavar="S", help="sequence length (default: the model's)")


def _default_text(f) -> str:
    value = f.default if f.default is not MISSING else (f.default_factory() if f.default_factory is not MISSING
                                                        else None)
    if isinstance(value, Enum):
        value = value.value
    return "none" if value is None else str(value)


def add_strategy_flags(parser, *, gbs_required: bool = True, gbs_default: str | None = None, cls=Strategy) -> None:
    """One flag per declared field of ``cls`` that has one, grouped by record, defaults in the help.

    ``gbs_required``: argparse enforces ``--gbs`` (False where a default exists or ``--plan`` replaces it).
    """
    from dataclasses import fields

    groups: dict[str, argparse._ArgumentGroup] = {}
    seen: set[str] = set()
    for k in flat_keys(cls).values():
        flag = k.decl.flag
        if flag is None or flag.name in seen:
            continue
        seen.add(flag.name)
        record = k.record.__name__ if k.record else "parallelism, batch and memory"
        group = groups.setdefault(record, parser.add_argument_group(record))
        owner = k.record or cls
        default = flag.default_help or _default_text(next(f for f in fields(owner) if f.name == k.attr))
        if k.key == "global_batch" and gbs_default:
            default = gbs_default
        if flag.kind is FlagKind.CUSTOM:
            group.add_argument(flag.name, dest=flag.name.lstrip("-").replace("-", "_"), action="append", default=[],
                               metavar=flag.metavar, help=flag.help)
        elif flag.kind is FlagKind.SWITCH:
            group.add_argument(flag.name, dest=k.key, action=argparse.BooleanOptionalAction,
                               help=f"{flag.help} (default: {'on' if default == 'True' else 'off'})")
        else:
            required = k.key == "global_batch" and gbs_required
            shown = "" if required or (k.key == "global_batch" and not gbs_default) else f" (default: {default})"
            group.add_argument(flag.name, *flag.aliases, dest=k.key, metavar=flag.metavar, choices=flag.choices,
                               required=required, help=flag.help + shown)


def strategy_keys(args, cls=Strategy) -> dict:
    """The flat strategy keys of the flags the user gave (a flag left out leaves the key to the profile)."""
    keys: dict = {}
    for k in flat_keys(cls).values():
        flag = k.decl.flag
        if flag is None or flag.kind is FlagKind.CUSTOM or k.key == "profile":
            continue
        value = getattr(args, k.key, None)
        if value is not None:
            keys[k.key] = flag.from_flag(value) if flag.from_flag else value
    if keys.get("schedule") == ScheduleKind.INTERLEAVED.value and "virtual_stages" not in keys:
        keys["virtual_stages"] = DEFAULT_INTERLEAVED_V
    if "ps_mode" in keys:
        keys["dp_sync"] = "param-server"
    return keys


def build_strategy(args, world: int, global_batch: int | None = None) -> Strategy:
    """The :class:`Strategy` of the parsed flags over ``world`` worker GPUs (profile defaults underneath)."""
    try:
        keys = strategy_keys(args) | stragglers.straggler_keys(args.straggler, world)
    except SpecError as err:
        raise flag_error(err) from None
    if global_batch is not None and "global_batch" not in keys:
        keys["global_batch"] = global_batch
    try:
        return apply_profile(args.profile, **keys) if args.profile else strategy_from_flat(keys)
    except SpecError as err:
        raise flag_error(err) from None


def sized_cluster(base, gpus: int, nodes: int | None, server_nodes: int):
    """``base`` with ``nodes`` nodes (default: enough for ``gpus`` workers plus the server nodes)."""
    positive_int("--gpus", gpus)
    gpn = base.node.gpus_per_node
    if gpus > gpn and gpus % gpn:
        raise SpecError("--gpus", f"{gpus} is not a whole number of {gpn}-GPU {base.name} nodes; use a multiple of "
                        f"{gpn}, or at most {gpn} for part of one node")
    need = ceil(gpus / gpn) + server_nodes
    nodes = need if nodes is None else nodes
    positive_int("--nodes", nodes)
    if nodes != need:
        extra = f" plus {server_nodes} server node(s)" if server_nodes else ""
        raise SpecError("--nodes", f"{nodes} nodes do not match --gpus {gpus}{extra} on {gpn}-GPU nodes; use "
                        f"--nodes {need} or leave it out")
    return base.with_nodes(nodes)


def load_workload(args):
    """The model of ``--model`` with ``--seq`` applied; errors name the flag."""
    from simulator.workload import load_model

    try:
        workload = load_model(args.model)
    except SpecError as err:
        raise SpecError("--model", str(err)) from None
    if args.seq is not None:
        positive_int("--seq", args.seq)
        if not hasattr(workload, "with_seq"):
            raise SpecError("--seq", "this workload has no sequence length to change; leave --seq out")
        workload = workload.with_seq(args.seq)
    return workload


def cluster_of(args):
    """The cluster of ``--cluster`` (default :data:`DEFAULT_CLUSTER`) as the file or preset says; errors name the flag."""
    try:
        return load_cluster(args.cluster or DEFAULT_CLUSTER)
    except SpecError as err:
        raise SpecError("--cluster", str(err)) from None


def build_job(args, workload=None, global_batch: int | None = None) -> Job:
    """(workload, cluster, strategy, layout) from the parsed flags, checked; errors name the flag."""
    workload = load_workload(args) if workload is None else workload
    base = cluster_of(args)
    positive_int("--gpus", args.gpus)
    strategy = build_strategy(args, args.gpus, global_batch)
    sync = strategy.dp_sync
    cluster = sized_cluster(base, args.gpus, args.nodes, sync.server_nodes if isinstance(sync, ParamServerSync) else 0)
    try:
        gpus = None if isinstance(sync, ParamServerSync) else args.gpus
        layout = build_layout(strategy, cluster, workload, gpus=gpus)
    except SpecError as err:
        raise flag_error(err) from None
    return Job(workload, cluster, strategy, layout)


def job_from_plan(args) -> Job:
    """The job a ``--plan`` file describes; giving model, cluster or strategy flags with it is an error
    (the file already says them, and two sources would silently disagree)."""
    from simulator.plan_file import load_plan

    given = [f for f, v in (("--model", args.model), ("--cluster", args.cluster), ("--nodes", args.nodes),
                            ("--gpus", args.gpus), ("--seq", args.seq), ("--profile", args.profile)) if v is not None]
    given += [FLAG_OF[k] for k in strategy_keys(args)] + (["--straggler"] if args.straggler else [])
    if given:
        raise SpecError(given[0], "the plan file already gives the model, cluster, GPUs and strategy; drop it, "
                        "or drop --plan")
    try:
        plan = load_plan(args.plan)
    except SpecError as err:
        raise SpecError("--plan", str(err)) from None
    return Job(plan.model, plan.cluster, plan.strategy, plan.layout())
