"""``trainplan memory``: per-rank memory of a training layout (model states, activations, buffers,
overhead; GPU, host and NVMe) and whether it fits. See docs/memory.md.

    trainplan memory --model NAME|config.json|--params N [--cluster NAME|FILE] --gpus G
                     [--dp D --tp T --pp P] [--zero 0..3] [--offload none|optimizer|params|nvme]
                     [--offload-activations] [--mbs B] [--seq S] [--recompute none|selective|full]
                     [--sp] [--schedule gpipe|1f1b|interleaved] [--partitioning P] [--framework F]
                     [--bucket-view] [--attention flash|eager] [--json] [--plot FILE.png]
"""

from __future__ import annotations

import argparse
from math import ceil

from simulator.cluster.io import load_cluster, with_nodes
from simulator.memory import (Framework, MemoryReport, MemoryStrategy, Offload, Partitioning, ScheduleKind,
                              ZeroStage, memory_report, resolve_degrees)
from simulator.memory.plot import plot_zero_stages
from simulator.memory.report import GB
from simulator.strategy.spec import AttentionKind
from simulator.workload import ParamCountModel, Recompute, TransformerSpec, load_model, parse_param_count
from trainplan import cli_common

DEFAULT_CLUSTER = "dgx-a100"
"""Cluster used when --cluster is not given (the help and the output header say so)."""


def register(subparsers) -> None:
    p = subparsers.add_parser("memory", help="per-rank memory breakdown (ZeRO, offload, activations) and a verdict",
                              description="Per-rank memory of a training layout and whether it fits "
                                          "(docs/memory.md). Sizes are decimal GB (1e9 bytes).")
    p.add_argument("--model", metavar="NAME|config.json", help="a model preset or a Hugging Face config.json")
    p.add_argument("--params", help="a bare parameter count instead of --model (7.5e9, 7.5B): model states only")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, metavar="NAME|FILE",
                   help=f"cluster preset or file (default: {DEFAULT_CLUSTER}); nodes = ceil(gpus / GPUs per node)")
    p.add_argument("--gpus", type=int, required=True, metavar="G", help="GPUs in the job")
    p.add_argument("--dp", type=int, metavar="D", help="data-parallel degree (default: G / (tp·pp))")
    p.add_argument("--tp", type=int, metavar="T", help="tensor-parallel degree (default 1)")
    p.add_argument("--pp", type=int, metavar="P", help="pipeline stages (default 1)")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=0, help="ZeRO stage (default 0: DDP)")
    p.add_argument("--offload", choices=[o.value for o in Offload], default="none",
                   help="optimizer: ZeRO-Offload (ZeRO>=1); params: +parameters (ZeRO 3); nvme: ZeRO-Infinity (ZeRO 3)")
    p.add_argument("--offload-activations", action="store_true",
                   help="activation checkpoints to host memory (needs --recompute full)")
    p.add_argument("--mbs", type=int, default=1, metavar="B", help="micro-batch size in sequences (default 1)")
    p.add_argument("--seq", type=int, metavar="S", help="sequence length (default: the model's)")
    p.add_argument("--recompute", choices=[r.value for r in Recompute], default="none",
                   help="activation recomputation (default none; selective drops eager attention scores)")
    p.add_argument("--sp", action="store_true", help="sequence parallelism with tensor parallelism")
    p.add_argument("--schedule", choices=[s.value for s in ScheduleKind], default="1f1b",
                   help="pipeline schedule (default 1f1b)")
    p.add_argument("--microbatches", type=int, metavar="M", help="micro-batches per step (default: pp)")
    p.add_argument("--virtual-stages", type=int, metavar="V",
                   help="model chunks per rank for --schedule interleaved (default 2)")
    p.add_argument("--partitioning", choices=[x.value for x in Partitioning],
                   help="how ZeRO splits states: flat (DeepSpeed; the default), whole-tensor (torch "
                        "ZeroRedundancyOptimizer), dim0-padded (FSDP2); default: the framework's")
    p.add_argument("--framework", choices=[f.value for f in Framework],
                   help="torch (DDP, ZeRO 0-1), fsdp2 (ZeRO 2-3), deepspeed (ZeRO 0-3); default: implied by "
                        "--partitioning (flat: torch at ZeRO 0, deepspeed above)")
    p.add_argument("--bucket-view", action="store_true",
                   help="torch DDP gradient_as_bucket_view=True: no bucket copy of the gradients")
    p.add_argument("--attention", choices=[k.value for k in AttentionKind], default=AttentionKind.FLASH.value,
                   help="flash (FlashAttention/SDPA, default: no s x s scores kept) or eager (Korthikanti's count)")
    p.add_argument("--json", action="store_true", help="print JSON (most loaded rank at the top level)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw ZeRO 0-3 stacked bars to FILE.png")
    p.set_defaults(handler=_run)


