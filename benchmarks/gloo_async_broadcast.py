"""What does one broadcast of an asynchronous batch cost (torch ZeRO-1's parameter sync)?

torch's ``ZeroRedundancyOptimizer.step`` ends with ``_sync_params``: for every rank, one ``dist.broadcast(param,
src=owner, async_op=True)`` per parameter tensor it owns, then every handle waited
(``torch/distributed/optim/zero_redundancy_optimizer.py``, torch 2.13, lines 760-827 [src: torch-zero1-broadcasts]).
This probe times that pattern on this machine: N gloo processes (``executor.launch``, one thread each) issue ``k``
broadcasts of ``--bytes`` each, tensor i owned by rank i mod N and issued in owner order, then wait them all; a
barrier before each batch, ``--batches`` batches after warm-up, each batch's time the maximum over ranks. Printed per
k: the batch's median, mean, p10 and p90, and its mean ÷ k, the expected cost of one call of such a batch (what
``comm.async_broadcast_us`` holds: expectations add, so a batch of k pays k times it). For comparison the same
broadcasts issued blocking (``async_op=False``) one after another.

Usage: ``PYTHONPATH=. python benchmarks/gloo_async_broadcast.py --nproc 2 --k 28``. Results: docs/validation.md,
[src: own-gloo-async-broadcast-2026-11-25].
"""

from __future__ import annotations

import argparse
import os
import statistics

from executor import launch
from executor.calibrate_async import batch_s


def _worker(rank: int, world: int, ks: list[int], batches: int, warmup: int, nbytes: int):
    import torch
    import torch.distributed as dist

    out = {}
    for k in ks:
        tensors = [torch.zeros(nbytes // 4) for _ in range(k)]
        for async_op in (True, False):
            times = [batch_s(dist, tensors, world, async_op) for _ in range(warmup + batches)]
            out[(k, async_op)] = times[warmup:]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--k", default="28", help="broadcasts per batch, comma-separated (28: the suite's zero1)")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--bytes", type=int, default=4096, help="each broadcast's size")
    args = parser.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    load0 = os.getloadavg()
    per_rank = launch.run(_worker, args.nproc, (ks, args.batches, args.warmup, args.bytes), backend="gloo")
    print(f"{args.nproc} processes, broadcasts of {args.bytes} B, {args.batches} batches per k; load average "
          f"{load0[0]:.2f} / {load0[1]:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"{'k':>3} {'issued':>9} {'median ms':>10} {'mean ms':>9} {'p10 ms':>8} {'p90 ms':>8} {'mean/k us':>10}")
    for (k, async_op) in per_rank[0]:
        batch = sorted(max(r[(k, async_op)][i] for r in per_rank) for i in range(args.batches))
        mean = statistics.fmean(batch)
        print(f"{k:>3} {'async' if async_op else 'blocking':>9} {statistics.median(batch) * 1e3:10.3f} "
              f"{mean * 1e3:9.3f} {batch[len(batch) // 10] * 1e3:8.3f} {batch[9 * len(batch) // 10] * 1e3:8.3f} "
              f"{mean / k * 1e6:10.1f}")


if __name__ == "__main__":
    main()
