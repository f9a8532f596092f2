"""A short fixed single-thread CPU reference: how fast this machine runs right now.

The suite's hygiene samples (``executor.suite_run``: the load average, the share of the CPU other
processes took) cannot see contention from outside the VM: a noisy neighbour or host throttling slows
every instruction without showing as a process or as steal time (firecracker reports none in
``/proc/stat``). On 2026-11-26 three suites called "quiet" ran ~1.6x slower than the day before
(docs/validation.md, ``### val20``). This probe times the same fixed work each time, so a case's
reading over the reference's is the machine's own slowdown:

- one take = :data:`MATMULS` fp32 matmuls of :data:`MATMUL_N` x :data:`MATMUL_N` (compute) then
  :data:`COPIES` copies of a :data:`COPY_MIB` MiB tensor (memory bandwidth, what neighbours share);
- on one torch thread (the caller's thread count is restored), after one untimed take;
- the reading is the median of :data:`TAKES` takes of this thread's CPU time (``time.thread_time``):
  contention from outside the VM stretches it (the guest's clock runs on while the vCPU waits, and a
  neighbour's cache and memory traffic slows each instruction), while other processes inside the VM,
  already measured as the foreign CPU share, mostly do not (they take turns on the core, off this
  thread's clock).

A reading costs about TAKES + 1 takes of ~40 ms on the 2-core VM (docs/validation.md ``### val20``).

The suite's reference is the median of :data:`REFERENCE_READINGS_BEFORE` readings before ``--calibrate``'s
calibration and :data:`REFERENCE_READINGS_AFTER` at the start of the runs (:func:`reference_readings`;
``simulator.suite_report.speed_reference``).
"""

from __future__ import annotations

import statistics
import time

MATMUL_N = 256
MATMULS = 30
COPY_MIB = 16
COPIES = 12
TAKES = 3
REFERENCE_READINGS_BEFORE = 2
"""Speed-probe readings taken before the calibration for the reference (a hygiene protocol, not a model term)."""
REFERENCE_READINGS_AFTER = 3
"""Speed-probe readings at the start of the runs, after the calibration; with the two before, the reference is a
median of five, which neither one nor two high readings set (docs/validation.md ``### bias21``)."""


def _take(a, b, src, dst) -> float:
    t0 = time.thread_time()
    for _ in range(MATMULS):
        a @ b
    for _ in range(COPIES):
        dst.copy_(src)
    return time.thread_time() - t0


def probe(takes: int = TAKES) -> float:
    """Median thread CPU seconds of ``takes`` takes of the fixed work (module docstring), on one torch thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(MATMUL_N, MATMUL_N, generator=gen)
        b = torch.randn(MATMUL_N, MATMUL_N, generator=gen)
        src = torch.randn(COPY_MIB * 2**20 // 4, generator=gen)
        dst = torch.empty_like(src)
        _take(a, b, src, dst)  # untimed: first touch of the pages, the kernels' first call
        return statistics.median(_take(a, b, src, dst) for _ in range(takes))
    finally:
        torch.set_num_threads(threads)


def reference_readings(count: int) -> tuple[float, ...]:
    """``count`` readings of the speed probe back to back (thread CPU seconds)."""
    return tuple(probe() for _ in range(count))
