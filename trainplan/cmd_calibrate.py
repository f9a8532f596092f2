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
from trainplan.calibrate_compute_output import compute_dict as _compute_dict, print_compute as _print_compute
from trainplan.calibrate_output import as_dict as _as_dict, print_table as _print_table




def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure local collectives and fit a cluster file",
                              description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--backend", default=BACKENDS[0],
                   help=f"{' or '.join(BACKENDS)} (gloo: CPU processes, nccl: one GPU per process; "
                        f"default: {BACKENDS[0]})")
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
                   help="timed calls per size and algorithm (default: 20; on gloo ×4 where at most 1 process per "
                        "core runs, ×2 at most 1.5: their calls vary more; with --compute 10)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls before them (default: 3; with --compute 2)")
    p.add_argument("--check", action="store_true",
                   help="after the fit, measure the same calls again and print their errors against the written file")
    p.add_argument("--cluster", default="localhost-cpu",
                   help="base cluster (preset name or file) to fit: the local machine, so not the dgx-a100 of the "
                        "other commands (default: localhost-cpu)")
    p.add_argument("--fit-reduction", action="store_true",
                   help="also fit the reduction rate (device.hbm_bw_GBps); off: keep the base value")
    p.add_argument("--json", action="store_true", help="print the fit as JSON instead of a table")
    p.add_argument("--compute", action="store_true",
                   help="measure compute (GEMMs, memory-bound kernels, per-kernel overhead) into the device "
                        "fields of --cluster instead of the collectives; --nproc sets the threads per rank")
    p.add_argument("--model", default="llama2-7b",
                   help="with --compute: the model whose tiny run is measured (default: llama2-7b)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="with --compute: the format (default: fp32)")
    p.add_argument("--threads", type=int, default=None,
                   help="with --compute: torch threads (default as execute: cores ÷ --nproc, at least 1)")
    p.set_defaults(handler=run)


def run(args) -> int:
    if args.compute:
        args.repeats = 10 if args.repeats is None else args.repeats
        args.warmup = 2 if args.warmup is None else args.warmup
        return run_compute(args)
    from executor.calibrate import calibrate
    from executor.calibrate_moments import MOMENTS
    from executor.calibrate_run import (DEFAULT_PROCESSES, DEFAULT_REPEATS, DEFAULT_SIZES, DEFAULT_WARMUP, calls_text,
                                        probes_for, series_for)

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
          f"{args.backend} processes, {len(sizes)} sizes, {args.warmup} warm-up + "
          f"{calls_text(nprocs, args.repeats, args.backend, MOMENTS)} timed calls each",
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
    comm = cluster.comm
    measured_apart = (comm.async_broadcast_us, comm.group_wait_us, comm.dtensor_wait_us, comm.dtensor_sp_wait_us,
                      comm.fsdp2_wait_us)
    if args.json:
        cli_common.print_json(_as_dict(fit, str(path), fresh, *measured_apart))
    else:
        _print_table(fit, fresh, *measured_apart)
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