def _model(args):
    if (args.model is None) == (args.params is None):
        raise cli_common.UsageError("give --model NAME|config.json or --params COUNT (one of them)")
    if args.params is not None:
        return ParamCountModel(params=parse_param_count(args.params))
    return load_model(args.model)


def build(args) -> tuple[object, object, MemoryStrategy]:
    """(model, cluster, strategy) from the parsed arguments."""
    model = _model(args)
    dp, tp, pp = resolve_degrees(args.gpus, args.dp, args.tp, args.pp)
    cluster = load_cluster(args.cluster)
    cluster = with_nodes(cluster, max(cluster.nodes, ceil(args.gpus / cluster.node.gpus_per_node)))
    schedule = ScheduleKind(args.schedule)
    default_seq = model.seq_len if isinstance(model, TransformerSpec) else 2048
    strategy = MemoryStrategy(
        dp=dp, tp=tp, pp=pp, zero=ZeroStage(args.zero), offload=Offload(args.offload),
        offload_activations=args.offload_activations, mbs=args.mbs,
        seq=args.seq if args.seq is not None else default_seq,
        recompute=Recompute(args.recompute), sp=args.sp, schedule=schedule,
        microbatches=args.microbatches if args.microbatches is not None else pp,
        virtual_stages=args.virtual_stages if args.virtual_stages is not None else (
            2 if schedule is ScheduleKind.INTERLEAVED else 1),
        partitioning=Partitioning(args.partitioning) if args.partitioning else None,
        framework=Framework(args.framework) if args.framework else None,
        gradient_as_bucket_view=args.bucket_view, flash_attention=AttentionKind(args.attention) is AttentionKind.FLASH)
    return model, cluster, strategy


def _run(args: argparse.Namespace) -> int:
    model, cluster, strategy = build(args)
    report = memory_report(model, cluster, strategy)
    if args.plot:
        plot_zero_stages(model, cluster, strategy, args.plot)
    if args.json:
        cli_common.print_json(report.to_dict() | {"cluster": cluster.name, "gpus": args.gpus})
    else:
        print(format_report(report, cluster.name))
        if args.plot:
            print(f"plot: {args.plot}")
    return 0


def _gb(x: float) -> str:
    return f"{x / GB:10.2f}"


def format_report(r: MemoryReport, cluster_name: str) -> str:
    """The text table: header, the most loaded rank's breakdown, host/NVMe, stages, verdict, notes."""
    s, w = r.strategy, r.worst
    lines = [f"{r.model_name} on {s.world_size} x {r.device_name} ({cluster_name}): dp={s.dp} tp={s.tp} pp={s.pp}"
             f"{' +sp' if s.sp else ''}, ZeRO-{int(s.zero)}, offload {s.offload.value}"
             f"{' +activations' if s.offload_activations else ''}, {s.resolved_framework.value} "
             f"({s.resolved_partitioning.value}), mbs {s.mbs}, seq {s.seq}, "
             f"{'flash' if s.flash_attention else 'eager'} attention, recompute {s.recompute.value}" + (f", {s.schedule.value} m={s.microbatches}"
                                                 + (f" v={s.virtual_stages}" if s.virtual_stages > 1 else "")
                                                 if s.pp > 1 else ""),
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
                 ("  embedding + logits", a.embedding_bytes + a.head_bytes)]
    rows += [("buffers", w.buffers_bytes), ("  gradient buckets", w.buffers.grad_buckets_bytes),
             ("  gathered blocks (ZeRO-3, FSDP2)", w.buffers.gathered_params_bytes),
             ("framework overhead (assumed)", w.overhead_bytes)]
    lines += [f"  {name:<38}{_gb(value)}" for name, value in rows]
    lines.append(f"  {'total':<38}{_gb(w.total_bytes)}  of {r.device_memory_bytes / GB:.2f}")
    if r.host_node_bytes or r.nvme_node_bytes:
        lines.append(f"  {'host memory (this rank)':<38}{_gb(w.host_bytes)}")
        lines.append(f"  {'host per node (x{0} ranks, states x1.5)'.format(r.ranks_per_node):<38}"
                     f"{_gb(r.host_node_bytes)}  of {(r.host_capacity_bytes or 0) / GB:.0f}")
    if r.nvme_node_bytes:
        lines.append(f"  {'NVMe per node':<38}{_gb(r.nvme_node_bytes)}  of {(r.nvme_capacity_bytes or 0) / GB:.0f}")
    if len(r.stages) > 1:
        lines.append("per stage (GB)  blocks  params   grads     opt    acts  buffers overhead   total    host")
        for st in r.stages:
            lines.append(f"  stage {st.stage:<7}{st.blocks:>6}" + "".join(
                f"{v / GB:>8.2f}" for v in (st.params_bytes, st.grads_bytes, st.optimizer_bytes,
                                            st.activations_bytes, st.buffers_bytes, st.overhead_bytes,
                                            st.total_bytes, st.host_bytes)))
    lines.append("verdict: fits" if r.fits else "verdict: DOES NOT FIT - " + "; ".join(r.reasons))
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)
