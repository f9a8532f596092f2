"""``trainplan memory``: per-rank memory of a training layout (model states, activations, buffers,
runtime: CUDA context, cuBLAS, NCCL, allocator; GPU, host and NVMe) and whether it fits. See docs/memory.md.

    trainplan memory --model NAME|config.json|--params N [--cluster NAME|FILE] --gpus G
                     [--gbs B] [strategy flags ...] [--json] [--plot FILE.png]

It takes the same strategy flags as ``simulate`` (:mod:`trainplan.strategy_flags`) and builds the same
layout, so the two commands always describe one layout. ``--gbs`` defaults to dp·mbs·pp: one
micro-batch per pipeline stage in flight, the most the 1F1B schedule holds.
"""

from __future__ import annotations

import argparse

from simulator.jsonio import check_plot_path
from simulator.memory import MemoryReport, memory_report
from simulator.memory.plot import plot_zero_stages
from simulator.memory.report import GB
from simulator.strategy import Role
from simulator.strategy.flat import FLAT
from simulator.workload import ParamCountModel, parse_param_count
from trainplan import cli_common, strategy_flags


def register(subparsers) -> None:
    p = subparsers.add_parser("memory", help="per-rank memory breakdown (ZeRO, offload, activations) and a verdict",
                              description="Per-rank memory of a training layout and whether it fits "
                                          "(docs/memory.md). Sizes are decimal GB (1e9 bytes).")
    strategy_flags.add_job_flags(p, params=True)
    strategy_flags.add_strategy_flags(p, gbs_required=False, gbs_default="dp·mbs·pp, one micro-batch per stage")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print JSON (most loaded rank at the top level)")
    o.add_argument("--plot", metavar="FILE.png", help="also draw ZeRO 0-3 stacked bars to FILE.png")
    p.set_defaults(handler=_run)


def _default_gbs(args) -> int | None:
    """dp·mbs·pp from the flags when they are integers (the layout reports any other problem)."""
    try:
        tp, pp, mbs = (int(getattr(args, k) or 1) for k in ("tp", "pp", "micro_batch"))
        dp = int(args.dp) if args.dp is not None else args.gpus // (tp * pp)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return max(dp, 1) * mbs * pp if tp > 0 and pp > 0 and mbs > 0 else None


def build(args) -> strategy_flags.Job:
    """The checked job of the parsed arguments (a bare ``--params`` count or a ``--model``)."""
    if (args.model is None) == (args.params is None):
        raise cli_common.UsageError("give --model NAME|config.json or --params COUNT (one of them)")
    scenario = [strategy_flags.FLAG_OF[k] for k in strategy_flags.strategy_keys(args)
                if FLAT[k].decl.role is Role.SCENARIO] + (["--straggler"] if args.straggler else [])
    if scenario:
        raise cli_common.UsageError(f"{scenario[0]}: stragglers and failures do not change memory; drop it "
                                    "(simulate --engine des takes it)")
    if args.params is not None and args.seq is not None:
        raise cli_common.UsageError("--seq: a bare --params count has no activations for a sequence length to "
                                    "change; drop --seq, or give --model for activation memory")
    workload = ParamCountModel(params=parse_param_count(args.params)) if args.params is not None else None
    return strategy_flags.build_job(args, workload=workload, global_batch=_default_gbs(args))


def _run(args: argparse.Namespace) -> int:
    if args.plot:
        check_plot_path(args.plot, "--plot")  # before the work, and no folders created
    job = build(args)
    report = memory_report(job.workload, job.cluster, job.layout)
    if args.plot:
        plot_zero_stages(job.workload, job.cluster, job.layout, args.plot)
    if args.json:
        cli_common.print_json(report.to_dict() | {"cluster": job.cluster.name, "gpus": args.gpus})
    else:
        print(format_report(report, job.cluster.name))
        if args.plot:
            print(f"plot: {args.plot}")
    return 0


def _gb(x: float) -> str:
    return f"{x / GB:10.2f}"


