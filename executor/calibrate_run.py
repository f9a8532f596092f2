"""``trainplan calibrate``'s measurement design, fit and fresh check (the fit itself: :mod:`executor.calibrate`; the
calibrated file's ``source`` text and the machine note: :mod:`executor.calibrate_source`).

Design (why each part, :mod:`executor.calibrate`'s module docstring):

- per process count ``p`` of ``nprocs`` (the suite's 2, 3 and 4 local processes; on the 2-core VM 3 and 4
  time-share the cores), one launch times every size of every series: the asked ``op`` with each asked
  algorithm, and an all-gather (:data:`NATIVE_HOP_SERIES` or :data:`HOP_SERIES`: p−1 hops and one call,
  against the ring all-reduce's 2(p−1), so per-call and per-hop latencies separate);
- by default (:data:`DEFAULT_ALGORITHMS`) the calls are gloo's own (``dist.all_reduce``,
  ``dist.all_gather_single``), what the suite's plans call, and each native point's coefficients come
  from the schedule of the algorithm gloo runs for it (ring for both, :func:`native_model`); replayed
  algorithms (``--algorithms ring,tree``) are still measured as replays;
- every point is estimated on a node of exactly ``p`` processes (the cores' time-sharing is the estimate's
  ``share`` multiplier, :attr:`simulator.collectives.cost.Env.time_share`, not a fitted quantity);
- the network is fitted to each point's 10th percentile (the calls that did not wait for a core), the expected
  wait per blocking call is measured per process count as the plain means' excess over that fit
  (:mod:`executor.calibrate_modes`, ``comm.blocking_wait_us``), and the result is checked against the plain means;
  each parameter's and each wait's spread is reported (:mod:`executor.calibrate_spread`);
- :func:`check` measures a fresh set against the calibrated cluster, as a user closes the loop;
- how quiet the machine was is recorded with both (:func:`machine_note`): the 1-minute load average before
  and after, and the share of the CPU other work took while measuring (``executor.suite_run``'s sampling of
  ``/proc/stat`` less our own processes); above the suite's quiet threshold the note says NOISY.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from executor.calibrate_source import calls_text, machine_note, series_text, source_text, spread_text
from simulator.cluster.spec import Cluster
from simulator.collectives.base import Op

__all__ = ["DEFAULT_ALGORITHMS", "DEFAULT_PROCESSES", "DEFAULT_REPEATS", "DEFAULT_SIZES", "DEFAULT_WARMUP",
           "HOP_SERIES", "NATIVE", "NATIVE_HOP_SERIES", "calibrate", "check", "fit_measured", "measure_design",
           "native_bytes", "native_model", "probes_for", "series_for",  # this module's; calibrate_source's texts
           "calls_text", "machine_note", "spread_text"]  # re-exported

NATIVE = "native"
"""The backend's own call (``dist.all_reduce`` and friends), as :data:`executor.collective_bench.NATIVE`."""
DEFAULT_PROCESSES = (2, 3, 4)
"""Process counts measured by default: the suite's local groups (on the 2-core VM 3 and 4 time-share the cores)."""
DEFAULT_SIZES = tuple(4096 * 4 ** i for i in range(6))
"""Message sizes measured by default, bytes: 4 KiB .. 4 MiB, ×4 (the tensor-parallel activations, a few KiB,
where the latencies show, to beyond the tiny models' gradient buckets, about 0.5 MB of fp32). ×4 rather than ×2
(2026-11-25): the fit has three parameters and the design's rank comes from the two series and the process
counts, not from more sizes; the time goes to the probes (:mod:`executor.calibrate_replay`) and to repeats."""
DEFAULT_REPEATS = 20
"""Timed calls per point by default (their 10th percentile is fitted; their mean checked) at 2 or more processes per
core; on gloo ×4 at up to 1 and ×2 at up to 1.5 per core (:data:`executor.calibrate_modes.CALLS_BY_CROWDING`)."""
DEFAULT_WARMUP = 3
"""Untimed calls per point before them."""
DEFAULT_ALGORITHMS = (NATIVE,)
"""What the default design times: the native calls the suite's plans make (DDP, FSDP2 and TP call gloo's own
collectives), not replays of the simulator's schedules, which cost a replay's per-step Python and gloo calls
(a 4 KiB 2-process all-reduce 0.44 ms native against 4.3 ms replayed under load, issue 11)."""
HOP_SERIES = (Op.ALL_GATHER, "ring")
"""The series measured beside replayed algorithms so that hops vary at a fixed call count (module docstring)."""
NATIVE_HOP_SERIES = (Op.ALL_GATHER, NATIVE)
"""Its native counterpart: gloo's all-gather is a ring of p−1 hops, its all-reduce a ring of 2(p−1)
(:data:`simulator.collectives.registry.GLOO_NATIVE`), so the two native series separate the same columns."""


