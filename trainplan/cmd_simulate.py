"""``trainplan simulate``: estimate one training step of a strategy on a cluster (docs/cli.md).

    trainplan simulate --model M --cluster C [--nodes N] --gpus G --dp D --tp T --pp P --gbs GB
        [--zero Z] [--mbs B] [--seq S] [--schedule gpipe|1f1b|interleaved --virtual-stages V]
        [--recompute none|selective|full] [--sp] [--dp-algorithm ALGO] [--bucket-mb X] [--no-overlap]
        [--param-server sync|async --servers K [--staleness S]] [--straggler SPEC ...]
        [--mtbf-hours H --checkpoint-every N --checkpoint-cost S --restart-cost S]
        [--profile NAME] [--engine analytical|des] [--trace FILE.json] [--plot FILE.png] [--json]

Flags become flat strategy keys (:mod:`simulator.strategy.flat`); a ``--profile`` supplies defaults
and every flag given overrides it. ``--gpus`` counts worker GPUs (dp·tp·pp); the cluster gets
``--nodes`` nodes, or just enough for the workers plus any dedicated parameter-server nodes.
Every bad input is one line naming the flag, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from math import ceil

from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.profiles import apply_profile, profile_names
from simulator.schedules import ScheduleKind
from simulator.strategy import (AllReduceAlgorithm, DataSource, Offload, PlacementOrder, Recompute, Strategy,
                                build_layout)
from simulator.strategy.flat import strategy_from_flat
from simulator.strategy.sync import ParamServerSync
from simulator.workload import load_model
from trainplan import cli_common

MiB = 1024 * 1024
"""``--bucket-mb`` counts MiB, as torch's ``bucket_cap_mb`` (bucket_cap_mb · 1024 · 1024 bytes)."""

DEFAULT_INTERLEAVED_V = 2
"""Virtual stages per rank when ``--schedule interleaved`` comes without ``--virtual-stages`` (as ``memory``)."""

FLAG_OF = {
    "global_batch": "--gbs", "micro_batch": "--mbs", "dp": "--dp", "tp": "--tp", "pp": "--pp", "zero": "--zero",
    "offload": "--offload", "placement": "--placement", "schedule": "--schedule",
    "virtual_stages": "--virtual-stages", "layer_split": "--pp", "recompute": "--recompute",
    "sequence_parallel": "--sp", "allreduce_algorithm": "--dp-algorithm", "bucket_bytes": "--bucket-mb",
    "bucket_params": "--bucket-mb", "overlap_grad_reduce": "--no-overlap", "ps_mode": "--param-server",
    "staleness_steps": "--staleness", "ps_shards": "--servers", "ps_server_nodes": "--server-nodes",
    "speed_factors": "--straggler", "slowdown_prob": "--straggler", "slowdown_factor": "--straggler",
    "seed": "--seed", "mtbf_gpu_hours": "--mtbf-hours", "checkpoint_interval_steps": "--checkpoint-every",
    "checkpoint_cost_s": "--checkpoint-cost", "restart_cost_s": "--restart-cost",
    "bytes_per_sample": "--bytes-per-sample", "data_source": "--data-source", "model": "--model", "seq": "--seq",
    "nodes": "--nodes", "gpus": "--gpus", "profile": "--profile", "cluster": "--cluster",
}
"""Strategy field → the flag that sets it, so an error names what the user typed."""

FAILURE_FLAGS = {"mtbf_hours": ("--mtbf-hours", "mtbf_gpu_hours"),
                 "checkpoint_every": ("--checkpoint-every", "checkpoint_interval_steps"),
                 "checkpoint_cost": ("--checkpoint-cost", "checkpoint_cost_s"),
                 "restart_cost": ("--restart-cost", "restart_cost_s")}
