"""Does a step of k blocking gloo calls cost k × the calls' mean, and what does its median say?

The calibration prices a blocking call as its fast time plus the expected wait for a core (``comm.blocking_wait_us``,
executor/calibrate_modes.py), a mean; the validation suite compares the estimate with the median of the executor's
steps. This probe measures both on this machine: N gloo processes (``executor.launch``, one thread each) run steps
of ``k`` rounds, each round a little compute (``--work-us`` of a spinning loop, as a layer between two collectives)
then a native all-reduce of ``--bytes``; the steps of every k are interleaved (round-robin), ``--steps`` each, after
warm-up; each step's time and each call's are the maximum over ranks. Printed per k: the median and mean step, the
mean call × k plus the work, and the share of calls that took more than 1.5 ms over the fastest tenth.

For k calls each waiting one tick D with probability q, the step's wait is D·Binomial(k, q): its mean k·q·D is
what the estimate sums; its median lies within ln 2 ≈ 0.69 of a tick of the mean whatever k (the median of a
binomial is within ln 2 of its mean: Kaas & Buhrman, Statistica Neerlandica 34, 1980), so the median step differs
from the sum of means by at most ~0.7·D (~2.8 ms on a 4 ms tick), a share that shrinks as the step grows.

Usage: ``PYTHONPATH=. python benchmarks/gloo_step_stalls.py --nproc 2 --k 1,4,16``. Results: docs/calibration.md,
[src: own-gloo-step-stalls-2026-11-25].
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from executor import launch

STALL_S = 1.5e-3
"""A call more than this over the fastest tenth of the calls waited for a core (the tick is ~4 ms)."""


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _worker(rank: int, world: int, ks: list[int], steps: int, warmup: int, nbytes: int, work_s: float):
    import torch
    import torch.distributed as dist

    buf = torch.ones(nbytes // 4)
    out = {k: ([], []) for k in ks}  # k → (step times, call times)
    for i in range(warmup + steps):
        for k in ks:
            dist.barrier()
            start = time.perf_counter()
            calls = []
            for _ in range(k):
                _spin(work_s)
                t0 = time.perf_counter()
                dist.all_reduce(buf)
                calls.append(time.perf_counter() - t0)
            if i >= warmup:
                out[k][0].append(time.perf_counter() - start)
                out[k][1].extend(calls)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--k", default="1,4,16", help="calls per step, comma-separated")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bytes", type=int, default=120_000, help="all-reduce size (a tiny model's DDP bucket)")
    parser.add_argument("--work-us", type=float, default=300.0)
    args = parser.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    load0 = os.getloadavg()[0]
    per_rank = launch.run(_worker, args.nproc, (ks, args.steps, args.warmup, args.bytes, args.work_us * 1e-6),
                          backend="gloo")
    print(f"{args.nproc} processes, all-reduce {args.bytes} B, work {args.work_us:.0f} us per call, {args.steps} steps "
          f"per k; load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"{'k':>3} {'median step ms':>15} {'mean step ms':>13} {'k*(mean call)+work ms':>22} "
          f"{'median/mean':>12} {'calls stalled':>14}")
    for k in ks:
        step = [max(r[k][0][i] for r in per_rank) for i in range(args.steps)]
        call = [max(r[k][1][i] for r in per_rank) for i in range(args.steps * k)]
        fast = sorted(call)[len(call) // 10]
        summed = k * (statistics.fmean(call) + args.work_us * 1e-6)
        stalled = sum(c > fast + STALL_S for c in call) / len(call)
        print(f"{k:>3} {statistics.median(step) * 1e3:15.3f} {statistics.fmean(step) * 1e3:13.3f} "
              f"{summed * 1e3:22.3f} {statistics.median(step) / statistics.fmean(step):12.3f} {stalled:14.2f}")


if __name__ == "__main__":
    main()
