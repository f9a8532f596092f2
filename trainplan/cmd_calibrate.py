"""``trainplan calibrate``: measure collectives on local processes and fit a cluster file to them;
with ``--compute``, measure this machine's compute into the device fields instead.

Examples::

    trainplan calibrate --backend gloo --nproc 2,3,4 --out local.yaml --check
    trainplan calibrate --backend gloo --nproc 4 --out local.yaml --sizes 64KiB..64MiB --algorithms ring,tree
    trainplan calibrate --compute --nproc 4 --cluster local.yaml --out local.yaml

Progress goes to stderr while measuring; stdout gets the fitted parameters with their bootstrap p10..p90,
the error table (processes, op, size, algorithm, measured mean, median and p10–p90, fitted estimate,
error %) and the median absolute error; with ``--check``, the same table for a fresh measurement against
the written file. The written file loads like any other cluster (``--cluster local.yaml``).
"""

from __future__ import annotations

import sys

from executor.launch import BACKENDS
from simulator.collectives.base import Op
from simulator.errors import SpecError
from trainplan import cli_common
from trainplan.calibrate_output import as_dict as _as_dict, print_table as _print_table




def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure local collectives and fit a cluster file",
                              description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--backend", default=BACKENDS[0],
                   help=f"{' or '.join(BACKENDS)} (gloo: CPU processes, nccl: one GPU per process; default: {BACKENDS[0]})")
    p.add_argument("--nproc", default=None,
                   help="local process counts to measure, comma-separated (default 2,3,4: the suite's; counts above "
                        "the cores time-share them, which the estimate charges by Host.cpu_cores); with --compute "
                        "one count, which sets the threads per rank (default 2)")
    p.add_argument("--out", required=True, help="cluster YAML file to write")
    p.add_argument("--sizes", default=None,
                   help="message sizes SMALL..LARGE, doubling from SMALL (default: 4KiB..4MiB in steps of ×4, the "
                        "suite's design); KB/MB/GB are decimal (10^3, 10^6, 10^9 bytes), KiB/MiB/GiB binary (2^10, "
                        "2^20, 2^30)")
    p.add_argument("--algorithms", default="native",
                   help="algorithms of --op to time and fit, comma-separated (default: native, gloo's own calls, as "
                        "the suite's plans make them, fitted with the algorithm gloo runs); registered names such as "
                        "ring,tree time replays of the simulator's schedules; an all-gather (native with native, else "
                        "the ring replay) is always timed beside them, so per-call and per-hop latencies separate")
    p.add_argument("--op", default=Op.ALL_REDUCE.value,
                   help=f"collective to measure: {', '.join(o.value for o in Op)} (default {Op.ALL_REDUCE.value})")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed calls per size and algorithm (default: 20; with --compute 10)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls before them (default: 3; with --compute 2)")
    p.add_argument("--check", action="store_true",
                   help="after the fit, measure the same calls again and print their errors against the written file")
    p.add_argument("--cluster", default="localhost-cpu", help="base cluster (preset name or file) to fit: the local machine, so not the dgx-a100 of the other commands (default: localhost-cpu)")
    p.add_argument("--fit-reduction", action="store_true",
                   help="also fit the reduction rate (device.hbm_bw_GBps); off: keep the base value")
    p.add_argument("--json", action="store_true", help="print the fit as JSON instead of a table")
    p.add_argument("--compute", action="store_true",
                   help="measure compute (GEMMs, memory-bound kernels, per-kernel overhead) into the device "
                        "fields of --cluster instead of the collectives; --nproc sets the threads per rank")
    p.add_argument("--model", default="llama2-7b", help="with --compute: the model whose tiny run is measured (default: llama2-7b)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="with --compute: the format (default: fp32)")
    p.add_argument("--threads", type=int, default=None,
                   help="with --compute: torch threads (default as execute: cores ÷ --nproc, at least 1)")
    p.set_defaults(handler=run)


def run(args) -> int:
    if args.compute:
        args.repeats = 10 if args.repeats is None else args.repeats
        args.warmup = 2 if args.warmup is None else args.warmup
        return run_compute(args)
    from executor.calibrate import calibrate
    from executor.calibrate_run import (DEFAULT_PROCESSES, DEFAULT_REPEATS, DEFAULT_SIZES, DEFAULT_WARMUP, probes_for,
                                        series_for)

    args.repeats = DEFAULT_REPEATS if args.repeats is None else args.repeats
    args.warmup = DEFAULT_WARMUP if args.warmup is None else args.warmup
    from executor.launch import check_backend, check_local_processes
    from simulator.cluster.io import FILE_SUFFIXES, load_cluster, save_cluster
    from simulator.jsonio import check_suffix, check_writable
    from simulator.units import parse_size_range

    check_suffix(args.out, FILE_SUFFIXES, "out")  # before any measurement runs
    check_writable(args.out, "out")
    nprocs = DEFAULT_PROCESSES if args.nproc is None else _process_counts(args.nproc)
    check_local_processes(max(nprocs), "nproc")  # refused here; sharing the cores is estimated, not warned about
    if args.repeats < 1 or args.warmup < 0:
        raise SpecError("repeats", "need --repeats >= 1 and --warmup >= 0")
    check_backend(args.backend)
    op = Op.parse(args.op)
    sizes = list(DEFAULT_SIZES) if args.sizes is None else parse_size_range(args.sizes, "sizes")
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    if not algorithms:
        raise SpecError("algorithms", "give at least one algorithm, e.g. ring,tree")
    base = load_cluster(args.cluster)
    series = series_for(op, algorithms)
    for nproc in nprocs:
        for series_op, algorithm in series:
            _check_algorithms([algorithm], series_op, base, nproc)
    print(f"calibrate: {', '.join(f'{o.value} {a}' for o, a in series)} on {', '.join(map(str, nprocs))} "
          f"{args.backend} processes, {len(sizes)} sizes, {args.warmup} warm-up + {args.repeats} timed calls each",
          file=sys.stderr)
    cluster, fit = calibrate(nproc=nprocs, sizes=sizes, algorithms=algorithms, op=op, backend=args.backend,
                             repeats=args.repeats, warmup=args.warmup, base=base,
                             fit_reduction=args.fit_reduction, progress=True)
    path = save_cluster(cluster, args.out)
    print(f"calibrate: wrote {path}", file=sys.stderr)
    fresh = None
    if args.check:
        from executor.calibrate_run import check

        print("calibrate: fresh measurement against the written file", file=sys.stderr)
        fresh = check(cluster, nproc=nprocs, sizes=sizes, series=series, probes=probes_for(algorithms, args.backend),
                      backend=args.backend, repeats=args.repeats, warmup=args.warmup, progress=True)
    if args.json:
        cli_common.print_json(_as_dict(fit, str(path), fresh, cluster.comm.async_broadcast_us))
    else:
        _print_table(fit, fresh, cluster.comm.async_broadcast_us)
    return 0


def _process_counts(text: str) -> tuple[int, ...]:
    """``--nproc``: comma-separated process counts, each at least 2, in the order given, without repeats."""
    try:
        counts = tuple(dict.fromkeys(int(part) for part in str(text).split(",") if part.strip()))
    except ValueError:
        raise SpecError("nproc", f"give process counts as integers, e.g. 2 or 2,3,4; got {text!r}") from None
    if not counts or min(counts) < 2:
        raise SpecError("nproc", f"a collective needs at least 2 processes, got {text}")
    return counts


def _check_algorithms(algorithms: list[str], op, base, nproc: int) -> None:
    """Every name must be ``native`` (for an op of ``registry.GLOO_NATIVE``) or a registered algorithm that
    implements ``op`` on ``nproc`` local ranks."""
    from executor.collective_bench import local_cluster
    from simulator.collectives.registry import algorithm_names, supporting
    from simulator.errors import SpecError

    from executor.calibrate_run import NATIVE, native_model

    cluster, ranks = local_cluster(nproc, base), list(range(nproc))
    able = supporting(op, cluster, ranks)
    for name in algorithms:
        if name == NATIVE:
            native_model(op)  # refuses an op whose native algorithm is not established
            continue
        if name not in algorithm_names():
            raise SpecError("algorithms", f"unknown algorithm {name!r}; known: {', '.join(algorithm_names())}")
        if name not in able:
            raise SpecError("algorithms", f"{name} does not implement {op.value} on {nproc} ranks; use one of: "
                                          f"{', '.join(able)}")


def run_compute(args) -> int:
    """``--compute``: check every input, measure, write ``--out``, print the fields and the tables."""
    from executor.calibrate_compute import calibrate_compute
    from executor.launch import check_backend
    from simulator.cluster.io import FILE_SUFFIXES, load_cluster, save_cluster
    from simulator.errors import SpecError
    from simulator.jsonio import check_suffix, check_writable
    from simulator.workload import DtypePolicy, TransformerSpec
    from simulator.workload.registry import load_model

    check_suffix(args.out, FILE_SUFFIXES, "out")
    check_writable(args.out, "out")
    try:
        args.nproc = 2 if args.nproc is None else int(args.nproc)
    except ValueError:
        raise SpecError("nproc", f"with --compute give one process count, e.g. 4; got {args.nproc!r}") from None
    if args.nproc < 1:
        raise SpecError("nproc", f"must be a positive integer, got {args.nproc}")
    if args.threads is not None and args.threads < 1:
        raise SpecError("threads", f"must be a positive integer, got {args.threads}")
    if args.repeats < 1 or args.warmup < 0:
        raise SpecError("repeats", "need --repeats >= 1 and --warmup >= 0")
    check_backend(args.backend)
    spec = load_model(args.model)
    if not isinstance(spec, TransformerSpec):
        raise SpecError("model", f"{args.model} is a layer list; --compute measures a transformer block")
    base = load_cluster(args.cluster)
    cluster, report = calibrate_compute(base, spec, dtype=DtypePolicy(args.precision), backend=args.backend,
                                        nproc=args.nproc, thread_count=args.threads, repeats=args.repeats,
                                        warmup=args.warmup, progress=True)
    path = save_cluster(cluster, args.out)
    print(f"calibrate: wrote {path}", file=sys.stderr)
    if args.json:
        cli_common.print_json(_compute_dict(report, str(path)))
    else:
        _print_compute(report)
    return 0


def _timing(t) -> dict:
    return {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s}


def _compute_dict(r, path: str) -> dict:
    d = r.fields
    return {"out": path, "device": r.device, "threads": r.threads, "precision": r.dtype.value,
            "peak_tflops": {k.value: v for k, v in d.peak_tflops.items()}, "hbm_bw_GBps": d.hbm_bw_GBps,
            "hbm_efficiency": d.gemm_efficiency.hbm_efficiency, "gemm_efficiency": [list(p) for p in d.gemm_efficiency.points],
            "kernel_launch_overhead_us": d.kernel_launch_overhead_us, "kernel_dispatch": d.kernel_dispatch.value,
            "backward_call_overhead_us": d.backward_call_overhead_us,
            "op_call_overhead_us": d.op_call_overhead_us, "bare_call": _timing(r.bare_call),
            "block": {**_timing(r.block), "kernels": r.block_kernels, "roofline_s": r.block_roofline_s,
                      **({} if r.block_phases is None else {"forward": _timing(r.block_phases[0]),
                                                            "backward": _timing(r.block_phases[1])})},
            "gemms": [{"m": g.shape.m, "n": g.shape.n, "k": g.shape.k, "batch": g.shape.batch, "tflops": g.tflops,
                       **_timing(g.timing)} for g in r.gemms],
            "memory": [{"kernel": m.kernel.value, "elements": m.elements, "bytes": m.bytes, "GBps": m.GBps,
                        **_timing(m.timing)} for m in r.memory],
            "tp_modules": None if r.tp_modules is None else {
                "modules": r.tp_modules.modules, "tp_forward_module_us": r.tp_modules.forward_module_us,
                "tp_backward_module_us": r.tp_modules.backward_module_us,
                **{name: _timing(getattr(r.tp_modules, name))
                   for name in ("plain_forward", "tp_forward", "plain_step", "tp_step")},
                "collectives": None if r.tp_modules.collectives is None else _timing(r.tp_modules.collectives)},
            "adamw": None if r.adamw is None else {"tensors": r.adamw.tensors, "params": r.adamw.params,
                                                   "step": _timing(r.adamw.step)},
            "checkpoint": None if r.checkpoint is None else {
                "regions": r.checkpoint.regions, "recompute_region_s": r.checkpoint.recompute_region_s,
                "checkpoint_forward_region_us": r.checkpoint.forward_region_us,
                "checkpoint_backward_region_us": r.checkpoint.backward_region_us,
                **{name: _timing(getattr(r.checkpoint, name)) for name in (
                    "plain_forward", "checkpointed_forward", "plain_step", "checkpointed_step")}},
            "fsdp2": None if r.fsdp2 is None else {
                "dp": r.fsdp2.dp, "modules": r.fsdp2.modules, "fsdp2_forward_module_us": r.fsdp2.forward_module_us,
                "fsdp2_backward_module_us": r.fsdp2.backward_module_us,
                **{name: _timing(getattr(r.fsdp2, name)) for name in ("plain_forward", "fsdp2_forward", "plain_step",
                                                                      "fsdp2_step")}},
            "fsdp2_zero2": None if r.fsdp2_zero2 is None else {
                "fsdp2_zero2_backward_module_us": r.fsdp2_zero2.backward_module_us,
                **{name: _timing(getattr(r.fsdp2_zero2, name)) for name in ("plain_step", "fsdp2_step")}},
            "pipeline": None if r.pipeline is None else {
                "schedule": r.pipeline.schedule.value, "pp": r.pipeline.pp, "micro_batches": r.pipeline.micro_batches,
                "actions": list(r.pipeline.actions), "pipeline_action_us": r.pipeline.action_us,
                "outside": [_timing(o) for o in r.pipeline.outside], "p2p": list(r.pipeline.p2p),
                "pipeline_p2p_post_us": r.pipeline.post_us, "post": [_timing(o) for o in r.pipeline.post]},
            "rank_steps": None if r.rank_steps is None else {
                "processes": r.rank_steps.processes, "micro_batches": r.rank_steps.micro_batches,
                **{name: [_timing(t) for t in getattr(r.rank_steps, name)]
                   for name in ("forward", "backward", "outside", "optimizer", "first_cold")},
                "block_call_us": list(r.block_call_us)},
            "ddp": None if r.ddp is None else {
                "ddp_forward_call_us": r.ddp.forward_call_us, "ddp_sync_backward_us": r.ddp.sync_backward_us,
                **{name: _timing(getattr(r.ddp, name)) for name in ("plain_forward", "ddp_forward", "plain_step",
                                                                    "ddp_step")}}}


def _print_compute(r) -> None:
    d = r.fields
    peak = ", ".join(f"{k.value} {v * 1e3:.1f} GFLOP/s" for k, v in d.peak_tflops.items())
    bwd = "" if d.backward_call_overhead_us is None else f" forward, {d.backward_call_overhead_us:.1f} us backward"
    split = ("" if r.block_phases is None else f": forward {r.block_phases[0].median_s * 1e3:.3f} + backward "
             f"{r.block_phases[1].median_s * 1e3:.3f}")
    adamw = ""
    if r.adamw:  # measured on gloo only (a GPU calibration has no host probes)
        adamw_s = r.adamw.step.median_s if r.rank_steps is None else r.rank_steps.optimizer_timing.median_s
        adamw = f": AdamW step {adamw_s * 1e3:.3f} ms over {r.adamw.tensors} tensors"
    print(f"device        {r.device}, {r.threads} thread(s), {r.dtype.value}\npeak          {peak}\n"
          f"memory bw     {d.hbm_bw_GBps:.2f} GB/s × efficiency {d.gemm_efficiency.hbm_efficiency:.3f}\n"
          f"per call      {d.kernel_launch_overhead_us:.1f} us{bwd} (block {r.block.median_s * 1e3:.3f} ms{split}, "
          f"{r.block_kernels} host calls, roofline {r.block_roofline_s * 1e3:.3f} ms; bare call "
          f"{r.bare_call.median_s * 1e6:.1f} us)\nper op call   {d.op_call_overhead_us:.1f} us (optimizer calls"
          f"{adamw}; dispatch {d.kernel_dispatch.value})")
    if r.rank_steps is not None:
        k = r.rank_steps
        print(f"rank step     forward {k.forward_s * 1e3:.3f} + backward {k.backward_s * 1e3:.3f} ms per micro-batch, "
              f"{k.outside_s * 1e3:.3f} ms per step outside them ({k.processes} processes in lockstep, "
              f"{k.micro_batches} micro-batches), AdamW {k.optimizer_timing.median_s * 1e3:.3f} ms: the per-call "
              f"figures above; the tight loops gave {r.block_call_us[0]:.1f} / {r.block_call_us[1] or 0.0:.1f} us "
              f"(block), {r.block_call_us[2]:.1f} us (AdamW); the first micro-batch's forward "
              f"{k.first_cold_s * 1e3:.3f} ms above the later ones' (host.step_loop_us, "
              f"host.first_microbatch_cold_us)")
    if r.tp_modules is not None:
        t = r.tp_modules
        where = ("a 1-rank mesh" if t.collectives is None else
                 f"a 2-rank tp group, its collectives' {t.collectives.median_s * 1e3:.3f} ms left out")
        print(f"per tp module {t.forward_module_us:.1f} us forward, {t.backward_module_us:.1f} us backward "
              f"(torch tensor parallelism on {where}, {t.modules} modules: forward "
              f"{t.tp_forward.median_s * 1e3:.3f} vs {t.plain_forward.median_s * 1e3:.3f} ms plain, forward + "
              f"backward {t.tp_step.median_s * 1e3:.3f} vs {t.plain_step.median_s * 1e3:.3f} ms)")
    if r.ddp is not None:
        print(f"DDP           {r.ddp.forward_call_us:.1f} us per forward call, {r.ddp.sync_backward_us:.1f} us per "
              f"synchronising backward (1-rank group, collective excluded)")
    if r.checkpoint is not None:
        print(f"checkpoint    {r.checkpoint.forward_region_us:.1f} us per region forward, "
              f"{r.checkpoint.backward_region_us:.1f} us per region backward (beyond its recompute, "
              f"{r.checkpoint.recompute_region_s * 1e6:.1f} us)")
    if r.fsdp2 is not None:
        print(f"FSDP2 module  {r.fsdp2.forward_module_us:.1f} us forward, {r.fsdp2.backward_module_us:.1f} us backward "
              f"(fake {r.fsdp2.dp}-rank group, {r.fsdp2.modules} modules, collectives excluded)")
    if r.pipeline is not None:
        p = r.pipeline
        print(f"pipeline      {p.action_us:.1f} us per schedule action ({p.schedule.value}, {p.pp} processes, "
              f"{p.micro_batches} micro-batches, {'/'.join(map(str, p.actions))} actions; outside the phases "
              f"{'/'.join(f'{o.median_s * 1e3:.3f}' for o in p.outside)} ms per step); {p.post_us:.1f} us posting "
              f"each send or receive")
    print()
    print(f"{'m':>6} {'n':>6} {'k':>6} {'batch':>5} {'median us':>10} {'p10..p90 us':>17} {'GFLOP/s':>8}")
    for g in r.gemms:
        s, t = g.shape, g.timing
        print(f"{s.m:6.0f} {s.n:6.0f} {s.k:6.0f} {s.batch:5.0f} {t.median_s * 1e6:10.1f} "
              f"{f'{t.p10_s * 1e6:.1f}..{t.p90_s * 1e6:.1f}':>17} {g.tflops * 1e3:8.2f}")
    print(f"\n{'kernel':>10} {'elements':>9} {'median us':>10} {'p10..p90 us':>19} {'GB/s':>7}")
    for m in r.memory:
        t = m.timing
        print(f"{m.kernel.value:>10} {m.elements:9d} {t.median_s * 1e6:10.1f} "
              f"{f'{t.p10_s * 1e6:.1f}..{t.p90_s * 1e6:.1f}':>19} {m.GBps:7.2f}")
