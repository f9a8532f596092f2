"""A blocking call on a time-shared CPU node: its own cost (the calls that did not wait) plus the expected wait for
a core, each measured apart.

A gloo call over loopback is bimodal: most calls take their own time (a 2-process 4 KiB all-reduce 0.3-0.5 ms),
some first wait for a core, about one scheduler tick (the 2-core VM's kernel runs ``CONFIG_HZ=250``, a 4 ms tick),
and the share that waits grows with the processes per core and with other work on the machine. On the quiet VM
(2026-11-25 15:05 UTC, load 1.2) the calls of up to 256 KiB exceeded the fast fit by more than 1.5 ms in 20 %,
51 % and 78 % of calls at 2, 3 and 4 processes, by 3.6, 4.0 and 4.6 ms on average when they did
[src: own-gloo-blocking-wait-2026-11-25]. The model (since 2026-11-25):

    T_call(p, n)  = T_fast(p, n) + W(p)
    T_fast        = the α-β estimate with call latency, hop latency and bandwidth fitted (executor.calibrate's
                    relative-L1 fit) to each point's 10th percentile: the calls that did not wait
    W(p)          = mean over every timed call of the fitted series at p processes with n <= WAIT_MAX_BYTES
                    of (t − T_fast(point))            → comm.blocking_wait_us[p]  (Env.blocking_wait_s)

W is the expected excess, q(p)·D(p) with q the share of calls that wait and D their mean wait; it is the mean
of the excess, not its median or trimmed mean, because a step of k calls pays the sum of its calls and
E[Σ T] = k·(T_fast + W) whether or not the stalls are independent (linearity of expectation). The estimate is
therefore checked against each point's plain mean (:data:`executor.calibrate.TARGET`).

Why not fit the three parameters to plain means instead (the experiment of docs/calibration.md: the suite's
recorded runs 38.0 → 28.1 %)? In expectation it is the same thing only if W(p) has the shape of the model's
terms, ``share(p)·c' + hops(p)·share(p)·α'``: the measured W is 0.76 / 2.12 / 3.70 ms at 2 / 3 / 4 processes
(ratios 1 : 2.8 : 4.9) against share 1 : 1.5 : 2, so a mean fit spreads it over the call and hop latencies with
the wrong weight per process count and per op (an all-gather has half the all-reduce's hops but waits as often),
and the three parameters move with the load. Here the α-β parameters keep the stable fast mode (nine loaded runs:
hop 114-159 µs) and the load-dependent part is one measured number per process count.

Sizes above :data:`WAIT_MAX_BYTES` are left out of W: there the bytes' own time, which other work also stretches
by sharing memory bandwidth, would mix into it. The replay probe's ``comm.replay_step_us`` is fitted afterwards on
the cluster with its waits to the replays' means (:mod:`executor.calibrate_replay`): a replayed step's extra host
time with whatever its own blocking adds (a full W per replayed step would over-price the 3- and 4-process replays
2-3×, 2026-11-25's data).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from simulator.cluster.spec import Cluster

WAIT_MAX_BYTES = 256 * 1024
"""Largest message whose calls measure the wait (module docstring)."""
RESAMPLES = 100
"""Bootstrap resamples of the calls for the wait's spread (as :data:`executor.calibrate_spread.RESAMPLES`)."""
SEED = 0
"""Seed of that resampling: the same measurements give the same spread."""


def fast_points(measurements) -> list:
    """``measurements`` with each point's fitted statistic (:data:`executor.calibrate.TARGET`) set to its 10th
    percentile: what :func:`executor.calibrate.fit_cluster` fits the fast mode to."""
    from executor.calibrate import TARGET

    return [replace(m, **{TARGET: m.p10_s}) for m in measurements]


def without_waits(cluster: Cluster) -> Cluster:
    """``cluster`` with no blocking wait (the fast mode a fit starts from)."""
    return cluster if not cluster.comm.blocking_wait_us else replace(cluster, comm=replace(cluster.comm,
                                                                                           blocking_wait_us=()))


def with_waits(cluster: Cluster, waits_us: dict[int, float]) -> Cluster:
    """``cluster`` with ``comm.blocking_wait_us`` = ``waits_us`` (process count → µs)."""
    return replace(cluster, comm=replace(cluster.comm, blocking_wait_us=tuple(sorted(waits_us.items()))))


def _excess_s(fast: Cluster, measurements, estimate: Callable) -> dict[int, list[np.ndarray]]:
    """Per process count, for each point up to :data:`WAIT_MAX_BYTES`: its calls' excess over ``fast``'s estimate."""
    from executor.calibrate import fit_rows

    out: dict[int, list[np.ndarray]] = {}
    for m, row in zip(measurements, fit_rows(without_waits(fast), measurements, estimate)):
        if m.nbytes <= WAIT_MAX_BYTES:
            out.setdefault(m.ranks, []).append(np.asarray(m.times_s) - row.estimate_s)
    return out


def blocking_waits(fast: Cluster, measurements, estimate: Callable) -> dict[int, float]:
    """``W(p)`` in µs, per process count measured (module docstring), never below 0; ``fast`` is the cluster fitted
    to the 10th percentiles, ``estimate`` the fit's (:func:`executor.calibrate.executed_time`)."""
    return {p: max(0.0, float(np.mean(np.concatenate(points))) * 1e6)
            for p, points in sorted(_excess_s(fast, measurements, estimate).items())}


def wait_spread(fast: Cluster, measurements, estimate: Callable, *, resamples: int = RESAMPLES,
                seed: int = SEED) -> dict[int, tuple[float, float]]:
    """Per process count, the 10th and 90th percentiles of ``W(p)`` (µs) over bootstrap resamples of each point's
    calls (the fast fit held: the spread of the mean of one run's sample, as :mod:`executor.calibrate_spread`)."""
    rng = np.random.default_rng(seed)
    out = {}
    for p, points in sorted(_excess_s(fast, measurements, estimate).items()):
        draws = [float(np.mean(np.concatenate([rng.choice(x, size=len(x)) for x in points]))) * 1e6
                 for _ in range(resamples)]
        lo, hi = np.percentile(np.maximum(draws, 0.0), [10, 90])
        out[p] = (float(lo), float(hi))
    return out


def waits_text(waits_us: dict[int, float], spread: dict[int, tuple[float, float]] | None = None) -> str:
    """``2 processes 760.0 us (p10..p90 610..930), ...``: as the CLI prints and the file's ``source`` records it."""
    spread = spread or {}
    return ", ".join(f"{p} processes {w:.1f} us" + (f" (p10..p90 {spread[p][0]:.0f}..{spread[p][1]:.0f})"
                                                     if p in spread else "") for p, w in sorted(waits_us.items()))

