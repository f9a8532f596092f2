"""Does a replayed tree all-reduce cost what the ring replay does, step for step, on a node that time-shares its cores?

Times, interleaved in one launch of ``--nproc`` gloo processes (``executor.collective_bench.measure_cases``: a barrier
before each call, each call's time the slowest rank's), gloo's native all-reduce and the ring and tree schedules the
executor replays for ddp-ring and ddp-tree (built on the suite plans' cluster, dgx-h100, for the tiny model's one DDP
bucket, 481,392 B), and prints each one's mean, median and 10th percentile, the tree / ring ratios, and what a cluster
file prices each replay at three ways: every step at the node's share (before 2026-11-26), each step at its busy
processes' share, and that with the call's wait at the steps' mean busy weight too (tree19; tree17 read it at
the busy processes) (:func:`simulator.collectives.replayed.schedule_replay_time_s`). With ``--cpu`` it instead
times each rank's CPU (``time.process_time``: all the process's threads, gloo's included) per replayed call,
which shows whether a rank idle in a step uses a core while it waits (a rank that spun would cost as much as a
busy one).

Usage: ``PYTHONPATH=. python benchmarks/replay_busy_probe.py --cluster CLUSTER.yaml --runs 3`` (``--cpu``). Results:
docs/validation.md ("ddp-tree"), [src: own-replay-busy-share-2026-11-26].
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from executor import launch
from executor.collective_bench import BenchCase, measure_cases, percentile
from simulator.cluster.io import load_cluster
from simulator.collectives.base import Op
from simulator.collectives.registry import build_schedule

BUCKET_BYTES = 481_392
"""The tiny gpt3-125m's gradients in fp32 (120,348 parameters): ddp-ring's and ddp-tree's one DDP bucket."""


def prices_ms(cluster, schedule) -> tuple[float, float, float]:
    """(uniform share, busy share with the node's wait, busy share and the replay's wait, ``replay_wait_s``) of
    ``schedule`` on ``cluster``, ms."""
    from simulator.collectives import replayed
    from simulator.collectives.cost import Env
    from simulator.collectives.replay import schedule_time_s

    uniform = schedule_time_s(cluster, schedule) + replayed.steps_extra_s(cluster, schedule.num_steps)
    busy = replayed.schedule_replay_time_s(cluster, schedule)
    node_wait = busy - replayed.replay_wait_s(cluster, schedule) + Env(cluster, None).blocking_wait_s(
        schedule.op, len(schedule.ranks))
    return uniform * 1e3, node_wait * 1e3, busy * 1e3


def _cpu_worker(rank: int, world: int, schedules: dict, repeats: int) -> dict[str, list[float]]:
    """CPU seconds of this rank per replayed call of each schedule, interleaved, a barrier before each call."""
    import time

    import torch
    import torch.distributed as dist

    from executor.p2p import replay_schedule

    bufs = {a: torch.full((s.nbytes // 4,), float(rank + 1)) for a, s in schedules.items()}
    out: dict[str, list[float]] = {a: [] for a in schedules}
    for k in range(repeats + 5):
        for a, s in schedules.items():
            dist.barrier()
            start = time.process_time()
            replay_schedule(s, bufs[a], rank)
            if k >= 5:
                out[a].append(time.process_time() - start)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="localhost-cpu", help="cluster file whose prices are printed")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--repeats", type=int, default=60, help="timed calls of each case per run")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--cpu", action="store_true", help="each rank's CPU time per replayed call instead")
    args = p.parse_args()
    plan = load_cluster("dgx-h100", nodes=1)
    ranks = list(range(args.nproc))
    schedules = {a: build_schedule(plan, ranks, Op.ALL_REDUCE, BUCKET_BYTES, a) for a in ("ring", "tree")}
    if args.cpu:
        for run in range(args.runs):
            per_rank = launch.run(_cpu_worker, args.nproc, (schedules, args.repeats), backend="gloo")
            for a in schedules:
                cpu_ms = [statistics.fmean(r[a]) * 1e3 for r in per_rank]
                print(f"run {run + 1} {a}: CPU ms per call, rank by rank " + " ".join(f"{c:.2f}" for c in cpu_ms)
                      + f" (sum {sum(cpu_ms):.2f})", flush=True)
        return
    cluster = load_cluster(args.cluster)
    cluster = replace(cluster, node=replace(cluster.node, gpus_per_node=args.nproc))
    for a, s in schedules.items():
        print(f"priced {a}: uniform share / busy share / busy share and wait "
              + " / ".join(f"{v:.3f}" for v in prices_ms(cluster, s)) + " ms")
    cases = [BenchCase(algorithm="native", nbytes=BUCKET_BYTES)] + [
        BenchCase(algorithm=a, nbytes=BUCKET_BYTES, schedule=s) for a, s in schedules.items()]
    for run in range(args.runs):
        rows = {m.algorithm: m for m in measure_cases(Op.ALL_REDUCE, cases, args.nproc, repeats=args.repeats,
                                                      warmup=5)}
        for a, m in rows.items():
            print(f"run {run + 1} {a:>6}: mean {m.mean_s * 1e3:.3f} median {statistics.median(m.times_s) * 1e3:.3f} "
                  f"p10 {percentile(m.times_s, 0.1) * 1e3:.3f} ms")
        tree, ring = rows["tree"].times_s, rows["ring"].times_s
        print(f"run {run + 1} tree / ring: mean {statistics.fmean(tree) / statistics.fmean(ring):.2f} median "
              f"{statistics.median(tree) / statistics.median(ring):.2f} p10 "
              f"{percentile(tree, 0.1) / percentile(ring, 0.1):.2f}", flush=True)


if __name__ == "__main__":
    main()