def format_report(r: MemoryReport, cluster_name: str) -> str:
    """The text table: header, the most loaded rank's breakdown, host/NVMe, stages, verdict, notes."""
    lay, w = r.layout, r.worst
    s = lay.strategy
    sched = (f", {s.schedule.value} m={lay.micro_batches}" + (f" v={lay.v}" if lay.v > 1 else "")
             if lay.pp > 1 else f", {lay.micro_batches} micro-batch{'es' if lay.micro_batches > 1 else ''}")
    lines = [f"{r.model_name} on {lay.world_size} x {r.device_name} ({cluster_name}): dp={lay.dp} tp={lay.tp} "
             f"pp={lay.pp}{f' ep={lay.ep}' if lay.ep > 1 else ''}{' +sp' if lay.sequence_parallel else ''}"
             f"{cli_common.cp_fp8_text(s)}, ZeRO-{int(s.zero)}, offload {s.offload.value}"
             f"{' +activations' if s.offload_activations else ''}, {lay.framework.value} "
             f"({lay.partitioning.value}), gbs {s.global_batch}, mbs {s.micro_batch}, seq {r.seq or '-'}, "
             f"{s.attention.value} attention, recompute {s.recompute.value}{sched}",
             f"per GPU, most loaded rank (stage {w.stage}){'':13}GB"]
    rows = [("parameters", w.params_bytes)]
    if w.params_after_step_bytes != w.params_bytes:
        rows.append(("  after the step (resharded)", w.params_after_step_bytes))
    rows += [("gradients", w.grads_bytes), ("optimizer states", w.optimizer_bytes),
             ("activations", w.activations_bytes)]
    a = w.activations
    if a is not None:
        rows += [(f"  blocks ({w.blocks} x {a.micro_batches_in_flight:g} micro-batches)", a.blocks_bytes),
                 ("  recompute working set", a.recompute_working_bytes),
                 ("  embedding + logits", a.embedding_bytes + a.head_bytes),
                 ("  loss working set (fp32 logits)", a.loss_working_bytes)]
    rows += [("buffers", w.buffers_bytes), ("  gradient buckets", w.buffers.grad_buckets_bytes),
             ("  gathered blocks (ZeRO-3, FSDP2)", w.buffers.gathered_params_bytes),
             *([("  unsharded gradients held to the step's reduce-scatter (FSDP2, pp)", w.buffers.held_grads_bytes)]
               if w.buffers.held_grads_bytes else []),
             *([("  FP8 weights (Transformer Engine)", w.buffers.fp8_weights_bytes)]
               if w.buffers.fp8_weights_bytes else []),
             *([("  autocast 16-bit weight copies", w.buffers.autocast_weights_bytes)]
               if w.buffers.autocast_weights_bytes else []),
             *([("optimizer step peak (foreach AdamW)", w.step_peak_bytes),
                ("  of which step temporaries", w.buffers.optimizer_step_bytes)]
               if w.buffers.optimizer_step_bytes else []),
             ("cuBLAS workspaces", w.runtime.cublas_workspace_bytes),
             ("allocated (max_memory_allocated)", w.allocated_bytes),
             ("  allocator reserve (assumed 10%)", w.runtime.allocator_slack_bytes),
             ("reserved (max_memory_reserved)", w.reserved_bytes),
             ("  CUDA context (assumed)", w.runtime.cuda_context_bytes),
             ("  NCCL buffers", w.runtime.nccl_buffers_bytes)]
    lines += [f"  {name:<38}{_gb(value)}" for name, value in rows]
    lines.append(f"  {'total on the device':<38}{_gb(w.total_bytes)}  of {r.device_memory_bytes / GB:.2f}")
    if r.host_node_bytes or r.nvme_node_bytes:
        lines.append(f"  {'host memory (this rank)':<38}{_gb(w.host_bytes)}")
        lines.append(f"  {'host per node (x{0} ranks, states x1.5)'.format(r.ranks_per_node):<38}"
                     f"{_gb(r.host_node_bytes)}  of {(r.host_capacity_bytes or 0) / GB:.0f}")
    if r.nvme_node_bytes:
        lines.append(f"  {'NVMe per node':<38}{_gb(r.nvme_node_bytes)}  of {(r.nvme_capacity_bytes or 0) / GB:.0f}")
    if len(r.stages) > 1:
        lines.append("per stage (GB)  blocks  params   grads     opt    acts  buffers runtime   total    host")
        for st in r.stages:
            lines.append(f"  stage {st.stage:<7}{st.blocks:>6}" + "".join(
                f"{v / GB:>8.2f}" for v in (st.params_bytes, st.grads_bytes, st.optimizer_bytes,
                                            st.activations_bytes, st.buffers_bytes, st.runtime_total_bytes,
                                            st.total_bytes, st.host_bytes)))
    lines.append("verdict: fits" if r.fits else "verdict: DOES NOT FIT - " + "; ".join(r.reasons))
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)
