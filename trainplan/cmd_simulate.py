"""``trainplan simulate``: estimate one training step of a strategy on a cluster (docs/cli.md).

    trainplan simulate --model M [--cluster C] [--nodes N] --gpus G --gbs B [strategy flags ...]
        [--engine analytical|des] [--steps N] [--trace FILE.json] [--plot FILE.png] [--json]
    trainplan simulate --jobs JOBS.yaml [--job-placement packed|scattered] [--steps N] [--json]

The strategy flags are the ones every strategy-taking command shares (:mod:`trainplan.strategy_flags`,
derived from the strategy's field declarations); this module adds the engine and output flags,
runs the chosen engine and prints or writes the outputs. Every bad input is one line naming the
flag, exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from simulator.compile.offload_part import ParamFetch
from simulator.checks import positive_int
from simulator.cluster.placement import PlacementPolicy
from simulator.errors import SpecError
from simulator.results import Engine
from simulator.strategy import Strategy, StragglerModel
from simulator.strategy.sync import ParamServerSync
from trainplan import cli_common, strategy_flags


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="estimate one training step: time, tokens/s, MFU, breakdown",
                              description="Estimate one training step of a strategy on a cluster with the "
                                          "analytical engine (closed form, fast) or the discrete-event engine "
                                          "(timeline, contention, stragglers). See docs/cli.md.")
    strategy_flags.add_job_flags(p, plan=True)
    strategy_flags.add_strategy_flags(p, gbs_required=False)
    e = p.add_argument_group("engine and output")
    e.add_argument("--engine", choices=[k.value for k in Engine],
                   help="analytical (closed form, default) or des (discrete-event, with a timeline)")
    e.add_argument("--steps", type=int, metavar="N", help="steps the DES runs (default 1)")
    e.add_argument("--train-steps", type=int, metavar="N",
                   help="steps of the whole run, for the expected time to train (default: --steps); needs des")
    e.add_argument("--trace", metavar="FILE.json", help="Chrome-trace JSON of the timeline (Perfetto); needs des")
    e.add_argument("--plot", metavar="FILE.png", help="Gantt chart of the timeline; needs des")
    e.add_argument("--param-fetch", choices=[f.value for f in ParamFetch],
                   help="how offloaded ZeRO-3 parameters reach the GPUs: every rank copies its partition and "
                        "all-gathers (ZeRO-Infinity, default) or the owner copies and broadcasts")
    e.add_argument("--save-plan", metavar="PLAN.json",
                   help="write the model, cluster, strategy and this estimate as a plan file (read back by "
                        "simulate --plan; docs/plan_file.md)")
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    j = p.add_argument_group("several jobs on one cluster (docs/engine.md)")
    j.add_argument("--jobs", metavar="JOBS.yaml",
                   help="a jobs file: several jobs on one cluster, each one's step alone and together (DES); "
                        "replaces the model, cluster and strategy flags")
    j.add_argument("--job-placement", choices=[p.value for p in PlacementPolicy],
                   help="where --jobs' jobs that give a node count go (default: the file's, else packed)")
    p.set_defaults(handler=run)


def check_engine_flags(args) -> None:
    """Refuse what the analytical engine cannot do rather than ignore it silently."""
    if args.engine == Engine.ANALYTICAL.value:
        for flag, value in (("--trace", args.trace), ("--plot", args.plot)):
            if value is not None:
                raise cli_common.UsageError(f"{flag} needs the discrete-event timeline: add --engine des")
        for flag, value in (("--steps", args.steps), ("--train-steps", args.train_steps),
                            ("--straggler", args.straggler or None), ("--mtbf-hours", args.mtbf_gpu_hours)):
            if value is not None:
                raise cli_common.UsageError(f"{flag}: the analytical engine assumes identical ranks and single "
                                            "steps without failures; add --engine des")
    for flag, value in (("--steps", args.steps), ("--train-steps", args.train_steps)):
        if value is not None:
            positive_int(flag, value)
    if args.train_steps is not None and args.mtbf_gpu_hours is None:
        raise SpecError("--train-steps", "sets the horizon of the failure model: add --mtbf-hours and the "
                        "checkpoint and restart flags")


def run_engine(args, job: strategy_flags.Job):
    """The :class:`StepResult` of the chosen engine on the job's layout."""
    from simulator.analytical import estimate_work
    from simulator.compile import compile_step
    from simulator.engine.step import simulate

    fetch = ParamFetch(args.param_fetch) if args.param_fetch else ParamFetch.INFINITY
    try:  # a strategy field compile or the run finds unworkable (buckets, the failure model) names its flag
        work = compile_step(job.cluster, job.workload, job.strategy, fetch=fetch, layout=job.layout)
        if args.engine == Engine.ANALYTICAL.value:
            return estimate_work(work)
        # --seed is the strategy's straggler seed already; simulate's seed is an extra offset (was added twice)
        counter = cli_common.Counter(sys.stderr) if sys.stderr.isatty() else None  # progress: terminal only
        try:
            return simulate(work, job.cluster, seed=0, steps=args.steps or 1, train_steps=args.train_steps,
                            trace=bool(args.trace or args.plot), progress=counter)
        finally:
            if counter is not None:
                counter.close()
    except SpecError as err:
        raise strategy_flags.flag_error(err) from None


