"""Does a blocking gloo call between two ranks wait like an all-rank exchange when more processes share the host?

``comm.blocking_wait_us`` is measured per process count on all-rank exchanges (``executor/calibrate_modes.py``) and
charged to every blocking call of a run with that many processes, whatever its group. This probe times both kinds at
once on this machine: N gloo processes (``executor.launch``, one thread each), pairs (0, 1), (2, 3), … ping-ponging a
``--bytes`` tensor at the same time (``dist.send`` / ``dist.recv``; a one-way hop is half the round trip), then one
all-rank ``all_reduce`` of it, a barrier before each; ``--rounds`` rounds after 10 warm-up. Printed per process count:
mean, median and p90 of the pairs' one-way hop and of the all-reduce, over every rank's rounds.

Usage: ``PYTHONPATH=. python benchmarks/gloo_pair_wait.py --nproc 2 4 2 4``. Results: docs/validation.md (pipe15),
[src: own-gloo-pair-wait-2026-11-25].
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from executor import launch

WARMUP = 10


def _worker(rank: int, world: int, rounds: int, nbytes: int):
    import torch
    import torch.distributed as dist

    x, peer = torch.zeros(max(1, nbytes // 4)), rank ^ 1
    hops, reduces = [], []
    for i in range(WARMUP + rounds):
        dist.barrier()
        t0 = time.perf_counter()
        if rank % 2 == 0:
            dist.send(x, peer)
            dist.recv(x, peer)
        else:
            dist.recv(x, peer)
            dist.send(x, peer)
        t1 = time.perf_counter()
        dist.barrier()
        t2 = time.perf_counter()
        dist.all_reduce(x)
        t3 = time.perf_counter()
        if i >= WARMUP:
            hops.append((t1 - t0) / 2)
            reduces.append(t3 - t2)
    return hops, reduces


def _stats(values: list[float]) -> str:
    return (f"mean {statistics.fmean(values) * 1e3:.3f} median {statistics.median(values) * 1e3:.3f} "
            f"p90 {sorted(values)[int(0.9 * (len(values) - 1))] * 1e3:.3f} ms")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[2, 4, 2, 4], help="even process counts, in turn")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--bytes", type=int, default=4096)
    args = parser.parse_args(argv)
    for world in args.nproc:
        if world < 2 or world % 2:
            parser.error(f"--nproc: give even counts of at least 2 (pairs), got {world}")
        load = os.getloadavg()[0]
        per_rank = launch.run(_worker, world, args=(args.rounds, args.bytes), num_threads=1)
        hops = [h for r in per_rank for h in r[0]]
        reduces = [a for r in per_rank for a in r[1]]
        print(f"{time.strftime('%H:%M:%S')} load {load:.1f} processes {world}: pair hop {_stats(hops)} | "
              f"all-reduce {_stats(reduces)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
