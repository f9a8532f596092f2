"""How long does each step of a replayed all-reduce take, by the number of processes busy in it?

The estimate prices a replayed collective (:mod:`simulator.collectives.replayed`) step by step: each step at the
time-sharing of the processes busy in it (``k_s = share_s / share``) and the call's wait for a core as the mean over
the steps of the wait measured at each step's busy processes (``W̄``; for ddp-tree's 4-rank tree on 2 cores
``(3·W(2) + 4·W(3)) / 7``). This probe measures what those rules describe: in one launch of ``--nproc`` gloo
processes it replays the ring and tree schedules the executor replays for ddp-ring and ddp-tree (built on the suite
plans' cluster, dgx-h100, for the tiny model's one DDP bucket, 481,392 B), interleaved, a barrier before each call,
and every rank stamps ``time.perf_counter`` (one clock for every process of the machine) after each step
(``executor.p2p.replay_schedule(step_ends=…)``). Per call:

    S   = the first rank's start of the call                       (after the barrier, and ``--matmuls``)
    E_s = the latest stamp of step s of any rank                  (every rank is through step s; a rank idle
                                                                   in s stamps it right after its step s−1)
    d_s = E_s − E_{s−1},  E_{−1} = S                              (the step's time on the critical path; the
                                                                   steps' sum is the call's slowest rank)

It prints each step's busy processes and the mean, median and 10th percentile of ``d_s`` over the calls, the
steps' means pooled by busy count, the calls' totals, and what ``--cluster`` prices each replay at (as the step
estimate does). The 10th percentile is the step without waits (calls are bimodal below ~1 MiB:
docs/calibration.md, "The wait for a core"); mean − p10 is its expected wait.

Usage: ``PYTHONPATH=. python benchmarks/replay_step_wait_probe.py --cluster CLUSTER.yaml --runs 3``.
Results: docs/validation.md ("tree19"), [src: own-replay-step-wait-2026-11-26].
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from executor import launch
from executor.collective_bench import percentile
from simulator.cluster.io import load_cluster
from simulator.collectives.base import Op, Schedule
from simulator.collectives.registry import build_schedule

BUCKET_BYTES = 481_392
"""The tiny gpt3-125m's gradients in fp32 (120,348 parameters): ddp-ring's and ddp-tree's one DDP bucket."""


def busy_ranks(schedule: Schedule) -> list[frozenset[int]]:
    """Group indices that send or receive a non-empty transfer in each step of ``schedule``."""
    return [frozenset(r for t in step if t.nbytes for r in (t.src, t.dst)) for step in schedule.steps()]


def step_times_s(starts: list[float], ends: list[list[float]]) -> list[float]:
    """``d_s`` of one call (module docstring): ``starts[r]`` is rank r's barrier exit, ``ends[r][s]`` its stamp
    after step s. E.g. two ranks starting at 0 and 1 with ends [[2, 5], [3, 4]]: [3, 2]."""
    previous, out = min(starts), []
    for s in range(len(ends[0])):
        end = max(e[s] for e in ends)
        out.append(end - previous)
        previous = end
    return out


