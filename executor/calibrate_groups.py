"""The calibration's pair probe: the wait for a core of a blocking call by a 2-rank group on a node of more processes.

``comm.blocking_wait_us`` is measured on groups of all the node's processes (:mod:`executor.calibrate_modes`); a tp,
pp or dp group of the suite's 4- and 8-process hybrids is a pair, and a pair on a 4-process node waited about what it
waits at 2 processes, not the 4-rank group's W(4) [src: own-gloo-pair-wait-2026-11-25] (this probe, ten runs on the
loaded VM: W_2(4) median 1.78 ms against W(4) 3.98 ms [src: own-gloo-group-wait-2026-11-25]). So, beside the fitted
series:

    W_2(p) = mean over every rank's timed calls of (t − T_fast(2-rank all-reduce of n bytes on a node of p))
                                                                    → comm.group_wait_us[2][p]

``p`` processes split into the pairs (0, 1), (2, 3), …, every pair making blocking native all-reduces of each size of
:data:`PROBE_BYTES` at once, as the hybrids' groups do (a barrier before each call, sizes interleaved in rounds, as the
fitted series are timed: :mod:`executor.collective_bench`); ``T_fast`` is the fitted cluster's estimate without waits
on a node of ``p`` processes (its time-sharing included), so that estimate plus W_2(p) is the calls' mean, as for
W(p). Measured at the even process counts above 2 of the design (on the default 2 / 3 / 4: at 4); an odd count
cannot be split into pairs that all call at once, and the suite runs no 3-process case: a pair there reads the line
between its whole-node wait at 2 and W_2(4) (:mod:`simulator.cluster.core_wait`). Cost: one launch per such count,
:data:`PROBE_ROUNDS` rounds of :data:`PROBE_BYTES` after :data:`PROBE_WARMUP` (about 3-5 s at 4 processes on the
2-core VM, most of it the launch).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from simulator.cluster.spec import Cluster
from simulator.collectives.base import Op

GROUP_SIZE = 2
"""Ranks per probed group: the pairs of the suite's hybrids (tp-dp's tp and dp groups, pp-dp's and 3d's)."""
PROBE_BYTES = (4096, 65536)
"""Sizes per round, bytes: small, within the fitted series' wait sizes (up to 256 KiB), as a tp group's activations."""
PROBE_ROUNDS = 40
"""Timed rounds (each one call of each size) per process count, after :data:`PROBE_WARMUP`: 80 calls per rank, 320
per process count at 4, against the fitted series' 20 per point there."""
PROBE_WARMUP = 3


def _worker(rank: int, world: int, sizes: tuple[int, ...], rounds: int, warmup: int) -> dict[int, list[float]]:
    import torch
    import torch.distributed as dist

    groups = [dist.new_group(list(range(s, s + GROUP_SIZE))) for s in range(0, world, GROUP_SIZE)]  # every rank
    group = groups[rank // GROUP_SIZE]
    bufs = {n: torch.zeros(max(1, n // 4)) for n in sizes}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for k in range(warmup + rounds):
        for n in sizes:
            bufs[n].zero_()
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(bufs[n], group=group)
            if k >= warmup:
                times[n].append(time.perf_counter() - start)
    return times


def probe_counts(nprocs: Sequence[int]) -> tuple[int, ...]:
    """The process counts of ``nprocs`` the probe runs at: even, above :data:`GROUP_SIZE` (module docstring)."""
    return tuple(p for p in sorted(set(nprocs)) if p > GROUP_SIZE and p % GROUP_SIZE == 0)


def pair_calls(nprocs: Sequence[int], *, sizes: Sequence[int] = PROBE_BYTES, rounds: int = PROBE_ROUNDS,
               warmup: int = PROBE_WARMUP) -> dict[int, dict[int, list[float]]]:
    """Process count → bytes → every rank's timed calls (seconds), on gloo over this machine's loopback."""
    from executor import launch

    out = {}
    for nproc in probe_counts(nprocs):
        per_rank = launch.run(_worker, nproc, (tuple(sizes), rounds, warmup), backend="gloo")
        out[nproc] = {n: [t for r in per_rank for t in r[n]] for n in sizes}
    return out


def pair_waits_us(fitted: Cluster, calls: dict[int, dict[int, list[float]]]) -> dict[int, float]:
    """``W_2(p)`` in µs per process count (module docstring), never below 0: ``fitted``'s estimate without waits of
    a 2-rank all-reduce of each size on a node of ``p`` processes, subtracted from each call."""
    import statistics

    from executor.calibrate import on_node
    from executor.calibrate_modes import without_waits
    from simulator.collectives.registry import estimate

    fast = without_waits(fitted)
    out = {}
    for nproc, by_size in sorted(calls.items()):
        node = on_node(fast, nproc)
        excess = [t - estimate(node, list(range(GROUP_SIZE)), Op.ALL_REDUCE, n, "auto").time_s
                  for n, times in by_size.items() for t in times]
        out[nproc] = max(0.0, statistics.fmean(excess) * 1e6)
    return out


def with_pair_waits(cluster: Cluster, waits_us: dict[int, float]) -> Cluster:
    """``cluster`` with ``comm.group_wait_us`` = ``{2: waits_us}`` (none measured: unchanged)."""
    from dataclasses import replace

    if not waits_us:
        return cluster
    table = ((GROUP_SIZE, tuple(sorted(waits_us.items()))),)
    return replace(cluster, comm=replace(cluster.comm, group_wait_us=table))
