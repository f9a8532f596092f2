"""``trainplan calibrate``: measure collectives on local processes and fit a cluster file to them.

Example::

    trainplan calibrate --backend gloo --nproc 4 --out local.yaml --sizes 64KiB..64MiB --algorithms ring,tree

Progress goes to stderr while measuring; stdout gets the fitted parameters, the error table
(size, algorithm, measured median and p10–p90, fitted estimate, error %) and the median absolute
error. The written file loads like any other cluster (``--cluster local.yaml``).
"""

from __future__ import annotations

import sys

from executor.launch import BACKENDS
from simulator.collectives.base import Op
from trainplan import cli_common


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure local collectives and fit a cluster file",
                              description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--backend", default=BACKENDS[0],
                   help=f"{' or '.join(BACKENDS)} (gloo: CPU processes, nccl: one GPU per process; default: {BACKENDS[0]})")
    p.add_argument("--nproc", type=int, default=2, help="number of local processes (default 2)")
    p.add_argument("--out", required=True, help="cluster YAML file to write")
    p.add_argument("--sizes", default="64KiB..64MiB",
                   help="message sizes SMALL..LARGE, doubling from SMALL (default 64KiB..64MiB); KB/MB/GB are "
                        "decimal (10^3, 10^6, 10^9 bytes), KiB/MiB/GiB binary (2^10, 2^20, 2^30)")
    p.add_argument("--algorithms", default="ring,tree", help="replayed algorithms to fit, comma-separated (default: ring,tree)")
    p.add_argument("--op", default=Op.ALL_REDUCE.value,
                   help=f"collective to measure: {', '.join(o.value for o in Op)} (default {Op.ALL_REDUCE.value})")
    p.add_argument("--repeats", type=int, default=10, help="timed calls per size and algorithm (default: 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before them (default: 2)")
    p.add_argument("--cluster", default="localhost-cpu", help="base cluster (preset name or file) to fit: the local machine, so not the dgx-a100 of the other commands (default: localhost-cpu)")
    p.add_argument("--fit-reduction", action="store_true",
                   help="also fit the reduction rate (device.hbm_bw_GBps); off: keep the base value")
    p.add_argument("--json", action="store_true", help="print the fit as JSON instead of a table")
    p.set_defaults(handler=run)


def run(args) -> int:
    from executor.calibrate import calibrate
    from executor.launch import check_backend
    from simulator.collectives.base import Op
    from simulator.errors import SpecError
    from simulator.units import parse_size_range

    from simulator.cluster.io import FILE_SUFFIXES
    from simulator.jsonio import check_suffix, check_writable

    check_suffix(args.out, FILE_SUFFIXES, "out")  # before any measurement runs
    check_writable(args.out, "out")
    if args.nproc < 2:
        raise SpecError("nproc", f"a collective needs at least 2 processes, got {args.nproc}")
    from executor.launch import check_local_processes

    warning = check_local_processes(args.nproc, "nproc")  # refused here; the warning once all checks pass
    if args.repeats < 1 or args.warmup < 0:
        raise SpecError("repeats", "need --repeats >= 1 and --warmup >= 0")
    check_backend(args.backend)
    from simulator.cluster.io import load_cluster, save_cluster

    op = Op.parse(args.op)
    sizes = parse_size_range(args.sizes, "sizes")
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    if not algorithms:
        raise SpecError("algorithms", "give at least one algorithm, e.g. ring,tree")
    base = load_cluster(args.cluster)
    _check_algorithms(algorithms, op, base, args.nproc)
    if warning:
        print(warning, file=sys.stderr)
    print(f"calibrate: {op.value} with {', '.join(algorithms)} on {args.nproc} {args.backend} processes, "
          f"{len(sizes)} sizes, {args.warmup} warm-up + {args.repeats} timed calls each", file=sys.stderr)
    cluster, fit = calibrate(nproc=args.nproc, sizes=sizes, algorithms=algorithms, op=op, backend=args.backend,
                             repeats=args.repeats, warmup=args.warmup, base=base,
                             fit_reduction=args.fit_reduction, progress=True)
    path = save_cluster(cluster, args.out)
    print(f"calibrate: wrote {path}", file=sys.stderr)
    if args.json:
        cli_common.print_json(_as_dict(fit, str(path)))
    else:
        _print_table(fit)
    return 0


def _as_dict(fit, path: str) -> dict:
    return {"out": path, "call_latency_us": fit.call_latency_us, "latency_us": fit.latency_us,
            "bw_GBps": fit.bw_GBps, "hbm_bw_GBps": fit.hbm_bw_GBps, "fitted": list(fit.fitted),
            "median_abs_error_pct": fit.median_abs_error_pct, "relinearised": fit.relinearised,
            "rows": [{"algorithm": r.algorithm, "ranks": r.ranks, "bytes": r.nbytes, "measured_s": r.measured_s,
                      "measured_p10_s": r.p10_s, "measured_p90_s": r.p90_s, "estimate_s": r.estimate_s,
                      "error_pct": r.error_pct} for r in fit.rows]}


def _print_table(fit) -> None:
    from simulator.units import format_size

    kept = "" if "inv_hbm_bw" in fit.fitted else " (kept)"
    print(f"call latency  {fit.call_latency_us:10.2f} us\nhop latency   {fit.latency_us:10.2f} us\n"
          f"bandwidth     {fit.bw_GBps:10.3f} GB/s\nreduction bw  {fit.hbm_bw_GBps:10.3f} GB/s{kept}\n")
    print(f"{'size':>8} {'algorithm':>9} {'measured ms':>12} {'p10..p90 ms':>17} {'estimate ms':>12} {'error %':>8}")
    for r in fit.rows:
        spread = f"{r.p10_s * 1e3:.3f}..{r.p90_s * 1e3:.3f}"
        print(f"{format_size(r.nbytes):>8} {r.algorithm:>9} {r.measured_s * 1e3:12.3f} {spread:>17} "
              f"{r.estimate_s * 1e3:12.3f} {r.error_pct:8.1f}")
    lo, hi = fit.abs_error_spread_pct
    print(f"\nmedian absolute error {fit.median_abs_error_pct:.1f} % (range {lo:.1f}..{hi:.1f} %) "
          f"over {len(fit.rows)} points")


def _check_algorithms(algorithms: list[str], op, base, nproc: int) -> None:
    """Every name must be a registered algorithm that implements ``op`` on ``nproc`` local ranks."""
    from executor.collective_bench import local_cluster
    from simulator.collectives.registry import algorithm_names, supporting
    from simulator.errors import SpecError

    cluster, ranks = local_cluster(nproc, base), list(range(nproc))
    able = supporting(op, cluster, ranks)
    for name in algorithms:
        if name not in algorithm_names():
            raise SpecError("algorithms", f"unknown algorithm {name!r}; known: {', '.join(algorithm_names())}")
        if name not in able:
            raise SpecError("algorithms", f"{name} does not implement {op.value} on {nproc} ranks; use one of: "
                                          f"{', '.join(able)}")