def series_for(op: Op, algorithms: Sequence[str], separate_hops: bool = True) -> list[tuple[Op, str]]:
    """(op, algorithm) pairs to time: the asked ones, then :data:`NATIVE_HOP_SERIES` if ``native`` is asked,
    else :data:`HOP_SERIES`, unless already there or ``separate_hops`` is off."""
    series = [(op, a) for a in algorithms]
    hop = NATIVE_HOP_SERIES if NATIVE in algorithms else HOP_SERIES
    if separate_hops and hop not in series:
        series.append(hop)
    return series


def native_model(op: Op) -> str:
    """The registered algorithm whose schedule stands for gloo's native ``op`` in the fit; an op whose native
    algorithm is not established cannot be fitted natively (SpecError naming the ops that can)."""
    from simulator.collectives.registry import GLOO_NATIVE
    from simulator.errors import SpecError

    if op not in GLOO_NATIVE:
        raise SpecError("algorithms", f"native {op.value} has no established gloo algorithm to fit it with; "
                                      f"native works for {', '.join(o.value for o in GLOO_NATIVE)}, or give "
                                      "replayed algorithms such as ring")
    return GLOO_NATIVE[op]


def native_bytes(op: Op, nbytes: int, nproc: int) -> int:
    """``nbytes`` rounded down to whole float32 elements per rank where the native call splits its buffer evenly
    (all-gather, reduce-scatter, all-to-all: ``all_gather_single`` and friends refuse a ragged split)."""
    if op not in (Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL):
        return nbytes
    unit = 4 * nproc
    return max(unit, nbytes // unit * unit)


def _cases(cluster: Cluster, series, nproc: int, sizes: list[int]):
    """Every (op, algorithm, size) of ``series`` on ``nproc`` ranks, as one launch's cases: replays of the
    registry's schedules, and native calls, each with the schedule of gloo's own algorithm as the model the fit
    times [src: gloo-native-algorithms]."""
    from executor.collective_bench import BenchCase, build_cases
    from simulator.collectives.registry import build_schedule

    cases = []
    for op, algorithm in series:
        if algorithm != NATIVE:
            cases += build_cases(cluster, op, [algorithm], nproc, sizes)
            continue
        model = native_model(op)
        for nbytes in dict.fromkeys(native_bytes(op, n, nproc) for n in sizes):
            cases.append(BenchCase(algorithm=NATIVE, nbytes=nbytes, op=op,
                                   model=build_schedule(cluster, list(range(nproc)), op, nbytes, model)))
    return cases


def measure_design(base: Cluster | None, series, nprocs: Sequence[int], sizes: list[int], *, backend: str,
                   repeats: int, warmup: int, progress: bool, moments: int = 1):
    """Measure ``series`` at every process count of ``nprocs``: (measurements, cases, :func:`machine_note`, by moment);
    on gloo ``repeats`` calls per point at 2 or more processes per core, more where fewer share a core
    (:func:`executor.calibrate_modes.calls_per_point`). With ``moments`` > 1 the counts of
    :data:`executor.calibrate_moments.MOMENT_PROCESSES` are launched that many times between the others, each with
    its share of the calls (:func:`executor.calibrate_moments.launch_order`): the measurements are every moment's
    calls pooled, and "by moment" lists each moment's own (empty with one moment)."""
    import os
    import time

    from executor.calibrate_host import host_cores
    from executor.calibrate_modes import calls_per_point
    from executor.calibrate_moments import MOMENT_PROCESSES, calls_per_moment, launch_order, pooled
    from executor.collective_bench import local_cluster, measure_cases
    from executor.own_cpu import own_cpu_s
    from executor.suite_run import _machine_busy_s, foreign_fraction

    load0, busy0, own0, t0 = os.getloadavg()[0], _machine_busy_s(), own_cpu_s(), time.perf_counter()
    volatile = MOMENT_PROCESSES if moments > 1 else ()
    measurements, cases, by_moment = [], {}, [[] for _ in range(moments if volatile else 0)]
    for nproc, moment in launch_order(nprocs, volatile, moments):
        cluster = local_cluster(nproc, base)
        cases.setdefault(nproc, _cases(cluster, series, nproc, sizes))
        calls = repeats if backend != "gloo" else calls_per_point(nproc, repeats, host_cores())
        taken = measure_cases(series[0][0], cases[nproc], nproc, backend=backend, warmup=warmup, progress=progress,
                              repeats=calls_per_moment(calls, moments) if nproc in volatile else calls)
        measurements += taken
        if nproc in volatile:
            by_moment[moment] += taken
    foreign = foreign_fraction(busy0, own0, time.perf_counter() - t0)
    return (pooled(measurements), [c for launch in cases.values() for c in launch],
            machine_note(load0, os.getloadavg()[0], foreign), by_moment)


def probes_for(algorithms: Sequence[str], backend: str) -> tuple:
    """The probes timed beside the fit (:data:`executor.calibrate_replay.PROBE_SERIES`: native broadcast, ring
    replay) in the native design on gloo; none beside replayed algorithms or on another backend."""
    from executor.calibrate_replay import PROBE_SERIES

    return PROBE_SERIES if NATIVE in algorithms and backend == "gloo" else ()


def calibrate(*, nproc: int | Sequence[int] = DEFAULT_PROCESSES, sizes: Sequence[int] = DEFAULT_SIZES,
              algorithms=DEFAULT_ALGORITHMS, op=None, backend: str = "gloo", repeats: int = DEFAULT_REPEATS,
              warmup: int = DEFAULT_WARMUP, base: Cluster | None = None, fit_reduction: bool = False,
              separate_hops: bool = True, progress: bool = False):
    """Measure (module docstring) on each process count of ``nproc`` and fit ``base`` (localhost-cpu) to it;
    ``trainplan calibrate`` and ``validate --suite --calibrate`` both call this with the defaults (one design).

    Returns ``(cluster, fit)``: the cluster named ``<base>-calibrated`` (its ``source`` records the date,
    host, process counts, series, sizes, repeats, the fit's median absolute error and each parameter's
    spread; ``comm.replay_step_us`` from the replay probe) and the :class:`executor.calibrate.LinkFit` with
    ``spread``, ``replay_step_us`` and the probes' rows filled in.
    """
    from executor.calibrate import check_calibratable
    from executor.calibrate_groups import with_pair_waits
    from executor.calibrate_dtensor import dtensor_moment, dtensor_moments, with_dtensor_waits
    from executor.calibrate_fsdp2 import measure_fsdp2_waits, with_fsdp2_waits
    from executor.calibrate_modes import without_waits
    from executor.calibrate_moments import MOMENTS
    from executor.collective_bench import local_cluster

    op = Op.ALL_REDUCE if op is None else op
    nprocs = (nproc,) if isinstance(nproc, int) else tuple(nproc)
    cluster = without_waits(local_cluster(max(nprocs), base))
    check_calibratable(cluster)
    series = series_for(op, algorithms, separate_hops)
    if backend != "gloo" and any(a == NATIVE for _, a in series):
        from simulator.errors import SpecError

        raise SpecError("algorithms", f"native calls are fitted with gloo's own algorithms; on {backend} give "
                                      "replayed algorithms, e.g. --algorithms ring")
    probes = probes_for(algorithms, backend)
    sizes, moments = list(sizes), MOMENTS if backend == "gloo" else 1
    dtensor_at = nprocs if probes else ()  # DTensor probe's takes: before the sweep, after the pairs', after FSDP2's
    dtensor_takes = [dtensor_moment(dtensor_at)]
    measured, cases, machine, by_moment = measure_design(cluster, series + list(probes), nprocs, sizes,
                                                         backend=backend, repeats=repeats, warmup=warmup,
                                                         progress=progress, moments=moments)
    fitted, fit = fit_measured(cluster, measured, cases, probes, fit_reduction=fit_reduction, by_moment=by_moment)
    fit = replace(fit, machine=machine)
    batched = _async_broadcasts(nprocs) if probes else {}
    if batched:
        fitted = replace(fitted, comm=replace(fitted.comm, async_broadcast_us=tuple(sorted(batched.items()))))
    pairs = _pair_waits(fitted, nprocs) if probes else {}
    fitted = with_pair_waits(fitted, pairs)
    dtensor_takes.append(dtensor_moment(dtensor_at))
    fsdp2 = measure_fsdp2_waits(fitted, nprocs) if probes else {}
    dtensor_takes.append(dtensor_moment(dtensor_at))
    dtensor, dtensor_sp = dtensor_moments(fitted, dtensor_takes)
    fitted = with_fsdp2_waits(with_dtensor_waits(fitted, dtensor, dtensor_sp), fsdp2)
    what = series_text(series, probes)
    source = source_text(cluster.name, fit, backend=backend, nprocs=nprocs, what=what, sizes=sizes, repeats=repeats,
                         warmup=warmup, moments=moments, pairs=pairs, dtensor=dtensor, dtensor_sp=dtensor_sp,
                         fsdp2=fsdp2, batched=batched)
    description = (f"{cluster.name} fitted by trainplan calibrate to {backend} {what} on "
                   f"{', '.join(map(str, nprocs))} processes")
    return replace(fitted, name=f"{cluster.name}-calibrated", description=description, source=source), fit


def _async_broadcasts(nprocs: Sequence[int]) -> dict[int, float]:
    """``comm.async_broadcast_us`` measured beside the native design's probes (:mod:`executor.calibrate_async`)."""
    from executor.calibrate_async import async_broadcast_us

    return async_broadcast_us(nprocs)


def _pair_waits(fitted: Cluster, nprocs: Sequence[int]) -> dict[int, float]:
    """``comm.group_wait_us[2]`` measured beside the native design's probes (:mod:`executor.calibrate_groups`)."""
    from executor.calibrate_groups import pair_calls, pair_waits_us

    return pair_waits_us(fitted, pair_calls(nprocs))


def fit_measured(cluster: Cluster, measured, cases, probes=(), *, fit_reduction: bool = False, by_moment=()):
    """The calibration's fit of one measured design (``measured``: every Measurement of the launches ``cases``,
    the ``probes`` among them), on ``cluster`` without waits: the network fitted to the 10th percentiles, the
    expected wait per blocking call per process count (:mod:`executor.calibrate_modes`; where ``by_moment`` gives
    each moment's measurements, the median of the moments' waits, :mod:`executor.calibrate_moments`), then the
    replay step (:mod:`executor.calibrate_replay`); every row checked against the plain means. Returns ``(fitted,
    LinkFit)``. Also what re-fits recorded calibrations (``--json``'s rows) offline."""
    from executor.calibrate import executed_time, fit_cluster, fit_rows
    from executor.calibrate_modes import blocking_waits, fast_points, op_wait_spread, op_waits, wait_spread, with_waits
    from executor.calibrate_moments import moment_waits, with_medians
    from executor.calibrate_replay import fit_replay_step, split_probes
    from executor.calibrate_spread import parameter_spread

    measurements, replays, checked = split_probes(measured, probes)
    estimate = executed_time(cases)
    fast, fit = fit_cluster(cluster, fast_points(measurements), fit_reduction=fit_reduction, estimate=estimate)
    waits = blocking_waits(fast, measurements, estimate)
    per_op = op_waits(fast, measurements + checked, estimate)  # the broadcast probe's own wait too
    moments = moment_waits(fast, [m for m in by_moment if m], estimate, probes)
    waits, per_op = with_medians(waits, per_op, *moments)
    fitted = with_waits(fast, waits, per_op)
    replay_step_us = fit_replay_step(fitted, replays, cases) if replays else None
    if replay_step_us is not None:
        fitted = replace(fitted, comm=replace(fitted.comm, replay_step_us=replay_step_us))
    return fitted, replace(fit, rows=tuple(fit_rows(fitted, measurements, estimate)),
                           spread=parameter_spread(fast, measurements, fit.fitted, estimate), blocking_wait_us=waits,
                           op_wait_us=per_op, op_wait_spread=op_wait_spread(fast, measurements + checked, estimate),
                           wait_spread=wait_spread(fast, measurements, estimate), replay_step_us=replay_step_us,
                           probes=tuple(fit_rows(fitted, replays + checked, estimate)), wait_moments=moments[0],
                           op_wait_moments=moments[1])


def check(cluster: Cluster, *, nproc: int | Sequence[int], sizes: Sequence[int], series, probes=(),
          backend: str = "gloo", repeats: int = DEFAULT_REPEATS, warmup: int = DEFAULT_WARMUP,
          progress: bool = False):
    """A fresh measurement of ``series`` and ``probes`` on each process count against ``cluster`` (a calibrated
    file): ``(rows, probe_rows, machine)``: the :class:`executor.calibrate.FitRow` of every point of the series
    and of the probes, their schedules rebuilt from ``cluster``, and :func:`machine_note`."""
    from executor.calibrate import executed_time, fit_rows
    from executor.calibrate_replay import split_probes

    nprocs = (nproc,) if isinstance(nproc, int) else tuple(nproc)
    measured, cases, machine, _ = measure_design(cluster, list(series) + list(probes), nprocs, list(sizes),
                                                 backend=backend, repeats=repeats, warmup=warmup, progress=progress)
    estimate = executed_time(cases)
    fitted, replays, checked = split_probes(measured, probes)
    return fit_rows(cluster, fitted, estimate), fit_rows(cluster, replays + checked, estimate), machine
