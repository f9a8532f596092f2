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

Per op (since 2026-11-25, check15). The waits differ by op at one process count: in the lead's three quiet
calibrations of 17:32-17:34 UTC (load 2.1-2.5, other work 0 %), six sets of calls (three fits, three fresh) up to
256 KiB, a native all-reduce waited 0.7-1.5 / 1.5-2.2 / 3.6-4.8 ms per call at 2 / 3 / 4 processes, an all-gather
0.4-1.0 / 1.7-2.1 / 3.0-4.0 ms, a broadcast 0.0-0.4 / 0.4-0.8 / 0.8-1.2 ms [src: own-gloo-op-waits-2026-11-25]
(more blocking exchanges in the all-reduce's two ring phases; a binomial round wakes one receiver where an exchange
blocks both). One W(p) over both series made the fresh sets' 2-process all-reduces −22..−47 % short and their
all-gathers +47..+78 % over, and charged a broadcast the exchanges' wait (its probe 115-168 % over). So each measured
op's own W(op, p) is written too (:func:`op_waits`, ``comm.op_wait_us``, the broadcast's from the broadcast probe),
and W(p) over the fitted series stays ``comm.blocking_wait_us``, what an op measured on no own table pays.

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
from simulator.collectives.base import Op

WAIT_MAX_BYTES = 256 * 1024
"""Largest message whose calls measure the wait (module docstring)."""
RESAMPLES = 100
"""Bootstrap resamples of the calls for the wait's spread (as :data:`executor.calibrate_spread.RESAMPLES`)."""
SEED = 0
"""Seed of that resampling: the same measurements give the same spread."""
CALLS_BY_CROWDING = ((1.0, 4), (1.5, 2))
"""Timed calls per point as a multiple of the design's ``repeats``, by the launch's processes per core: ``(at most
this many processes per core, multiple)``, in order; more crowded launches take ``repeats`` itself
(:func:`calls_per_point`). Why: the mean of n calls has a relative sampling error cv/√n, and the fewer processes
per core the more a call's time varies, because fewer calls wait and each wait is a whole tick. Coefficient of
variation of one point's calls (sd / mean; median over the points of the six quiet sets of 17:32-17:34 UTC,
2026-11-25 [src: own-gloo-op-waits-2026-11-25]): 1.03 / 1.25 (all-reduce / all-gather) at 2 processes on 2 cores,
0.74 / 0.80 at 3, 0.48 / 0.54 at 4. Equal error asks n ∝ cv², ×4.6 and ×2.3 the 4-process count; ×4 and ×2 keep
a point's median sampling error (0.674·cv/√n) at about 8-9.5 %, 8-8.5 % and 7-8 % with 80, 40 and 20 calls,
where 20 everywhere gave 15.5-19 %, 11-12 % and 7-8 %."""


def fast_points(measurements) -> list:
    """``measurements`` with each point's fitted statistic (:data:`executor.calibrate.TARGET`) set to its 10th
    percentile: what :func:`executor.calibrate.fit_cluster` fits the fast mode to."""
    from executor.calibrate import TARGET

    return [replace(m, **{TARGET: m.p10_s}) for m in measurements]


def without_waits(cluster: Cluster) -> Cluster:
    """``cluster`` with no blocking wait, whole-node, per op, per group size, of DTensor's or FSDP2's calls (the fast
    mode a fit starts from)."""
    comm = cluster.comm
    if not (comm.blocking_wait_us or comm.op_wait_us or comm.group_wait_us or comm.dtensor_wait_us
            or comm.dtensor_sp_wait_us or comm.fsdp2_wait_us):
        return cluster
    return replace(cluster, comm=replace(comm, blocking_wait_us=(), op_wait_us=(), group_wait_us=(),
                                         dtensor_wait_us=(), dtensor_sp_wait_us=(), fsdp2_wait_us=()))


def with_waits(cluster: Cluster, waits_us: dict[int, float], per_op_us: dict[Op, dict[int, float]] | None = None
               ) -> Cluster:
    """``cluster`` with ``comm.blocking_wait_us`` = ``waits_us`` (process count → µs) and ``comm.op_wait_us`` =
    ``per_op_us`` (op → process count → µs; None: none)."""
    per_op = tuple((op, tuple(sorted(table.items()))) for op, table in sorted((per_op_us or {}).items(),
                                                                                key=lambda kv: kv[0].value))
    return replace(cluster, comm=replace(cluster.comm, blocking_wait_us=tuple(sorted(waits_us.items())),
                                         op_wait_us=per_op))


