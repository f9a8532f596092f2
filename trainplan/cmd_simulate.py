"""``trainplan simulate``: estimate one training step of a strategy on a cluster (docs/cli.md).

    trainplan simulate --model M --cluster C [--nodes N] --gpus G --dp D --tp T --pp P --gbs GB
        [--zero Z] [--mbs B] [--seq S] [--schedule gpipe|1f1b|interleaved --virtual-stages V]
        [--recompute none|selective|full] [--attention flash|eager] [--sp] [--dp-algorithm ALGO]
        [--bucket-mb X] [--no-overlap]
        [--param-server sync|async --servers K [--staleness S]] [--straggler SPEC ...]
        [--mtbf-hours H --checkpoint-every N --checkpoint-cost S --restart-cost S]
        [--profile NAME] [--engine analytical|des] [--trace FILE.json] [--plot FILE.png] [--json]

The flags are turned into checked inputs by :mod:`trainplan.simulate_args`; this module registers
the parser, runs the chosen engine and prints or writes the outputs. Every bad input is one line
naming the flag, exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from simulator.profiles import profile_names
from simulator.schedules import ScheduleKind
from simulator.strategy import (AllReduceAlgorithm, AttentionKind, DataSource, Offload, PlacementOrder, Recompute,
                                Strategy)
from simulator.strategy.sync import ParamServerSync
from trainplan import cli_common
from trainplan.simulate_args import DEFAULT_INTERLEAVED_V, build_inputs, check_engine_flags


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
    s.add_argument("--attention", choices=[k.value for k in AttentionKind],
                   help="flash (FlashAttention/SDPA, no s x s scores kept; default) or eager (scores materialised, "
                        "as Megatron-LM 2021); with eager, --recompute selective recomputes the attention core")
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
    f.add_argument("--train-steps", type=int, metavar="N",
                   help="steps of the whole run, for the expected time to train (default: --steps); needs des")
    e = p.add_argument_group("engine and output")
    e.add_argument("--profile", metavar="NAME", help=f"framework defaults: {', '.join(profile_names())}")
    e.add_argument("--engine", choices=["analytical", "des"], default="analytical",
                   help="analytical (closed form, default) or des (discrete-event, with a timeline)")
    e.add_argument("--seed", type=int, metavar="N", help="seed of random slowdowns and the DES (default 0)")
    e.add_argument("--steps", type=int, metavar="N", help="steps the DES runs (default 1)")
    e.add_argument("--trace", metavar="FILE.json", help="Chrome-trace JSON of the timeline (Perfetto); needs des")
    e.add_argument("--plot", metavar="FILE.png", help="Gantt chart of the timeline; needs des")
    e.add_argument("--param-fetch", choices=["infinity", "owner-broadcast"],
                   help="how offloaded ZeRO-3 parameters reach the GPUs: every rank copies its partition and "
                        "all-gathers (ZeRO-Infinity, default) or the owner copies and broadcasts")
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def run_engine(args, cluster, workload, strategy):
    """The :class:`StepResult` of the chosen engine (imported here: the CLI parses without them)."""
    options = {}
    if args.param_fetch is not None:
        from simulator.compile import ParamFetch

        options["fetch"] = ParamFetch(args.param_fetch)
    if args.engine == "analytical":
        from simulator.analytical import estimate

        return estimate(cluster, workload, strategy, **options)
    from simulator.compile import compile_step
    from simulator.engine.step import simulate

    work = compile_step(cluster, workload, strategy, **options)
    return simulate(work, cluster, seed=args.seed or 0, steps=args.steps or 1, train_steps=args.train_steps,
                    trace=bool(args.trace or args.plot))


def describe(workload, cluster, strategy: Strategy, layout) -> str:
    """One header line: model, GPUs, cluster, degrees, schedule, batch."""
    sched = (f", {strategy.schedule.value} m={layout.micro_batches}"
             + (f" v={layout.v}" if layout.v > 1 else "")) if layout.pp > 1 else f", {layout.micro_batches} micro-batches"
    sync = strategy.dp_sync
    sync_text = (f"PS {sync.mode.value} x{sync.shards}" if isinstance(sync, ParamServerSync)
                 else f"all-reduce {sync.algorithm.value}")
    nodes = f"{cluster.nodes} node{'s' if cluster.nodes != 1 else ''}"
    return (f"{getattr(workload, 'name', 'model')} on {layout.world_size} x {cluster.device.name} "
            f"({cluster.name}, {nodes}): dp={layout.dp} tp={layout.tp} pp={layout.pp}"
            f"{' +sp' if layout.sequence_parallel else ''}{sched}, ZeRO-{int(strategy.zero)}, "
            f"{strategy.attention.value} attention, "
            f"gbs {strategy.global_batch}, mbs {strategy.micro_batch}, seq {getattr(workload, 'seq_len', '-')}, "
            f"{sync_text}" + (f", profile {strategy.profile}" if strategy.profile else ""))


def run(args: argparse.Namespace) -> int:
    check_engine_flags(args)
    workload, cluster, strategy, layout = build_inputs(args)
    try:
        result = run_engine(args, cluster, workload, strategy)
    except ImportError as err:
        raise cli_common.UsageError(f"--engine {args.engine} is not available in this build ({err})") from None
    written = _write_outputs(args, result, describe(workload, cluster, strategy, layout))
    if args.json:
        out = result.to_dict() | {"model": getattr(workload, "name", args.model), "cluster": cluster.name,
                                  "nodes": cluster.nodes, "gpus": layout.world_size, "micro_batches":
                                  layout.micro_batches, "attention": strategy.attention.value, "files": written}
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
