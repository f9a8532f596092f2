"""DES cost of one GPT-3 175B step as the GPU count grows: wall and CPU time, events, flows, peak RSS.

The layout of issue 12: ``gpt3-175b`` on ``dgx-a100`` nodes, tp 8, pp 8, 96 micro-batches of one
sequence per pipeline (global batch 96·dp), full activation recomputation, every other field the
:class:`~simulator.strategy.Strategy` default. Each size runs in a fresh process, so its peak RSS
(``ru_maxrss`` of that process: compile + simulate) is its own. The exponent is the least-squares
slope of log(simulate CPU time) against log(GPUs) over the sizes from 1,024 GPUs up: CPU time, because
on a shared machine the wall time also counts the other processes' turns (the 1-minute load average at
the end of each size is printed with it).

``--dp-algorithm ring|tree`` pins the data-parallel all-reduce's algorithm (the strategy's
``dp_sync.algorithm``; default ``auto``, the cost model's NCCL-tuner pick, which switches to trees at 512
nodes): with it pinned the workload's shape stays the same across the sizes, so the exponent measures the
engine rather than the workload's change. Per size the table also gives CPU per flow (µs) and per event (µs),
and a second exponent is fitted, of CPU time against flows (1.0: a constant cost per flow).

Run by hand: ``python benchmarks/bench_des.py [--max-gpus 16384] [--plot docs/des_scaling.png] [--timeout-s S]
[--exact] [--dp-algorithm auto|ring|tree]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

GPUS = (256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
TP, PP, MICRO_BATCHES = 8, 8, 96
FIT_FROM_GPUS = 1024


ALGORITHMS = ("auto", "ring", "tree")
"""The ``--dp-algorithm`` choices: ``AllReduceAlgorithm`` values (auto is the strategy's default)."""


def step_case(gpus: int, algorithm: str = "auto"):
    """The benchmark's case at ``gpus`` GPUs: (cluster, model, strategy), GPT-3 175B on DGX A100 nodes, tp 8, pp 8,
    96 micro-batches per pipeline, full recompute, the dp all-reduce's ``algorithm`` (an ``AllReduceAlgorithm``
    value; the other ``bench_des_*`` counting benchmarks use it too)."""
    from simulator.cluster.presets import load_preset
    from simulator.strategy import AllReduceAlgorithm, AllReduceSync, Recompute, Strategy
    from simulator.workload.presets import get_preset

    dp = gpus // (TP * PP)
    cluster = load_preset("dgx-a100").with_nodes(gpus // 8)
    sync = AllReduceSync(algorithm=AllReduceAlgorithm.parse(algorithm))
    strategy = Strategy(global_batch=MICRO_BATCHES * dp, tp=TP, pp=PP, recompute=Recompute.FULL, dp_sync=sync)
    return cluster, get_preset("gpt3-175b"), strategy


def sizes_or_child(measure, default_gpus: list[int]) -> list[int] | None:
    """The counting benchmarks' command line: ``--gpus`` sizes, each measured in a child process (a size's peak
    memory and collector state its own). In a child (``--child N``) print ``measure(N)`` as JSON and return None."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=default_gpus)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return None
    return args.gpus


def child_measure(script: str, gpus: int) -> dict:
    """``script --child gpus`` run in a fresh interpreter, its JSON answer."""
    out = subprocess.run([sys.executable, script, "--child", str(gpus)], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def measure(gpus: int, exact: bool, algorithm: str = "auto") -> dict:
    """Compile and simulate one step at ``gpus`` GPUs in this process; times in seconds, CPU per flow and
    per event in µs (simulate CPU time over the step's flows or events)."""
    from simulator.compile import compile_step
    from simulator.engine.step import simulate

    dp = gpus // (TP * PP)
    cluster, model, strategy = step_case(gpus, algorithm)
    t0 = time.perf_counter()
    work = compile_step(cluster, model, strategy)
    compile_s = time.perf_counter() - t0
    gc.collect()
    w0, c0 = time.perf_counter(), time.process_time()
    res = simulate(work, cluster, trace=False, shortcuts=not exact)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {"gpus": gpus, "dp": dp, "step_s": res.step_time_s, "compile_s": compile_s, "wall_s": wall, "cpu_s": cpu,
            "events": res.extras["events"], "flows": res.extras["flows"], "algorithm": algorithm,
            "cpu_per_flow_us": cpu / max(res.extras["flows"], 1) * 1e6,
            "cpu_per_event_us": cpu / max(res.extras["events"], 1) * 1e6,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "load_1m": os.getloadavg()[0]}


def fitted_exponent(rows: list[dict], against: str = "gpus") -> float:
    """Least-squares slope of log(cpu_s) on log(row[against]) (``gpus`` or ``flows``) over the rows from
    FIT_FROM_GPUS GPUs up."""
    pts = [(math.log(r[against]), math.log(r["cpu_s"])) for r in rows if r["gpus"] >= FIT_FROM_GPUS]
    if len(pts) < 2:
        return math.nan
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def plot(rows: list[dict], exponent: float, path: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    gpus = [r["gpus"] for r in rows]
    algo = rows[-1].get("algorithm", "auto")
    pinned = "" if algo == "auto" else f", dp all-reduce {algo}"
    ax.loglog(gpus, [r["cpu_s"] for r in rows], "o-",
              label=f"simulate, CPU (slope {exponent:.2f} from {FIT_FROM_GPUS}{pinned})")
    ax.loglog(gpus, [r["wall_s"] for r in rows], "x:", label="simulate, wall (shared machine)")
    ax.loglog(gpus, [r["compile_s"] for r in rows], "s--", label="compile, wall")
    ref = rows[-1]
    ax.loglog(gpus, [ref["cpu_s"] * g / ref["gpus"] for g in gpus], ":", color="gray", label="linear")
    ax.set_xlabel("GPUs (GPT-3 175B, tp 8 × pp 8, 96 micro-batches, full recompute)")
    ax.set_ylabel("time, s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax2 = ax.twinx()
    ax2.loglog(gpus, [r["peak_rss_mb"] for r in rows], "^-", color="tab:red", alpha=0.6)
    ax2.set_ylabel("peak RSS, MB", color="tab:red")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exact", action="store_true", help="no shortcuts (slow)")
    ap.add_argument("--max-gpus", type=int, default=16384)
    ap.add_argument("--plot", metavar="PNG", help="save the log-log plot here")
    ap.add_argument("--timeout-s", type=float, default=None,
                    help="wall-time limit per size; the first size over it is reported and ends the run")
    ap.add_argument("--dp-algorithm", choices=ALGORITHMS, default="auto",
                    help="pin the data-parallel all-reduce's algorithm (auto: the cost model's pick per size)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.exact, args.dp_algorithm)))
        return
    rows = []
    print(f"{os.cpu_count()} CPUs; load = 1-minute load average when the size ended (other processes' share); "
          f"dp all-reduce algorithm: {args.dp_algorithm}")
    print("| GPUs | dp | step s | compile s | simulate wall s | CPU s | events | flows | CPU/flow µs | CPU/event µs "
          "| peak RSS MB | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for gpus in (g for g in GPUS if g <= args.max_gpus):
        cmd = ([sys.executable, __file__, "--child", str(gpus), "--dp-algorithm", args.dp_algorithm]
               + (["--exact"] if args.exact else []))
        try:
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=args.timeout_s).stdout
        except subprocess.TimeoutExpired:
            print(f"| {gpus:,} | {gpus // (TP * PP)} | stopped after {args.timeout_s:.0f} s wall | | | | | | | | | "
                  f"{os.getloadavg()[0]:.1f} |")
            break
        r = json.loads(out)
        rows.append(r)
        print(f"| {gpus:,} | {r['dp']} | {r['step_s']:.3f} | {r['compile_s']:.2f} | {r['wall_s']:.2f} | "
              f"{r['cpu_s']:.2f} | {r['events']:,} | {r['flows']:,} | {r['cpu_per_flow_us']:.1f} | "
              f"{r['cpu_per_event_us']:.1f} | {r['peak_rss_mb']:.0f} | {r['load_1m']:.1f} |",
              flush=True)
    exponent = fitted_exponent(rows)
    print(f"\nfitted exponent (simulate CPU time, GPUs >= {FIT_FROM_GPUS}): {exponent:.2f}")
    print(f"fitted exponent of simulate CPU time against flows (same sizes): {fitted_exponent(rows, 'flows'):.2f}")
    steps = [f"{a['gpus']:,}->{b['gpus']:,}: x{b['cpu_s'] / a['cpu_s']:.2f}" for a, b in zip(rows, rows[1:])]
    print("per step of the sizes (simulate CPU time):", ", ".join(steps))
    if args.plot:
        plot(rows, exponent, args.plot)


if __name__ == "__main__":
    main()
