"""How long does a blocking gloo call of a 2-rank group take when more processes share the node?

``comm.blocking_wait_us`` is measured per process count on groups of *all* the node's processes; a tp or dp group of
a 4-process run (the suite's tp-dp, pp-dp) is a pair. This probe runs N gloo processes (``executor.launch``, one
thread each) split into groups of ``--group`` consecutive ranks, every group issuing ``--calls`` blocking all-reduces
of ``--bytes`` back to back at once (20 warm-up calls, a barrier before the timed ones), and prints per layout the
mean, median and 10th percentile per call (means over ranks). Not the calibration's sweep: back-to-back calls of one
size, so it compares layouts measured in the same minutes, not absolute waits.

Usage: ``PYTHONPATH=. python benchmarks/gloo_group_wait.py`` (layouts 2/2, 4/2, 4/4). Results: docs/validation.md,
"Tensor-parallel cases" [src: own-tp-group-probe].
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def _rank(rank: int, world: int, group_size: int, calls: int, nbytes: int) -> tuple[float, float, float]:
    import torch
    import torch.distributed as dist

    groups = [dist.new_group(list(range(s, s + group_size))) for s in range(0, world, group_size)]
    group, x = groups[rank // group_size], torch.zeros(nbytes // 4)
    for _ in range(20):
        dist.all_reduce(x, group=group)
    dist.barrier()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        dist.all_reduce(x, group=group)
        times.append(time.perf_counter() - start)
    return statistics.fmean(times), statistics.median(times), sorted(times)[len(times) // 10]


def main() -> None:
    from executor.launch import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--bytes", type=int, default=8192)
    args = parser.parse_args()
    for world, group in ((2, 2), (4, 2), (4, 4)):
        per_rank = run(_rank, world, args=(group, args.calls, args.bytes), num_threads=1)
        mean, median, p10 = (statistics.fmean(r[k] for r in per_rank) * 1e6 for k in range(3))
        print(f"{time.strftime('%H:%M:%S')} {world} processes, groups of {group}: mean {mean:.0f} us, median "
              f"{median:.0f}, p10 {p10:.0f} per call (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
