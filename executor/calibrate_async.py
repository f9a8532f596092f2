"""The calibration's asynchronous-batch probe: what one broadcast of a batch issued with ``async_op=True`` costs.

torch's ``ZeroRedundancyOptimizer.step`` ends with ``_sync_params``: for every rank, one ``dist.broadcast(param,
src=owner, async_op=True)`` per parameter tensor it owns, then every handle waited
(``torch/distributed/optim/zero_redundancy_optimizer.py``, torch 2.13, lines 760-827 [src: torch-zero1-broadcasts]).
Such a call neither costs a blocking exchange's fast time plus its wait for a core (``comm.blocking_wait_us``,
:mod:`executor.calibrate_modes`) nor a blocking broadcast's: measured on the 2-core VM, 0.33-0.58 ms per call at 2
processes against 1.13 ms [src: own-gloo-async-broadcast-2026-11-25]. So it is timed as it runs:

    A(p) = mean over batches of (batch time ÷ k)            → comm.async_broadcast_us[p]

N processes issue ``k`` broadcasts of :data:`PROBE_BYTES` (tensor i owned by rank i mod N, issued in owner order),
then wait them all; a barrier before each batch; a batch's time is the slowest rank's. The mean, not the median:
batches are bimodal (a few ms, or several scheduler ticks) and a step pays their expectation.
(:func:`simulator.collectives.gloo.async_broadcast_time_s` prices a call as ``A(N)`` plus its bytes' rounds.)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

PROBE_BATCH = 28
"""Broadcasts per batch: the default suite's zero1 (one per parameter tensor of the tiny gpt3-125m)."""
PROBE_BYTES = 4096
"""Bytes per broadcast: small, so the batch measures the calls' fixed cost (its bytes take ~1 µs at 4 GB/s)."""
PROBE_BATCHES = 40
"""Timed batches per process count (after :data:`PROBE_WARMUP`)."""
PROBE_WARMUP = 3


def batch_s(dist, tensors: list, world: int, async_op: bool = True) -> float:
    """One batch's wall time on this rank: a barrier, then each tensor broadcast from its owner (i mod world) in
    owner order, with ``async_op`` (all handles waited at the end) or blocking one after another."""
    dist.barrier()
    start = time.perf_counter()
    handles = []
    for owner in range(world):
        for i, t in enumerate(tensors):
            if i % world == owner:
                handle = dist.broadcast(t, src=owner, async_op=async_op)
                if async_op:
                    handles.append(handle)
    for handle in handles:
        handle.wait()
    return time.perf_counter() - start


def _worker(rank: int, world: int, k: int, nbytes: int, batches: int, warmup: int) -> list[float]:
    import torch
    import torch.distributed as dist

    tensors = [torch.zeros(max(1, nbytes // 4)) for _ in range(k)]
    return [batch_s(dist, tensors, world) for _ in range(warmup + batches)][warmup:]


def async_broadcast_us(nprocs: Sequence[int], *, k: int = PROBE_BATCH, nbytes: int = PROBE_BYTES,
                       batches: int = PROBE_BATCHES, warmup: int = PROBE_WARMUP) -> dict[int, float]:
    """``A(p)`` in µs at each process count of ``nprocs`` (module docstring), on gloo over this machine's loopback."""
    from executor import launch

    out = {}
    for nproc in sorted(set(nprocs)):
        if nproc < 2:
            continue
        per_rank = launch.run(_worker, nproc, (k, nbytes, batches, warmup), backend="gloo")
        slowest = [max(r[i] for r in per_rank) for i in range(batches)]
        out[nproc] = statistics.fmean(slowest) / k * 1e6
    return out