def describe(workload, cluster, strategy: Strategy, layout) -> str:
    """One header line: model, GPUs, cluster, degrees, schedule, batch."""
    sched = (f", {strategy.schedule.value} m={layout.micro_batches}"
             + (f" v={layout.v}" if layout.v > 1 else "")) if layout.pp > 1 else f", {layout.micro_batches} micro-batch{'es' if layout.micro_batches != 1 else ''}"
    sync = strategy.dp_sync
    sync_text = (f"PS {sync.mode.value} x{sync.shards}" if isinstance(sync, ParamServerSync)
                 else f"all-reduce {sync.algorithm.value}")
    nodes = f"{cluster.nodes} node{'s' if cluster.nodes != 1 else ''}"
    return (f"{getattr(workload, 'name', 'model')} on {layout.world_size} x {cluster.device.name} "
            f"({cluster.name}, {nodes}): dp={layout.dp} tp={layout.tp} pp={layout.pp}"
            f"{f' ep={layout.ep}' if layout.ep > 1 else ''}"
            f"{' +sp' if layout.sequence_parallel else ''}{cli_common.cp_fp8_text(strategy)}{sched}, "
            f"ZeRO-{int(strategy.zero)}, "
            f"{strategy.attention.value} attention, "
            f"gbs {strategy.global_batch}, mbs {strategy.micro_batch}, seq {getattr(workload, 'seq_len', '-')}, "
            f"{sync_text}" + (f", profile {strategy.profile}" if strategy.profile else ""))


def _job(args) -> strategy_flags.Job:
    if args.plan is not None:
        return strategy_flags.job_from_plan(args)
    for flag, value in (("--model", args.model), ("--gpus", args.gpus), ("--gbs", args.global_batch)):
        if value is None:
            raise cli_common.UsageError(f"{flag} is required (or give --plan PLAN.json)")
    return strategy_flags.build_job(args)


def _save_plan(path: str, job: strategy_flags.Job, result) -> str:
    from simulator.plan_file import Plan, with_estimates

    plan = Plan(model=job.workload, cluster=job.cluster, gpus=job.layout.world_size, strategy=job.strategy)
    return str(with_estimates(plan, [result]).save(path))


def run(args: argparse.Namespace) -> int:
    if args.jobs is not None:
        from trainplan import simulate_jobs

        return simulate_jobs.run(args)
    if args.job_placement is not None:
        raise cli_common.UsageError("--job-placement places the jobs of --jobs FILE; give --jobs or drop it")
    args.engine = args.engine or Engine.ANALYTICAL.value
    check_engine_flags(args)
    from simulator.jsonio import check_plot_path, check_suffix, check_writable

    for flag, path in (("--save-plan", args.save_plan), ("--trace", args.trace)):  # before the work, not after it
        if path is not None:
            check_suffix(path, (".json",), flag)
            check_writable(path, flag)
    if args.plot is not None:
        check_plot_path(args.plot, "--plot")
    job = _job(args)
    workload, cluster, strategy, layout = job.workload, job.cluster, job.strategy, job.layout
    if args.engine == Engine.ANALYTICAL.value and (cluster.node_groups or cluster.slow_gpus):
        raise cli_common.UsageError(f"--cluster: {cluster.name}'s nodes differ (node_groups, slow GPUs); the "
                                    "analytical engine assumes identical ranks: add --engine des")
    if args.engine == Engine.ANALYTICAL.value and (strategy.failures is not None
                                                   or strategy.stragglers != StragglerModel()):
        where = "--plan: the plan's scenario" if args.plan else "the scenario"
        raise cli_common.UsageError(f"{where} (stragglers, failures, their seed) needs the discrete-event engine: "
                                    "add --engine des")
    result = run_engine(args, job)
    written = _write_outputs(args, result, describe(workload, cluster, strategy, layout))
    if args.save_plan:
        written.append(_save_plan(args.save_plan, job, result))
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
        if "imbalance" in result.extras:
            print(_imbalance_line(result.extras["imbalance"]))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _imbalance_line(imb: dict) -> str:
    """The fastest and slowest stage's compute on a cluster whose nodes differ."""
    def who(d: dict) -> str:
        return f"stage {d['stage']} (rank {d['rank']}, {d['device']}) {d['compute_s']:.4f} s"
    return f"compute per stage: slowest {who(imb['slowest'])}, fastest {who(imb['fastest'])}, ratio {imb['ratio']:.2f}"


def _write_outputs(args, result, title: str) -> list[str]:
    from simulator import trace

    written = []
    if args.trace:
        written.append(str(trace.to_chrome_trace(result.timeline, args.trace)))
    if args.plot:
        written.append(str(trace.gantt(result.timeline, args.plot, title=title)))
    return written