def _excess_s(fast: Cluster, measurements, estimate: Callable, key=lambda m: m.ranks) -> dict:
    """Per ``key`` of a measurement (its process count), for each point up to :data:`WAIT_MAX_BYTES`: its calls'
    excess over ``fast``'s estimate."""
    from executor.calibrate import fit_rows

    out: dict = {}
    for m, row in zip(measurements, fit_rows(without_waits(fast), measurements, estimate)):
        if m.nbytes <= WAIT_MAX_BYTES:
            out.setdefault(key(m), []).append(np.asarray(m.times_s) - row.estimate_s)
    return out


def blocking_waits(fast: Cluster, measurements, estimate: Callable) -> dict[int, float]:
    """``W(p)`` in µs, per process count measured (module docstring), never below 0; ``fast`` is the cluster fitted
    to the 10th percentiles, ``estimate`` the fit's (:func:`executor.calibrate.executed_time`)."""
    return {p: max(0.0, float(np.mean(np.concatenate(points))) * 1e6)
            for p, points in sorted(_excess_s(fast, measurements, estimate).items())}


def op_waits(fast: Cluster, measurements, estimate: Callable) -> dict[Op, dict[int, float]]:
    """``W(op, p)`` in µs: :func:`blocking_waits` of each op's measurements apart (module docstring, "Per op"),
    never below 0."""
    out: dict[Op, dict[int, float]] = {}
    for (op, p), points in sorted(_excess_s(fast, measurements, estimate, key=lambda m: (m.op, m.ranks)).items(),
                                  key=lambda kv: (kv[0][0].value, kv[0][1])):
        out.setdefault(op, {})[p] = max(0.0, float(np.mean(np.concatenate(points))) * 1e6)
    return out


def wait_spread(fast: Cluster, measurements, estimate: Callable, *, resamples: int = RESAMPLES,
                seed: int = SEED, key=lambda m: m.ranks) -> dict:
    """Per process count (or per ``key``), the 10th and 90th percentiles of ``W(p)`` (µs) over bootstrap resamples of
    each point's calls (the fast fit held: the spread of the mean of one run's sample, as
    :mod:`executor.calibrate_spread`)."""
    rng = np.random.default_rng(seed)
    out = {}
    for p, points in sorted(_excess_s(fast, measurements, estimate, key).items(), key=lambda kv: str(kv[0])):
        draws = [float(np.mean(np.concatenate([rng.choice(x, size=len(x)) for x in points]))) * 1e6
                 for _ in range(resamples)]
        lo, hi = np.percentile(np.maximum(draws, 0.0), [10, 90])
        out[p] = (float(lo), float(hi))
    return out


def op_wait_spread(fast: Cluster, measurements, estimate: Callable) -> dict[Op, dict[int, tuple[float, float]]]:
    """:func:`wait_spread` of each op's own wait (:func:`op_waits`): op → process count → (p10, p90) µs."""
    out: dict[Op, dict[int, tuple[float, float]]] = {}
    for (op, p), band in wait_spread(fast, measurements, estimate, key=lambda m: (m.op, m.ranks)).items():
        out.setdefault(op, {})[p] = band
    return out


def waits_text(waits_us: dict[int, float], spread: dict[int, tuple[float, float]] | None = None) -> str:
    """``2 processes 760.0 us (p10..p90 610..930), ...``: as the CLI prints and the file's ``source`` records it."""
    spread = spread or {}
    return ", ".join(f"{p} processes {w:.1f} us" + (f" (p10..p90 {spread[p][0]:.0f}..{spread[p][1]:.0f})"
                                                     if p in spread else "") for p, w in sorted(waits_us.items()))



def op_waits_text(per_op_us: dict | None, spread: dict | None = None) -> str:
    """``all-reduce: 2 processes 1330.0 us (p10..p90 1100..1560), ...; broadcast: ...``: each op's own wait, with
    its bootstrap spread where given, as the ``source`` field records it."""
    spread = spread or {}
    return "; ".join(f"{op.value}: {waits_text(table, spread.get(op))}" for op, table in
                     sorted((per_op_us or {}).items(), key=lambda kv: kv[0].value))


def calls_per_point(nproc: int, repeats: int, cores: int) -> int:
    """Timed calls per point of a launch of ``nproc`` processes on ``cores`` cores: ``repeats`` × the multiple of
    :data:`CALLS_BY_CROWDING` for its processes per core, e.g. 20 → 80, 40, 20 at 2, 3, 4 processes on 2 cores."""
    for per_core, multiple in CALLS_BY_CROWDING:
        if nproc <= per_core * cores:
            return repeats * multiple
    return repeats