"""argparse dest → (flag, flat strategy key) of the failure model; all four or none."""


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="estimate one training step: time, tokens/s, MFU, breakdown",
                              description="Estimate one training step of a strategy on a cluster with the "
                                          "analytical engine (closed form, fast) or the discrete-event engine "
                                          "(timeline, contention, stragglers). See docs/cli.md.")
    w = p.add_argument_group("workload and cluster")
    w.add_argument("--model", required=True, metavar="NAME|config.json", help="model preset or HF config.json")
    w.add_argument("--cluster", required=True, metavar="NAME|FILE", help="cluster preset or file")
    w.add_argument("--nodes", type=int, metavar="N", help="nodes (default: enough for --gpus plus PS nodes)")
    w.add_argument("--gpus", type=int, required=True, metavar="G", help="worker GPUs, = dp·tp·pp")
    w.add_argument("--seq", type=int, metavar="S", help="sequence length (default: the model's)")
    s = p.add_argument_group("parallelism and batch")
    s.add_argument("--dp", type=int, metavar="D", help="data-parallel degree (default: G / (tp·pp))")
    s.add_argument("--tp", type=int, metavar="T", help="tensor-parallel degree (default 1)")
    s.add_argument("--pp", type=int, metavar="P", help="pipeline stages (default 1)")
    s.add_argument("--gbs", type=int, required=True, metavar="GB", help="global batch, sequences per step")
    s.add_argument("--mbs", type=int, metavar="B", help="micro-batch size, sequences (default 1)")
    s.add_argument("--placement", choices=[o.value for o in PlacementOrder], help="rank order, innermost first")
    s.add_argument("--schedule", choices=[k.value for k in ScheduleKind], help="pipeline schedule (default 1f1b)")
    s.add_argument("--virtual-stages", type=int, metavar="V",
                   help=f"chunks per rank for interleaved (default {DEFAULT_INTERLEAVED_V} with it)")
    s.add_argument("--sp", action=argparse.BooleanOptionalAction, help="sequence parallelism with tp")
    s.add_argument("--zero", choices=["0", "1", "2", "3"], help="ZeRO stage (default 0)")
    s.add_argument("--offload", choices=[o.value for o in Offload], help="ZeRO-Offload / Infinity")
    s.add_argument("--recompute", choices=[r.value for r in Recompute], help="activation recompute (default none)")
    g = p.add_argument_group("gradient synchronisation")
    g.add_argument("--dp-algorithm", choices=[a.value for a in AllReduceAlgorithm],
                   help="all-reduce algorithm (default auto)")
    g.add_argument("--bucket-mb", type=float, metavar="X", help="gradient bucket in MiB (default 25, as DDP)")
    g.add_argument("--overlap", dest="overlap", action=argparse.BooleanOptionalAction,
                   help="overlap gradient reduce with backward (default on; --no-overlap: after backward)")
    g.add_argument("--param-server", choices=["sync", "async"], help="a parameter server instead of all-reduce")
    g.add_argument("--servers", type=int, metavar="K", help="parameter-server shards (default 1)")
    g.add_argument("--server-nodes", type=int, metavar="N", help="dedicated PS nodes (default 0: colocated)")
    g.add_argument("--staleness", type=int, metavar="S", help="async PS staleness bound, steps (default none)")
    f = p.add_argument_group("input, stragglers, failures")
    f.add_argument("--bytes-per-sample", type=int, metavar="BYTES", help="input read per sample (default 0)")
    f.add_argument("--data-source", choices=[d.value for d in DataSource], help="where samples are read from")
    f.add_argument("--straggler", action="append", default=[], metavar="SPEC",
                   help="rank=R,factor=F: rank R computes F× slower; prob=P,factor=F: each rank is slowed F× "
                        "in a step with probability P (repeatable)")
    f.add_argument("--mtbf-hours", type=float, metavar="H", help="mean time between failures per GPU, hours")
    f.add_argument("--checkpoint-every", type=int, metavar="STEPS", help="steps between checkpoints")
    f.add_argument("--checkpoint-cost", type=float, metavar="SECONDS", help="seconds to write a checkpoint")
    f.add_argument("--restart-cost", type=float, metavar="SECONDS", help="seconds from a failure to training")
    e = p.add_argument_group("engine and output")
    e.add_argument("--profile", metavar="NAME", help=f"framework defaults: {', '.join(profile_names())}")
    e.add_argument("--engine", choices=["analytical", "des"], default="analytical",
                   help="analytical (closed form, default) or des (discrete-event, with a timeline)")
    e.add_argument("--seed", type=int, metavar="N", help="seed of random slowdowns and the DES (default 0)")
    e.add_argument("--steps", type=int, metavar="N", help="steps the DES runs (default 1)")
    e.add_argument("--trace", metavar="FILE.json", help="Chrome-trace JSON of the timeline (Perfetto); needs des")
    e.add_argument("--plot", metavar="FILE.png", help="Gantt chart of the timeline; needs des")
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def _flag_error(err: SpecError) -> SpecError:
    """``err`` with its field replaced by the flag that sets it (``global_batch`` → ``--gbs``)."""
    base = err.field.split("[")[0].split(".")[0]
    if base in FLAG_OF:
        return SpecError(FLAG_OF[base], err.problem)
    return err


def parse_straggler(text: str) -> dict[str, float]:
    """``rank=3,factor=1.5`` → {"rank": 3, "factor": 1.5}; ``prob=0.05,factor=2`` → {"prob": .05, "factor": 2}."""
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("rank", "factor", "prob"):
            raise SpecError("--straggler", f"cannot read {part!r} in {text!r}; write rank=R,factor=F or "
                            "prob=P,factor=F")
        try:
            out[key] = int(value) if key == "rank" else float(value)
        except ValueError:
            raise SpecError("--straggler", f"{key}={value!r} is not a number; write rank=3,factor=1.5") from None
    if "factor" not in out or ("rank" in out) == ("prob" in out):
        raise SpecError("--straggler", f"{text!r} needs factor=F and exactly one of rank=R or prob=P")
    return out