def _worker(rank: int, world: int, schedules: dict, repeats: int, warmup: int, matmuls: int) -> dict[str, list]:
    """(start, step stamps) of this rank's timed calls of each schedule, interleaved, a barrier before each and
    then ``matmuls`` 256×256 fp32 matmuls (a step's compute before its gradient sync; the call starts after them)."""
    import time

    import torch
    import torch.distributed as dist

    from executor.p2p import replay_schedule

    bufs = {a: torch.full((s.nbytes // 4,), float(rank + 1)) for a, s in schedules.items()}
    a_mat = torch.randn(256, 256)
    out: dict[str, list] = {a: [] for a in schedules}
    for k in range(warmup + repeats):
        for a, s in schedules.items():
            stamps: list[float] = []
            dist.barrier()
            for _ in range(matmuls):
                torch.mm(a_mat, a_mat)
            start = time.perf_counter()
            replay_schedule(s, bufs[a], rank, step_ends=stamps)
            if k >= warmup:
                out[a].append((start, stamps))
    return out


def _loop_worker(rank: int, world: int, schedules: dict, rounds: int, iterations: int, matmuls: int) -> dict:
    """Seconds per iteration of ``matmuls`` matmuls then one replayed call, no barrier inside a block of
    ``iterations`` (a training step's loop: the replay is the only sync); blocks of each schedule and of the
    matmuls alone (``none``, a barrier after the block) interleaved over ``rounds``, the first round untimed."""
    import time

    import torch
    import torch.distributed as dist

    from executor.p2p import replay_schedule

    bufs = {a: torch.full((s.nbytes // 4,), float(rank + 1)) for a, s in schedules.items()}
    a_mat = torch.randn(256, 256)
    out: dict[str, list] = {a: [] for a in ("none", *schedules)}
    stamps: dict[str, list] = {a: [] for a in schedules}
    for k in range(rounds + 1):
        for a in out:
            dist.barrier()
            start = time.perf_counter()
            for i in range(iterations):
                for _ in range(matmuls):
                    torch.mm(a_mat, a_mat)
                if a != "none":
                    ends: list[float] = []
                    call = time.perf_counter()
                    replay_schedule(schedules[a], bufs[a], rank, step_ends=ends)
                    if k and i:  # the first iteration of a block starts from the barrier
                        stamps[a].append((call, ends))
            if a == "none":  # the others' blocks end together; this one ends at the barrier
                dist.barrier()
            if k:
                out[a].append((time.perf_counter() - start) / iterations)
    return {"per_iteration": out, "stamps": stamps}


def loop_main(args, schedules: dict) -> None:
    """``--loop``: each schedule's time per iteration less the matmuls' alone, and the tree's / ring's of that."""
    for run in range(args.runs):
        got = launch.run(_loop_worker, args.nproc, (schedules, args.repeats, 20, args.matmuls), backend="gloo")
        per_rank = [g["per_iteration"] for g in got]
        per = {a: [max(r[a][i] for r in per_rank) for i in range(args.repeats)] for a in per_rank[0]}
        for a, s in schedules.items():
            calls = [step_times_s([g["stamps"][a][i][0] for g in got], [g["stamps"][a][i][1] for g in got])
                     for i in range(len(got[0]["stamps"][a]))]
            summarise(a, s, calls)
        extra = {a: statistics.fmean(per[a]) - statistics.fmean(per["none"]) for a in schedules}
        print(f"run {run + 1} loop, {args.matmuls} matmuls: ms per iteration "
              + " ".join(f"{a} {statistics.fmean(v) * 1e3:.3f}" for a, v in per.items())
              + f"; replay's extra ring {extra['ring'] * 1e3:.3f} tree {extra['tree'] * 1e3:.3f}, tree / ring "
              f"{extra['tree'] / extra['ring']:.2f}", flush=True)


def summarise(name: str, schedule: Schedule, calls: list[list[float]]) -> dict[int, float]:
    """Print each step's busy count and mean / median / p10 of ``calls``' step times (ms); return the step means
    pooled by busy count (ms)."""
    busy = busy_ranks(schedule)
    pooled: dict[int, list[float]] = {}
    for s, ranks in enumerate(busy):
        times = [c[s] for c in calls]
        pooled.setdefault(len(ranks), []).extend(times)
        print(f"  {name} step {s}: busy {len(ranks)} mean {statistics.fmean(times) * 1e3:.3f} median "
              f"{statistics.median(times) * 1e3:.3f} p10 {percentile(times, 0.1) * 1e3:.3f} ms")
    totals = [sum(c) for c in calls]
    print(f"  {name} call: mean {statistics.fmean(totals) * 1e3:.3f} median {statistics.median(totals) * 1e3:.3f} "
          f"p10 {percentile(totals, 0.1) * 1e3:.3f} ms")
    means = {k: statistics.fmean(v) * 1e3 for k, v in sorted(pooled.items())}
    print(f"  {name} by busy count: " + ", ".join(
        f"{k}: mean {m:.3f} p10 {percentile(pooled[k], 0.1) * 1e3:.3f} ms" for k, m in means.items()))
    return {k: (m, m - percentile(pooled[k], 0.1) * 1e3) for k, m in means.items()}


def compare_steps(cluster, per_busy: dict[str, dict], nproc: int) -> None:
    """Print the tree's step time and step wait (mean − p10) per busy count over the ring's (all ``nproc`` busy),
    beside what each rule says a step at k busy costs of a ring step: the busy share ``max(1, k / cores) / share``
    and the wait of a node of k processes ``W(k) / W(nproc)`` (tree17's rule, from ``cluster``'s measured all-reduce
    waits)."""
    from simulator.collectives.cost import Env

    env = Env(cluster, None)
    ring_mean, ring_wait = per_busy["ring"][nproc]
    node_wait = cluster.comm.blocking_wait_s(nproc, Op.ALL_REDUCE)
    for k, (mean, wait) in per_busy["tree"].items():
        share = max(1.0, k / cluster.node.host.cpu_cores) / env.time_share
        w_rule = cluster.comm.blocking_wait_s(k, Op.ALL_REDUCE) / node_wait if node_wait > 0 else float("nan")
        print(f"  tree step at {k} busy / ring step: time {mean / ring_mean:.2f}, wait {wait / ring_wait:.2f}; busy "
              f"share {share:.2f}, W({k}) / W({nproc}) {w_rule:.2f}")


def main() -> None:
    from simulator.collectives.replayed import schedule_replay_time_s

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="localhost-cpu", help="cluster file whose prices are printed")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--repeats", type=int, default=60, help="timed calls of each schedule per run")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--loop", action="store_true", help="time blocks of iterations without barriers (a step's loop)")
    p.add_argument("--matmuls", type=int, default=0,
                   help="256x256 matmuls each rank runs between the barrier and the call (compute before the sync)")
    args = p.parse_args()
    plan = load_cluster("dgx-h100", nodes=1)
    ranks = list(range(args.nproc))
    schedules = {a: build_schedule(plan, ranks, Op.ALL_REDUCE, BUCKET_BYTES, a) for a in ("ring", "tree")}
    cluster = load_cluster(args.cluster)
    cluster = replace(cluster, node=replace(cluster.node, gpus_per_node=args.nproc))
    for a, s in schedules.items():
        print(f"priced {a}: {schedule_replay_time_s(cluster, s) * 1e3:.3f} ms")
    if args.loop:
        loop_main(args, schedules)
        return
    for run in range(args.runs):
        per_rank = launch.run(_worker, args.nproc, (schedules, args.repeats, args.warmup, args.matmuls), backend="gloo")
        print(f"run {run + 1}", flush=True)
        totals, from_last, fast, per_busy = {}, {}, {}, {}
        for a, s in schedules.items():
            calls = [step_times_s([r[a][i][0] for r in per_rank], [r[a][i][1] for r in per_rank])
                     for i in range(args.repeats)]
            per_busy[a] = summarise(a, s, calls)
            totals[a] = statistics.fmean(sum(c) for c in calls)
            fast[a] = percentile([sum(c) for c in calls], 0.1)
            from_last[a] = statistics.fmean(max(r[a][i][1][-1] for r in per_rank) - max(r[a][i][0] for r in per_rank)
                                            for i in range(args.repeats))
        print(f"  tree / ring of the mean call: {totals['tree'] / totals['ring']:.2f} from the first rank's start, "
              f"{from_last['tree'] / from_last['ring']:.2f} from the last's ({from_last['ring'] * 1e3:.3f} / "
              f"{from_last['tree'] * 1e3:.3f} ms)", flush=True)
        waits = {a: totals[a] - fast[a] for a in schedules}
        print(f"  the call's wait (mean - p10): ring {waits['ring'] * 1e3:.3f} tree {waits['tree'] * 1e3:.3f} ms, "
              f"tree / ring {waits['tree'] / waits['ring']:.2f}; its p10: tree / ring "
              f"{fast['tree'] / fast['ring']:.2f}", flush=True)
        compare_steps(cluster, per_busy, args.nproc)


if __name__ == "__main__":
    main()
