"""``trainplan collective``: estimated (and optionally measured) collective times, nccl-tests style."""

from __future__ import annotations

import argparse
import sys

from executor.launch import BACKENDS
from simulator.cluster.io import load_cluster
from simulator.collectives import registry
from simulator.collectives.base import Op
from simulator.errors import SpecError
from simulator.jsonio import check_plot_path
from simulator.units import format_size, parse_size_range
from trainplan.cli_common import UsageError, print_json
from trainplan.strategy_flags import DEFAULT_CLUSTER


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collective", help="estimate collective times per algorithm (nccl-tests style table)",
                       description="Estimate a collective's time, algorithm and bus bandwidth on a cluster; "
                                   "with --measure, also run it for real on local processes and show the error.")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, metavar="NAME|FILE",
                   help=f"cluster preset (see `trainplan cluster list`) or file (default: {DEFAULT_CLUSTER}, as in "
                        "memory, simulate and plan; --measure needs the calibrated local one)")
    p.add_argument("--nodes", type=int, help="number of nodes (overrides the preset's or file's)")
    p.add_argument("--op", default=Op.ALL_REDUCE.value, help=f"{', '.join(o.value for o in Op)} "
                                                            f"(default: {Op.ALL_REDUCE.value})")
    p.add_argument("--algorithm", default="auto",
                   help="an algorithm name or a comma-separated list (ring,tree), 'auto' (the fastest, "
                        f"as NCCL's tuner picks) or 'all' (default: auto); names: {', '.join(registry.algorithm_names())}"
                        " (with --measure also 'native', the backend's own)")
    p.add_argument("--ranks", type=int, help="use the first R ranks in placement order (default: all, or --nproc)")
    p.add_argument("--bytes", default="1KiB..1GiB",
                   help="a size (64MB) or a range SMALL..LARGE doubling from SMALL (default 1KiB..1GiB, the powers "
                        "of two); KB/MB/GB are decimal (10^3, 10^6, 10^9 bytes), KiB/MiB/GiB binary (2^10, 2^20, 2^30)")
    p.add_argument("--json", action="store_true", help="print a JSON list of rows instead of the table")
    p.add_argument("--plot", metavar="FILE.png", help="draw time and bus bandwidth against size per algorithm")
    m = p.add_argument_group("measurement (runs the collective for real on this machine)")
    m.add_argument("--measure", action="store_true", help="also measure each row with torch.distributed")
    m.add_argument("--backend", default=BACKENDS[0], choices=BACKENDS, help=f"torch.distributed backend (default: {BACKENDS[0]})")
    m.add_argument("--nproc", type=int, help="local processes to launch (equals --ranks)")
    m.add_argument("--repeats", type=int, default=10, help="timed calls per size, median reported (default: 10)")
    m.add_argument("--warmup", type=int, default=2, help="untimed calls per size before timing (default: 2)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.plot:
        check_plot_path(args.plot)  # before the estimates or measurements run
    cluster = load_cluster(args.cluster, nodes=args.nodes)
    op = Op.parse(args.op)
    if args.measure:
        _check_measured_cluster(args, cluster)
    if args.measure and args.nproc:
        from executor.collective_bench import local_cluster
        from executor.launch import check_local_processes

        check_local_processes(args.nproc, "nproc")  # refused before any work; warned when measuring
        cluster = local_cluster(args.nproc, cluster)  # one local process per rank on one node
    ranks = _ranks(args, cluster.world_size)
    sizes = parse_size_range(args.bytes, "bytes")
    algorithms = _algorithms(args.algorithm, op, cluster, ranks, allow_native=args.measure)
    if args.measure:
        rows = _measured_rows(args, cluster, op, algorithms, len(ranks), sizes)
    else:
        rows = [registry.estimate(cluster, ranks, op, size, algo).as_dict() for size in sizes for algo in algorithms]
    if args.plot:
        _plot(rows, args.plot, f"{op.value} on {cluster.name}, {len(ranks)} ranks")
    if args.json:
        print_json(rows)
    else:
        print(f"# {op.value} on {cluster.name} ({cluster.nodes} node(s)), {len(ranks)} ranks")
        print(format_table(rows))
    if args.plot:
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _check_measured_cluster(args: argparse.Namespace, cluster) -> None:
    """--measure compares the estimate with this machine: the cluster must model the library measured
    (a gloo run on CPUs against an NCCL GPU preset printed err% -98.9 without a word)."""
    from simulator.cluster.comm import CommLibrary

    wanted = CommLibrary.GLOO if args.backend == "gloo" else CommLibrary.NCCL
    other = CommLibrary.NCCL if wanted is CommLibrary.GLOO else CommLibrary.GLOO  # IDEAL (a user's α-β file) passes
    if cluster.comm.library is other:
        raise SpecError("cluster", f"{cluster.name} models {other.value}, but --measure runs "
                        f"{args.backend} on this machine: give a cluster of the machine measured "
                        f"({'localhost-cpu, or ' if wanted is CommLibrary.GLOO else ''}a file from `trainplan "
                        "calibrate`)")


def _ranks(args: argparse.Namespace, world: int) -> list[int]:
    count = args.ranks
    if args.nproc is not None:
        if args.nproc < 2:
            raise SpecError("nproc", f"must be at least 2, got {args.nproc}")
        if count is not None and count != args.nproc:
            raise UsageError(f"--ranks {count} and --nproc {args.nproc} differ; measured ranks are the processes")
        count = args.nproc
    if args.measure and count is None:
        raise UsageError("--measure needs --nproc N (the number of local processes to launch)")
    count = world if count is None else count
    if count < 2:
        raise SpecError("ranks", f"a collective needs at least 2 ranks, got {count}")
    if count > world:
        raise SpecError("ranks", f"{count} ranks but the cluster has {world} GPUs; lower --ranks or raise --nodes")
    return list(range(count))


MAX_ALL_RANKS = 1024
"""The most ranks ``--algorithm all`` compares on: a bound on work. Measured 2026-11-24 (2-core VM shared
with other jobs, CPU time), ``collective --cluster dgx-h100 --algorithm all --bytes 1KB..1MB``: 8,192
ranks 82 s (after the pair-costing algorithms were bounded; 11.8 GB and past 60 s before), found by the
long CLI fuzz run; 1,024 ranks: 13.5 s."""


def _algorithms(text: str, op: Op, cluster, ranks: list[int], allow_native: bool = False) -> list[str]:
    """``all``, ``auto``, one name, or a comma-separated list of names, each checked against the op.

    With ``--measure``, ``native`` names the backend's own collective (``dist.all_reduce`` ...),
    compared with the simulator's ``auto`` choice.
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise SpecError("algorithm", "give an algorithm name, 'auto' or 'all'")
    chosen: list[str] = []
    for name in names:
        if name == "native":
            if not allow_native:
                raise UsageError("--algorithm native (the backend's own collective) needs --measure")
            found = ["native"]
        elif name == "auto" and allow_native:
            raise UsageError("with --measure, name the algorithms to run (e.g. ring,tree,native); "
                             "'auto' is not an algorithm that can be run")
        else:
            found = _one_algorithm(name, op, cluster, ranks)
        chosen.extend(a for a in found if a not in chosen)
    return chosen


def _one_algorithm(name: str, op: Op, cluster, ranks: list[int]) -> list[str]:
    able = registry.supporting(op, cluster, ranks)
    if name == "all":
        if not able:
            raise registry.refusal("all", op, cluster, ranks)
        if len(ranks) > MAX_ALL_RANKS:
            raise SpecError("algorithm", f"'all' over {len(ranks):,} ranks costs every algorithm on every rank's "
                            f"placement (minutes); it stops at {MAX_ALL_RANKS:,} ranks: name the algorithms "
                            f"instead, e.g. --algorithm {','.join(able[:2])}")
        return able
    if name != "auto" and name not in registry.algorithm_names():
        known = ", ".join(["auto", "all", *registry.algorithm_names()])
        raise SpecError("algorithm", f"unknown algorithm {name!r}; known: {known}")
    if name != "auto" and name not in able:
        raise registry.refusal(name, op, cluster, ranks)
    return [name]


def _measured_rows(args, cluster, op, algorithms, nproc, sizes) -> list[dict]:
    from executor.collective_bench import measure_vs_estimate
    from executor.launch import check_local_processes

    warning = check_local_processes(nproc, "nproc")
    if warning:
        print(warning, file=sys.stderr)

    return measure_vs_estimate(cluster, op, algorithms, nproc, sizes, backend=args.backend,
                               repeats=args.repeats, warmup=args.warmup, progress=True)


def format_table(rows: list[dict]) -> str:
    """An nccl-tests-like table: size, algorithm, protocol, time, algbw, busbw (and measured columns)."""
    measured = any("measured_time_s" in r for r in rows)
    head = f"{'size':>8}  {'algorithm':<18} {'proto':<6} {'time(us)':>11} {'algbw(GB/s)':>11} {'busbw(GB/s)':>11}"
    if measured:
        head += f" {'meas(us)':>11} {'p10-p90(us)':>17} {'err%':>7}"
    lines = [head]
    for r in rows:
        line = (f"{format_size(r['bytes']):>8}  {r['algorithm']:<18} {r['protocol'] or '-':<6} "
                f"{r['time_s'] * 1e6:>11.2f} {r['algbw_GBps']:>11.3f} {r['busbw_GBps']:>11.3f}")
        if measured:
            spread = f"{r['measured_p10_s'] * 1e6:.0f}-{r['measured_p90_s'] * 1e6:.0f}"
            line += f" {r['measured_time_s'] * 1e6:>11.2f} {spread:>17} {r['error_pct']:>+7.1f}"
        lines.append(line)
    return "\n".join(lines)


def _plot(rows: list[dict], path: str, title: str) -> None:
    """Write :func:`collective_figure` of ``rows`` to ``path``."""
    try:
        collective_figure(rows, title).savefig(path, dpi=120)
    except OSError as err:
        raise SpecError("plot", f"cannot write {path}: {err.strerror}") from None


def collective_figure(rows: list[dict], title: str):
    """Time and bus bandwidth against message size, one line per algorithm, as a ``matplotlib.figure.Figure``
    (no pyplot state, no backend switch)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.5))
    ax_t, ax_b = fig.subplots(1, 2)
    for algo in dict.fromkeys(r["algorithm"] for r in rows):
        mine = [r for r in rows if r["algorithm"] == algo]
        sizes = [r["bytes"] for r in mine]
        line, = ax_t.plot(sizes, [r["time_s"] * 1e6 for r in mine], marker="o", ms=3, label=f"{algo} (est.)")
        ax_b.plot(sizes, [r["busbw_GBps"] for r in mine], marker="o", ms=3, color=line.get_color(), label=algo)
        if "measured_time_s" in mine[0]:
            ax_t.plot(sizes, [r["measured_time_s"] * 1e6 for r in mine], ls="--", marker="x",
                      color=line.get_color(), label=f"{algo} (measured)")
    for ax, ylabel in ((ax_t, "time (µs)"), (ax_b, "bus bandwidth (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_yscale("log")
    ax_t.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
