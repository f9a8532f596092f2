"""``trainplan plan``: search every feasible strategy for a model on a cluster, rank, explain, write a plan.

    trainplan plan --model M [--cluster C[,C2...]] [--nodes N] --gpus G|G1,G2,...|G1..G2 --gbs B [--seq S]
        [--objective time|throughput|cost] [--tokens N [--price-per-gpu-hour P]] [--top K] [--refine K]
        [--jobs J] [--reserve-gb R] [--max-mbs B] [--allow-cross-node-tp] [--profile NAME] [--explain
        [--against PLAN.json]] [--pareto] [--out plan.json] [--csv all.csv] [--plot sweep.png] [--json] [--quiet]
        [pins: --tp 8 --pp 1,2,4 --no-offload --dp-sync all-reduce ...]

Every strategy flag of ``simulate`` is a pin here and takes a comma-separated list
(``--recompute none,full``); ``--max-pp`` caps the pipeline degree, ``--no-offload`` is ``--offload
none``, ``--dp-sync`` keeps one kind of gradient sync; ``--profile`` restricts the search to what a
framework runs (:mod:`planner.frameworks`). A progress counter is drawn on stderr when it is a
terminal (not with ``--quiet``). Exit codes: 0 a plan, 1
nothing fits, 2 bad input. Several GPU counts (``--gpus 16..256`` or ``16,32,64``) or clusters
(``--cluster dgx-a100,dgx-h100``) make a sweep (:func:`planner.sweep.sweep`): one row per point,
the best plan of each, ``--plot`` the figure, ``--out`` the best plan of the fastest point.
What one search prints and writes is :mod:`trainplan.plan_report`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from simulator.checks import enum_member, positive_int
from simulator.errors import SpecError
from simulator.jsonio import check_plot_path, check_suffix, check_writable
from simulator.strategy.fields import FlagKind
from simulator.strategy.sync import DpSyncKind
from simulator.strategy.flat import FLAT
from trainplan import cli_common, plan_report, plan_sweep, strategy_flags

NOT_PINS = ("global_batch", "profile", "layer_split", "seed")
"""Declared flags that are inputs of the search, not dimensions of it."""


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="search the strategies for a model on a cluster and write the best plan",
                              description="Enumerate every strategy for the model on the cluster, drop the invalid "
                                          "and those that do not fit, rank by the closed form, re-simulate the best "
                                          "with the discrete-event engine. See docs/planner.md.",
                              conflict_handler="resolve")
    strategy_flags.add_job_flags(p)
    # replaces the shared integer --gpus (conflict_handler="resolve"): the planner also takes a list or a range
    p.add_argument("--gpus", required=True, metavar="G|G1,G2|G1..G2",
                   help="worker GPUs, = dp·tp·pp; a list or a range of powers of two sweeps the counts")
    g = p.add_argument_group("search")
    g.add_argument("--gbs", type=int, required=True, metavar="B", help="global batch, sequences per step")
    g.add_argument("--objective", choices=("time", "throughput", "cost"), default="time",
                   help="minimise step time (default), maximise tokens/s per GPU, or minimise GPU-hours to train "
                        "--tokens")
    g.add_argument("--tokens", type=float, metavar="N", help="tokens to train (time and GPU-hours to train)")
    g.add_argument("--price-per-gpu-hour", type=float, metavar="P", help="price of a GPU-hour (cost to train)")
    g.add_argument("--top", type=int, default=5, metavar="K", help="plans shown (default 5)")
    g.add_argument("--refine", type=int, default=8, metavar="K", help="best plans re-simulated by the DES (default 8)")
    g.add_argument("--jobs", type=int, metavar="J",
                   help="processes for the rank phase and the DES refinement (default: one per CPU core)")
    g.add_argument("--reserve-gb", type=float, default=0.0, metavar="R", help="GPU memory kept free, GB (default 0)")
    g.add_argument("--max-mbs", type=int, default=8, metavar="B", help="largest micro-batch tried (default 8)")
    g.add_argument("--max-pp", type=int, metavar="P", help="largest pipeline degree tried (default: any)")
    g.add_argument("--allow-cross-node-tp", action="store_true", help="let tp span nodes (default: within a node)")
    g.add_argument("--profile", metavar="NAME",
                   help="search only what the framework runs (ddp, fsdp, megatron, deepspeed, horovod, tf-mirrored, "
                        "tf-multiworker, tf-ps), with its defaults for what the search does not vary; a pin it cannot "
                        "run is an error (default none; docs/planner.md)")
    pins = p.add_argument_group("pins (comma-separated lists restrict a dimension)")
    for k in FLAT.values():
        flag = k.decl.flag
        if flag is None or k.key in NOT_PINS or flag.kind is FlagKind.CUSTOM:
            continue
        if flag.kind is FlagKind.SWITCH:
            pins.add_argument(flag.name, dest=k.key, action=argparse.BooleanOptionalAction, help=flag.help)
        else:
            pins.add_argument(flag.name, *flag.aliases, dest=k.key, metavar=flag.metavar or "V,...", help=flag.help)
    pins.add_argument("--no-offload", dest="offload", action="store_const", const="none",
                      help="search no model-state offload (the same as --offload none)")
    pins.add_argument("--dp-sync", dest="dp_sync_kinds", metavar="KIND,...",
                      help="gradient sync searched: all-reduce, param-server (default: both, a parameter server "
                           "for the best ZeRO-0 plans)")
    o = p.add_argument_group("output")
    o.add_argument("--explain", action="store_true", help="say why the best plan beats the others")
    o.add_argument("--against", metavar="PLAN.json", help="with --explain: compare the best plan with this plan "
                                                          "file's layout (e.g. a published one, from simulate "
                                                          "--save-plan)")
    o.add_argument("--out", metavar="PLAN.json", help="write the best plan as a plan file")
    o.add_argument("--csv", metavar="FILE.csv", help="write every ranked candidate")
    o.add_argument("--plot", metavar="FILE.png", help="with a sweep: time and GPU-hours (or cost) against GPUs")
    o.add_argument("--json", action="store_true", help="print JSON (candidates, best, top; a sweep: rows)")
    o.add_argument("--pareto", action="store_true", help="show the plans no other beats on both step time and "
                                                         "memory per GPU (the speed / headroom trade-off)")
    o.add_argument("--quiet", action="store_true", help="no progress on stderr (it is drawn on a terminal only)")
    p.set_defaults(handler=run)


def _pins(args) -> dict:
    """{flat key: allowed values} from the pin flags (values read by each field's own parser)."""
    pins: dict = {}
    for k in FLAT.values():
        value = getattr(args, k.key, None) if k.key not in NOT_PINS else None
        if value is None:
            continue
        flag, parse = k.decl.flag, k.decl.parse
        items = [value] if isinstance(value, bool) else [v for v in str(value).split(",") if v.strip()]
        try:
            items = [flag.from_flag(v) if flag.from_flag else v for v in items]
            pins[k.key] = tuple(parse(v) if parse else v for v in items)
            for v in pins[k.key]:  # each value passes the field's own check (--tp 0 is no pin to search)
                if k.decl.check is not None:
                    k.decl.check(k.key, v)
        except SpecError as err:
            raise SpecError(flag.name, err.problem) from None
    if args.dp_sync_kinds is not None:
        pins["dp_sync"] = tuple(dict.fromkeys(enum_member(DpSyncKind, v.strip(), "--dp-sync", "gradient sync")
                                              for v in args.dp_sync_kinds.split(",") if v.strip()))
    if "ps_mode" in pins or "ps_shards" in pins or "ps_server_nodes" in pins or "staleness_steps" in pins:
        if pins.get("dp_sync", (DpSyncKind.PARAM_SERVER,)) != (DpSyncKind.PARAM_SERVER,):
            raise SpecError("--dp-sync", "the parameter-server flags (--param-server, --servers, --server-nodes, "
                            "--staleness) need --dp-sync param-server; drop one of them")
        pins["dp_sync"] = (DpSyncKind.PARAM_SERVER,)
    if args.max_pp is not None:
        pins["max_pp"] = (positive_int("--max-pp", args.max_pp),)
    return pins


def _plan_kwargs(args) -> dict:
    """The keyword arguments of :func:`planner.plan` that the flags give (all but the job's size)."""
    import planner
    from planner.refine import default_jobs

    return {"pins": _pins(args), "objective": planner.Objective(args.objective), "refine": max(args.refine, 0),
            "jobs": default_jobs() if args.jobs is None else args.jobs, "reserve_gb": args.reserve_gb,
            "max_mbs": args.max_mbs,
            "allow_cross_node_tp": args.allow_cross_node_tp, "profile": args.profile,
            "progress": None if args.quiet or not sys.stderr.isatty() else cli_common.Counter(sys.stderr)}


@contextlib.contextmanager
def _searching(progress):
    """Around a search: a SpecError it raises as the flag's one-line error; the progress counter closed either way."""
    try:
        yield
    except SpecError as err:
        raise strategy_flags.flag_error(err) from None
    finally:
        if progress is not None:
            progress.close()


def run(args: argparse.Namespace) -> int:
    for flag, path, suffix in (("--out", args.out, ".json"), ("--csv", args.csv, ".csv")):
        if path is not None:
            check_suffix(path, (suffix,), flag)
            check_writable(path, flag)
    for flag, value in (("--top", args.top), ("--jobs", args.jobs), ("--max-mbs", args.max_mbs)):
        if value is not None:
            positive_int(flag, value)
    for flag, value in (("--reserve-gb", args.reserve_gb), ("--refine", args.refine)):
        if not 0 <= value < float("inf"):  # NaN fails too: a NaN reserve would let every plan fit
            raise SpecError(flag, f"must be a finite number >= 0, got {value}")
    for flag, value in (("--tokens", args.tokens), ("--price-per-gpu-hour", args.price_per_gpu_hour)):
        if value is not None and not 0 < value < float("inf"):
            raise SpecError(flag, f"must be a finite positive number, got {value}")
    if args.price_per_gpu_hour is not None and args.tokens is None:
        raise SpecError("--price-per-gpu-hour", "prices the GPU-hours to train --tokens: add --tokens")
    counts, names = plan_sweep.gpu_counts(args.gpus), plan_sweep.cluster_names(args.cluster)
    if len(counts) > 1 or len(names) > 1:
        return _run_sweep(args, counts, names)
    if args.plot is not None:
        raise cli_common.UsageError("--plot draws a sweep; give several --gpus (16..256) or --cluster values")
    args.gpus, args.cluster = counts[0], names[0]
    workload = strategy_flags.load_workload(args)
    import planner  # after the flags' checks: a bad flag exits before the search's imports (pandas: ~0.5 s)
    from planner.compare import against

    kwargs = _plan_kwargs(args)
    pins = kwargs["pins"]
    from planner.search import server_nodes

    try:
        servers = server_nodes(pins)
    except SpecError as err:
        raise strategy_flags.flag_error(err) from None
    cluster = strategy_flags.sized_cluster(strategy_flags.cluster_of(args), args.gpus, args.nodes, servers)
    reference = _reference(args, workload, cluster)
    if not args.quiet:
        print(f"searching strategies for {workload.name} on {args.gpus} x {cluster.device.name} ...", file=sys.stderr)
    with _searching(kwargs["progress"]):
        result = planner.plan(workload, cluster, gpus=args.gpus, global_batch=args.gbs, tokens=args.tokens,
                              price_per_gpu_hour=args.price_per_gpu_hour, **kwargs)
    if result.counts.enumerated == 0:
        raise cli_common.UsageError(f"the pins leave no candidate ({', '.join(pins) or 'none'}); loosen them")
    compare = reference and (lambda frame: against(frame, workload, cluster, reference.strategy, args.reserve_gb,
                                                   f"layout of {args.against}", args.gpus))
    return plan_report.report(args, result, compare)


def _reference(args, workload, cluster):
    """The plan file of ``--against``, checked to describe this job (None without the flag)."""
    from planner.compare import check_comparable
    from simulator.plan_file import load_plan

    if args.against is None:
        return None
    if not args.explain:
        raise cli_common.UsageError("--against is part of --explain; add --explain")
    try:
        plan = load_plan(args.against)
    except SpecError as err:
        raise SpecError("--against", str(err)) from None
    check_comparable(plan, workload, cluster, args.gpus, args.gbs)
    return plan


def _run_sweep(args, counts: tuple[int, ...], names: tuple) -> int:
    """The best plan per (cluster, GPU count): the table (or ``--json`` rows), ``--plot``, ``--csv``, ``--out``."""
    from planner.plot import sweep_figure
    from planner.sweep import fastest, rows_as_dicts, sweep

    if args.nodes is not None:
        raise cli_common.UsageError("--nodes sizes one cluster; a sweep sizes each to its --gpus, leave --nodes out")
    if args.explain or args.against or args.pareto:
        raise cli_common.UsageError("--explain, --against and --pareto compare the plans of one search; leave "
                                    "them out of a sweep")
    if args.plot is not None:
        check_plot_path(args.plot, "--plot")
    workload = strategy_flags.load_workload(args)
    clusters = [strategy_flags.cluster_of(argparse.Namespace(cluster=name)) for name in names]
    if not args.quiet:
        print(f"sweeping {len(clusters)} cluster(s) x {len(counts)} GPU count(s) for {workload.name} ...",
              file=sys.stderr)
    kwargs = _plan_kwargs(args)
    with _searching(kwargs["progress"]):
        frame = sweep(workload, clusters, counts, args.gbs, tokens=args.tokens,
                      price_per_gpu_hour=args.price_per_gpu_hour, **kwargs)
    best = fastest(frame)
    if args.out and best is not None:
        best["plan"].save(args.out)
    if args.csv:
        frame.drop(columns=["plan"]).to_csv(args.csv, index=False)
    if args.plot is not None:
        sweep_figure(frame, title=f"{workload.name}, global batch {args.gbs}").savefig(args.plot, dpi=120)
    if args.json:
        cli_common.print_json({"rows": rows_as_dicts(frame)})
    else:
        print(plan_sweep.table(frame))
    for path in (args.out if best is not None else None, args.csv, args.plot):
        if path:
            print(f"wrote {path}", file=sys.stderr)
    return 0 if best is not None else 1
