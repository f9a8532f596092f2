"""Fit a one-node cluster's link parameters to measured collective times.

Model being fitted: for a group inside one node whose library has no protocol table (gloo), the
simulator's estimate of a call is linear in four parameters,

    T = c·call_latency_us + h·latency_us + b·(1/bw_GBps) + r·(1/hbm_bw_GBps) + T_fixed,

(per-call overhead, hops × hop latency, bytes on the busiest link / bandwidth, and the reduction
cost of ``3n / hbm_bw`` per reduced byte count n). The coefficients c, h, b, r of every measured
(algorithm, size) are read off ``registry.estimate`` itself by finite differences around the base
cluster, so the fit follows whatever the simulator computes; after the fit the real estimate is
evaluated again and its error reported. Where the estimate is only piecewise linear (a pipelined
algorithm picks its chunk count from the parameters), the fit is re-linearised at its result.

Fit: minimise the sum of |relative error| with every parameter >= 0 (:mod:`executor.calibrate_solve`). The
bandwidth is always fitted; the reduction rate (``device.hbm_bw_GBps``) only when asked, since it also drives the
compute model. The records returned, :class:`FitRow` and :class:`LinkFit`, live in :mod:`executor.calibrate_records`.

Well-posed design (:func:`calibrate`, 2026-11-25): the per-call and per-hop latencies are separable only if
the measured calls differ in hops at a fixed call count. A ring all-reduce alone has 2(p−1) hops at every
size, so its call and hop columns are proportional and the fit traded one for the other from run to run
(1646 µs per call and 0 per hop, then 0 and 211 µs, then 0 and 731 µs on three quiet runs). Each process
count therefore also times the ring all-gather (p−1 hops, the same call count, no reduction), and the sizes
start at 4 KiB, where the bytes cost almost nothing. Several process counts (2, 3, 4 on the 2-core VM) are
measured in one fit; each is estimated on a node of exactly its processes, so the time-sharing of the cores
(:attr:`simulator.collectives.cost.Env.time_share`) is a named multiplier of the estimate, not absorbed into
the latency. :func:`fit_cluster` fits whatever statistic each point's :data:`TARGET` field holds; the calibration
(:mod:`executor.calibrate_run`) gives it the 10th percentiles (the calls that did not wait for a core), adds the
expected wait per call measured per process count (:mod:`executor.calibrate_modes`), and checks the result against
each point's plain mean. :mod:`executor.calibrate_spread` reports each parameter's spread over bootstrap
resamples of the calls.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from executor.calibrate_records import FitRow, LinkFit  # noqa: F401 (re-exported)
from executor.calibrate_solve import solve_relative_l1
from simulator.cluster.spec import Cluster
from simulator.errors import SpecError

PARAMETERS = ("call_latency_us", "latency_us", "inv_bw", "inv_hbm_bw")
"""Fitted quantities, in order: per-call µs, per-hop µs, 1/(link GB/s), 1/(device memory GB/s)."""

RELINEARISE_ROUNDS = 8
"""Most linearised fits, each around the previous result (the estimate is piecewise linear)."""
TARGET = "mean_s"
"""The Measurement field each point is checked against, and fitted to unless the caller sets it to another
statistic first (:func:`executor.calibrate_modes.fast_points`: the 10th percentile): the plain mean, what a step
of many calls pays (collective_bench's module docstring)."""


def _default_estimate(cluster: Cluster, ranks: list[int], op, nbytes: int, algorithm: str):
    from simulator.collectives.registry import estimate

    return estimate(cluster, ranks, op, nbytes, algorithm)


def executed_time(cases) -> Callable:
    """An ``estimate`` that times exactly the schedule each measurement ran.

    ``registry.estimate`` re-chooses a pipelined algorithm's chunk count from the parameters being
    fitted, so it would compare the measurement with a schedule that never ran. The replay of the
    executed schedule (:func:`simulator.collectives.replay.schedule_time_s`, equal to the closed form
    for the same schedule) is exactly linear in the fitted parameters. A ``native`` case (the backend's own
    call) is timed by its :attr:`~executor.collective_bench.BenchCase.model`: the schedule of the algorithm the
    backend runs for the op, priced as the registry prices that op on gloo (a broadcast's steps at the share of
    their active processes, :func:`simulator.collectives.gloo.active_share_time_s`; an all-gather's copy out of
    gloo's buffer, :func:`simulator.collectives.gloo.output_copy_s`). A replayed case is priced as the step estimate
    prices a replay (:func:`simulator.collectives.replayed.schedule_replay_time_s`: each step at the share of its busy
    processes, plus its replay cost, 0 while ``comm.replay_step_us`` is 0).
    """
    from simulator.collectives.cost import Env
    from simulator.collectives.gloo import ACTIVE_SHARE, active_share_time_s, output_copy_s
    from simulator.collectives.registry import get_algorithm
    from simulator.collectives.replay import schedule_time_s
    from simulator.collectives.replayed import schedule_replay_time_s

    schedules = {(s.op, case.algorithm, len(s.ranks), s.nbytes): s for case in cases
                 if (s := case.timed_schedule) is not None}

    def estimate(cluster: Cluster, ranks, op, nbytes: int, algorithm: str):
        schedule = schedules[(op, algorithm, len(ranks), nbytes)]
        if algorithm == "native":  # gloo's own call: its algorithm's schedule, as the registry prices it on gloo
            if op in ACTIVE_SHARE:
                return _Timed(active_share_time_s(cluster, schedule, get_algorithm(schedule.algorithm)))
            return _Timed(schedule_time_s(cluster, schedule) + output_copy_s(Env(cluster, None), op, nbytes))
        return _Timed(schedule_replay_time_s(cluster, schedule))

    return estimate


@dataclass(frozen=True)
class _Timed:
    time_s: float


def check_calibratable(cluster: Cluster) -> None:
    """Calibration fits one tier: one node, and a library without NCCL's protocol table."""
    if cluster.nodes != 1:
        raise SpecError("cluster", f"calibration fits a one-node cluster; {cluster.name} has {cluster.nodes} nodes")
    if cluster.comm.protocols:
        raise SpecError("cluster", f"{cluster.name} uses a protocol table ({cluster.comm.library.value}); "
                                   "calibrate a cluster without one, such as localhost-cpu")


def on_node(cluster: Cluster, ranks: int) -> Cluster:
    """``cluster`` with exactly ``ranks`` processes on its one node: the processes a measurement ran, whose
    sharing of the cores the estimate charges (:attr:`simulator.collectives.cost.Env.time_share`)."""
    if cluster.node.gpus_per_node == ranks:
        return cluster
    return replace(cluster, node=replace(cluster.node, gpus_per_node=ranks))


def base_values(cluster: Cluster) -> np.ndarray:
    link = cluster.node.intra_link
    return np.array([cluster.comm.call_latency_us, link.latency_us, 1 / (link.bw_GBps * link.efficiency),
                     1 / cluster.device.hbm_bw_GBps])


def with_values(cluster: Cluster, values) -> Cluster:
    """``cluster`` with the four parameters set (bandwidth as measured: efficiency 1)."""
    call_us, hop_us, inv_bw, inv_hbm = (float(v) for v in values)
    link = replace(cluster.node.intra_link, latency_us=hop_us, bw_GBps=1 / inv_bw, efficiency=1.0)
    return replace(cluster, node=replace(cluster.node, intra_link=link),
                   comm=replace(cluster.comm, call_latency_us=call_us),
                   device=replace(cluster.device, hbm_bw_GBps=1 / inv_hbm))


def design_matrix(cluster: Cluster, measurements, estimate: Callable) -> tuple[np.ndarray, np.ndarray]:
    """Per measurement, dT/dθ for each parameter and the estimate at the base values.

    Returns (A, t0): ``A[i, k]`` seconds per unit of parameter k, ``t0[i]`` the base estimate.
    """
    theta0 = base_values(cluster)
    rows, t0 = [], []
    for m in measurements:
        ranks, at = list(range(m.ranks)), on_node(cluster, m.ranks)
        base = estimate(at, ranks, m.op, m.nbytes, m.algorithm).time_s
        row = []
        for k in range(len(PARAMETERS)):
            step = theta0[k] if theta0[k] > 0 else 1.0
            probe = theta0.copy()
            probe[k] += step
            row.append((estimate(with_values(at, probe), ranks, m.op, m.nbytes, m.algorithm).time_s - base) / step)
        rows.append(row)
        t0.append(base)
    return np.array(rows), np.array(t0)



def _linear_fit(at: Cluster, measurements, fitted: list[int], estimate: Callable) -> tuple[np.ndarray, list[int]]:
    """One linearised fit around the parameters of ``at``; returns θ and the indices fitted."""
    A, t0 = design_matrix(at, measurements, estimate)
    theta0 = base_values(at)
    measured = np.array([getattr(m, TARGET) for m in measurements])
    while True:
        fixed = [k for k in range(len(PARAMETERS)) if k not in fitted]
        offset = t0 - A @ theta0 + A[:, fixed] @ theta0[fixed]
        sub = solve_relative_l1(A[:, fitted], measured - offset, measured, [fitted.index(2)] +
                                ([fitted.index(3)] if 3 in fitted else []))
        if sub is None and 3 in fitted:
            fitted = [0, 1, 2]  # the reduction rate did not come out positive: keep the base value
            continue
        if sub is None:
            raise SpecError("measurements", "no positive bandwidth fits these times; measure larger sizes")
        theta = theta0.copy()
        theta[fitted] = sub
        return theta, fitted


def fit_rows(cluster: Cluster, measurements, estimate: Callable | None = None) -> list[FitRow]:
    """Each measurement (its :data:`TARGET`) beside ``cluster``'s estimate on a node of its processes."""
    estimate = estimate or _default_estimate
    return [FitRow(op=m.op.value, algorithm=m.algorithm, ranks=m.ranks, nbytes=m.nbytes,
                   measured_s=getattr(m, TARGET), median_s=m.median_s, p10_s=m.p10_s, p90_s=m.p90_s,
                   estimate_s=estimate(on_node(cluster, m.ranks), list(range(m.ranks)), m.op, m.nbytes,
                                       m.algorithm).time_s, times_s=tuple(m.times_s)) for m in measurements]


def fit_cluster(cluster: Cluster, measurements, *, fit_reduction: bool = False,
                estimate: Callable | None = None) -> tuple[Cluster, LinkFit]:
    """Fit the parameters to ``measurements`` (Measurement-like: op, algorithm, ranks, nbytes, the :data:`TARGET`
    field, median_s, p10_s, p90_s, times_s); each is estimated on a node of exactly its ``ranks`` (:func:`on_node`).

    ``estimate(cluster, ranks, op, nbytes, algorithm)`` defaults to ``registry.estimate``. The
    estimate is only piecewise linear (an algorithm may choose its pipelining depth from the
    parameters), so the fit is re-linearised at each result, up to :data:`RELINEARISE_ROUNDS`
    times, keeping the parameters whose *real* estimates have the smallest mean |relative error|.
    Returns the fitted cluster and the fit report.
    """
    check_calibratable(cluster)
    if not measurements:
        raise SpecError("measurements", "nothing to fit: measure at least one size")
    estimate = estimate or _default_estimate
    fitted = [0, 1, 2, 3] if fit_reduction else [0, 1, 2]
    at, best = cluster, None
    for rounds in range(1, RELINEARISE_ROUNDS + 1):
        theta, fitted = _linear_fit(at, measurements, fitted, estimate)
        candidate = with_values(cluster, theta)
        rows = fit_rows(candidate, measurements, estimate)
        score = statistics.fmean(abs(r.error_pct) for r in rows)
        if best is None or score < best[0]:
            best = (score, theta, candidate, rows, tuple(fitted))
        if np.allclose(theta, base_values(at), rtol=1e-6, atol=1e-9):
            break
        at = candidate
    _, theta, fitted_cluster, rows, fitted_idx = best
    fit = LinkFit(call_latency_us=float(theta[0]), latency_us=float(theta[1]), bw_GBps=float(1 / theta[2]),
                  hbm_bw_GBps=float(1 / theta[3]), fitted=tuple(PARAMETERS[k] for k in fitted_idx),
                  rows=tuple(rows), relinearised=rounds)
    return fitted_cluster, fit


def calibrate(**kwargs):
    """Measure and fit (:func:`executor.calibrate_run.calibrate`; kept here, where the CLI and the suite call it)."""
    from executor.calibrate_run import calibrate as run

    return run(**kwargs)
