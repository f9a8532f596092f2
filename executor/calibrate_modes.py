"""The calls that did not wait for a core: the loopback's own cost, and what waiting for the CPU added to the mean.

A gloo call over loopback is bimodal: most calls take their own time (a 2-process 4 KiB all-reduce 0.2-0.5 ms),
some wait for a core first (+2-8 ms, a scheduler's time slice, when other processes hold both cores), and the
share that waits grows with the processes per core and with other work on the machine. The fit
(:mod:`executor.calibrate`) targets each point's trimmed mean, which a step pays, so its parameters carry the
waiting of the minutes it ran in. Beside it, this module fits the same model to each point's 10th percentile,
the calls that did not wait, and reports what the waits added:

    fast  = fit_cluster(measurements with target p10_s)                (call_latency_us, latency_us, bw_GBps)
    wait_ms[p] = median over sizes <= WAIT_MAX_BYTES of (trimmed_mean − fast estimate), per call, p processes
    replay_step_us = fit_replay_step(fast cluster, the replays' p10_s)    (executor.calibrate_replay)

Measured 2026-11-25 [src: own-gloo-fast-mode-2026-11-25]: over nine consecutive calibrations under 38-80 %
foreign CPU load, fitted to trimmed means the call latency ran 0-1322 µs, the hop latency 240-589 µs and the
replay step 99-1533 µs; fitted to the fast mode (eighteen sets: each run's fit and fresh set), 28-138 µs,
114-159 µs and 9-149 µs. The waits per call at 4 KiB-256 KiB were 0.03-1.45 ms at 2 processes, 1.10-3.72 ms at
3 and 2.01-6.56 ms at 4: a replay blocks once per step, and it is those blocks' waits for a core that the
trimmed-mean replay step carries. Not used by the estimate: the fitted cluster is the trimmed-mean one. It is a
diagnostic (printed, in ``--json``, and written into the calibrated file's ``source``) that separates the
loopback's stable cost from the machine's CPU contention, towards modelling the wait for a core as its own term
(docs/calibration.md).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Callable

from executor.calibrate import fit_cluster, fit_rows
from simulator.cluster.spec import Cluster

WAIT_MAX_BYTES = 256 * 1024
"""Largest message whose wait is summarised: above it the bytes' own time (which foreign load also stretches,
by sharing memory bandwidth rather than by a time slice) would mix into the figure."""


@dataclass(frozen=True, kw_only=True)
class FastMode:
    """The model fitted to each point's 10th percentile, and the per-call wait the trimmed means add to it."""

    call_latency_us: float
    latency_us: float
    bw_GBps: float
    wait_ms: dict[int, float]
    """Per process count: median over sizes up to :data:`WAIT_MAX_BYTES` of (trimmed mean − fast estimate), ms."""
    replay_step_us: float | None = None
    """``comm.replay_step_us`` fitted to the replays' 10th percentiles on the fast cluster; None: no replays."""

    def text(self) -> str:
        """One line, as the CLI prints it and the calibrated file's ``source`` records it."""
        waits = ", ".join(f"{p} processes {w:.2f} ms" for p, w in sorted(self.wait_ms.items()))
        replay = "" if self.replay_step_us is None else f", replay step {self.replay_step_us:.1f} us"
        return (f"fast mode (p10 of the calls): call {self.call_latency_us:.1f} us, hop {self.latency_us:.1f} us, "
                f"bandwidth {self.bw_GBps:.3f} GB/s{replay}; wait per call (trimmed mean - fast, up to 256 KiB): "
                f"{waits}")


def fast_mode(cluster: Cluster, measurements, estimate: Callable, replays=(), cases=()) -> FastMode:
    """:class:`FastMode` of ``measurements`` (Measurement: ``p10_s``, ``trimmed_mean_s``) on ``cluster`` (the base,
    as :func:`executor.calibrate.fit_cluster` takes it) with the fit's ``estimate`` (module docstring); ``replays``
    (the replay probe's measurements) and ``cases`` (the launches', whose schedules ran) give its replay step."""
    from executor.calibrate_replay import fit_replay_step

    fast_points = [replace(m, trimmed_mean_s=m.p10_s) for m in measurements]
    fitted, fit = fit_cluster(cluster, fast_points, estimate=estimate)
    replay_us = None
    if replays:
        replay_us = fit_replay_step(fitted, [replace(m, trimmed_mean_s=m.p10_s) for m in replays], cases)
    waits: dict[int, list[float]] = {}
    for row in fit_rows(fitted, measurements, estimate):
        if row.nbytes <= WAIT_MAX_BYTES:
            waits.setdefault(row.ranks, []).append((row.measured_s - row.estimate_s) * 1e3)
    return FastMode(call_latency_us=fit.call_latency_us, latency_us=fit.latency_us, bw_GBps=fit.bw_GBps,
                    wait_ms={p: statistics.median(w) for p, w in waits.items()}, replay_step_us=replay_us)