def straggler_keys(specs: list[str], world: int, seed: int | None) -> dict:
    """Flat straggler keys from ``--straggler`` specs: fixed per-rank factors and/or one random slowdown."""
    factors = [1.0] * world
    keys: dict = {} if seed is None else {"seed": seed}
    for spec in map(parse_straggler, specs):
        if "rank" in spec:
            rank = int(spec["rank"])
            if not 0 <= rank < world:
                raise SpecError("--straggler", f"rank {rank} is outside the {world} worker GPUs (0..{world - 1})")
            factors[rank] = spec["factor"]
        elif "slowdown_prob" in keys:
            raise SpecError("--straggler", "give one prob=P,factor=F random slowdown, not several")
        else:
            keys.update(slowdown_prob=spec["prob"], slowdown_factor=spec["factor"])
    if any(f != 1.0 for f in factors):
        keys["speed_factors"] = tuple(factors)
    return keys


def _failure_keys(args) -> dict:
    given = {dest: getattr(args, dest) for dest in FAILURE_FLAGS if getattr(args, dest) is not None}
    if given and len(given) < len(FAILURE_FLAGS):
        missing = [FAILURE_FLAGS[d][0] for d in FAILURE_FLAGS if d not in given]
        raise SpecError(missing[0], f"the failure model needs {', '.join(f for f, _ in FAILURE_FLAGS.values())} "
                        f"together; missing {', '.join(missing)}")
    return {FAILURE_FLAGS[d][1]: v for d, v in given.items()}


def strategy_keys(args) -> dict:
    """The flat strategy keys of the flags the user gave (a flag left out leaves the key to the profile)."""
    keys: dict = {"global_batch": args.gbs}
    for flag, key in (("mbs", "micro_batch"), ("dp", "dp"), ("tp", "tp"), ("pp", "pp"), ("zero", "zero"),
                      ("placement", "placement"), ("schedule", "schedule"), ("virtual_stages", "virtual_stages"),
                      ("offload", "offload"), ("recompute", "recompute"), ("sp", "sequence_parallel"),
                      ("dp_algorithm", "allreduce_algorithm"), ("overlap", "overlap_grad_reduce"),
                      ("servers", "ps_shards"), ("server_nodes", "ps_server_nodes"),
                      ("staleness", "staleness_steps"), ("bytes_per_sample", "bytes_per_sample"),
                      ("data_source", "data_source")):
        if getattr(args, flag) is not None:
            keys[key] = getattr(args, flag)
    if args.schedule == ScheduleKind.INTERLEAVED.value and args.virtual_stages is None:
        keys["virtual_stages"] = DEFAULT_INTERLEAVED_V
    if args.bucket_mb is not None:
        if args.bucket_mb <= 0:
            raise SpecError("--bucket-mb", f"must be positive, got {args.bucket_mb:g}")
        keys["bucket_bytes"] = round(args.bucket_mb * MiB)
    if args.param_server is not None:
        for flag, value in (("--dp-algorithm", args.dp_algorithm), ("--bucket-mb", args.bucket_mb),
                            ("--no-overlap", args.overlap)):
            if value is not None:
                raise SpecError(flag, "applies to all-reduce, not to --param-server; drop one of them")
        keys.update(dp_sync="param-server", ps_mode=args.param_server)
    elif args.profile != "tf-ps":
        for flag, dest in (("--servers", "servers"), ("--server-nodes", "server_nodes"), ("--staleness", "staleness")):
            if getattr(args, dest) is not None:
                raise SpecError(flag, "applies to a parameter server: add --param-server sync|async")
    keys.update(_failure_keys(args))
    return keys


def build_strategy(args, world: int) -> Strategy:
    """The :class:`Strategy` of the parsed flags over ``world`` worker GPUs (profile defaults underneath)."""
    keys = strategy_keys(args) | straggler_keys(args.straggler, world, args.seed)
    try:
        return apply_profile(args.profile, **keys) if args.profile else strategy_from_flat(keys)
    except SpecError as err:
        raise _flag_error(err) from None


def build_inputs(args):
    """(workload, cluster, strategy, layout) from the parsed flags, checked; errors name the flag."""
    try:
        workload = load_model(args.model)
        if args.seq is not None:
            if not hasattr(workload, "with_seq"):
                raise SpecError("seq", "this workload has no sequence length to change; leave --seq out")
            workload = workload.with_seq(args.seq)
        base = load_cluster(args.cluster)
    except SpecError as err:
        raise _flag_error(err) if err.field in FLAG_OF else SpecError("--cluster", str(err)) from None
    if args.gpus < 1:
        raise SpecError("--gpus", f"must be a positive integer, got {args.gpus}")
    strategy = build_strategy(args, args.gpus)
    cluster = _sized_cluster(base, args, strategy)
    try:
        layout = build_layout(strategy, cluster, workload)
    except SpecError as err:
        raise _flag_error(err) from None
    return workload, cluster, strategy, layout


def _sized_cluster(base, args, strategy: Strategy):
    gpn = base.node.gpus_per_node
    server_nodes = strategy.dp_sync.server_nodes if isinstance(strategy.dp_sync, ParamServerSync) else 0
    if args.gpus % gpn:
        raise SpecError("--gpus", f"{args.gpus} is not a whole number of {gpn}-GPU {base.name} nodes; use a "
                        f"multiple of {gpn}")
    nodes = args.nodes if args.nodes is not None else args.gpus // gpn + server_nodes
    if nodes < 1:
        raise SpecError("--nodes", f"must be a positive integer, got {nodes}")
    if (nodes - server_nodes) * gpn != args.gpus:
        extra = f" less {server_nodes} server node(s)" if server_nodes else ""
        raise SpecError("--nodes", f"{nodes} nodes{extra} hold {(nodes - server_nodes) * gpn} worker GPUs, not "
                        f"--gpus {args.gpus}; use --nodes {args.gpus // gpn + server_nodes} or leave it out")
    return base.with_nodes(nodes)


def _check_outputs(args) -> None:
    if args.engine == "analytical":
        for flag, value in (("--trace", args.trace), ("--plot", args.plot), ("--steps", args.steps)):
            if value is not None:
                raise cli_common.UsageError(f"{flag} needs the discrete-event timeline: add --engine des")
    if args.steps is not None and args.steps < 1:
        raise SpecError("--steps", f"must be a positive integer, got {args.steps}")


def run_engine(args, cluster, workload, strategy):
    """The :class:`StepResult` of the chosen engine (imported here: the CLI parses without them)."""
    if args.engine == "analytical":
        from simulator.analytical import estimate

        return estimate(cluster, workload, strategy)
    from simulator.compile import compile_step
    from simulator.engine.step import simulate

    work = compile_step(cluster, workload, strategy)
    return simulate(work, cluster, seed=args.seed or 0, steps=args.steps or 1,
                    trace=bool(args.trace or args.plot))


def describe(workload, cluster, strategy: Strategy, layout) -> str:
    """One header line: model, GPUs, cluster, degrees, schedule, batch."""
    sched = (f", {strategy.schedule.value} m={layout.micro_batches}"
             + (f" v={layout.v}" if layout.v > 1 else "")) if layout.pp > 1 else f", {layout.micro_batches} micro-batches"
    sync = strategy.dp_sync
    sync_text = (f"PS {sync.mode.value} x{sync.shards}" if isinstance(sync, ParamServerSync)
                 else f"all-reduce {sync.algorithm.value}")
    return (f"{getattr(workload, 'name', 'model')} on {layout.world_size} x {cluster.device.name} "
            f"({cluster.name}, {cluster.nodes} nodes): dp={layout.dp} tp={layout.tp} pp={layout.pp}"
            f"{' +sp' if layout.sequence_parallel else ''}{sched}, ZeRO-{int(strategy.zero)}, "
            f"gbs {strategy.global_batch}, mbs {strategy.micro_batch}, seq {getattr(workload, 'seq_len', '-')}, "
            f"{sync_text}" + (f", profile {strategy.profile}" if strategy.profile else ""))


def run(args: argparse.Namespace) -> int:
    _check_outputs(args)
    workload, cluster, strategy, layout = build_inputs(args)
    try:
        result = run_engine(args, cluster, workload, strategy)
    except ImportError as err:
        raise cli_common.UsageError(f"--engine {args.engine} is not available in this build ({err})") from None
    written = _write_outputs(args, result, describe(workload, cluster, strategy, layout))
    if args.json:
        out = result.to_dict() | {"model": getattr(workload, "name", args.model), "cluster": cluster.name,
                                  "nodes": cluster.nodes, "gpus": layout.world_size, "micro_batches":
                                  layout.micro_batches, "files": written}
        if result.per_rank is not None and hasattr(result.per_rank, "to_dict"):
            out["per_rank"] = result.per_rank.to_dict(orient="records")
        cli_common.print_json(out)
    else:
        print(describe(workload, cluster, strategy, layout))
        from simulator.report import format_step

        print(format_step(result))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _write_outputs(args, result, title: str) -> list[str]:
    from simulator import trace

    written = []
    if args.trace:
        written.append(str(trace.to_chrome_trace(result.timeline, args.trace)))
    if args.plot:
        written.append(str(trace.gantt(result.timeline, args.plot, title=title)))
    return written
