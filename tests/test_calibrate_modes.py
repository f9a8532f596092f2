"""The calibration's model of a blocking call (executor/calibrate_modes.py, executor/calibrate_run.fit_measured): the
network fitted to each point's 10th percentile, plus the expected wait per call measured per process count as the
plain means' excess. Synthetic measurements: no process is launched."""

from __future__ import annotations

from dataclasses import replace

import pytest

from executor.calibrate import executed_time, fit_rows, on_node, with_values
from executor.calibrate_modes import blocking_waits, wait_spread, waits_text
from executor.calibrate_run import DEFAULT_ALGORITHMS, DEFAULT_SIZES, _cases, fit_measured, series_for
from executor.collective_bench import Measurement
from simulator.collectives.base import Op
from test_calibrate_design import TRUE, local

NPROCS = (2, 3, 4)
TICK_S = 4e-3  # a call that waits for a core waits one 4 ms scheduler tick
SLOW_CALLS = {2: 4, 3: 10, 4: 16}  # of 20 calls per point: 20 %, 50 %, 80 % wait, as on the 2-core VM


def _bimodal(truth, slow_calls: dict[int, int], series=None):
    """Every point of ``series`` (default: the native design's) timed as 20 calls: ``20 − slow`` at ``truth``'s
    exact time and ``slow`` one tick later, ``slow`` by process count."""
    return _bimodal_series(truth, series or series_for(Op.ALL_REDUCE, DEFAULT_ALGORITHMS),
                           lambda _op, p: slow_calls[p])


def _bimodal_series(truth, series, slow_of):
    """Every point of ``series`` timed as 20 calls, ``slow_of(op, processes)`` of them one tick late."""
    cases = [c for p in NPROCS for c in _cases(on_node(truth, p), series, p, list(DEFAULT_SIZES))]
    timed = executed_time(cases)
    out = []
    for case in cases:
        s, p = case.timed_schedule, len(case.timed_schedule.ranks)
        t = timed(on_node(truth, p), list(range(p)), s.op, case.nbytes, case.algorithm).time_s
        k = slow_of(s.op, p)
        out.append(Measurement.from_times(s.op, case.algorithm, p, case.nbytes, [t] * (20 - k) + [t + TICK_S] * k))
    return out, cases


def test_fast_fit_and_waits_recover_a_bimodal_truth():
    """The 10th percentile is the fast time while at least 3 of 20 calls are fast, so the fit gives back the true
    call, hop and bandwidth; the wait is the mean excess, slow/20 × 4 ms: 0.8, 2.0 and 3.2 ms at 2, 3, 4
    processes; the fitted cluster with its waits then estimates every point's plain mean exactly."""
    truth = with_values(local(4), TRUE)
    measured, cases = _bimodal(truth, SLOW_CALLS)
    fitted, fit = fit_measured(local(4), measured, cases)
    call_us, hop_us, inv_bw, _ = TRUE
    assert fit.call_latency_us == pytest.approx(call_us, rel=1e-6)
    assert fit.latency_us == pytest.approx(hop_us, rel=1e-6)
    assert fit.bw_GBps == pytest.approx(1 / inv_bw, rel=1e-6)
    assert fit.blocking_wait_us == pytest.approx({2: 800.0, 3: 2000.0, 4: 3200.0}, rel=1e-6)
    assert fitted.comm.blocking_wait_us == tuple(sorted(fit.blocking_wait_us.items()))  # written to the file
    assert max(abs(r.error_pct) for r in fit.rows) < 1e-6  # rows: estimate (fast + wait) against the plain mean
    assert all(r.measured_s == pytest.approx(sum(r.times_s) / 20) for r in fit.rows)


def test_more_waiting_raises_the_wait_not_the_network():
    """Twice the stalls at every count (2, 4, 8 of 20 calls, then 4, 8, 16): the fitted network stays where it
    was, only the waits double."""
    truth = with_values(local(4), TRUE)
    fits = [fit_measured(local(4), *_bimodal(truth, {2: 2 * k, 3: 4 * k, 4: 8 * k}))[1] for k in (1, 2)]
    assert fits[0].latency_us == pytest.approx(fits[1].latency_us, rel=1e-6)
    assert fits[0].call_latency_us == pytest.approx(fits[1].call_latency_us, rel=1e-6)
    for p in NPROCS:
        assert fits[1].blocking_wait_us[p] == pytest.approx(2 * fits[0].blocking_wait_us[p], rel=1e-6)


def test_only_small_calls_measure_the_wait():
    """A point above 256 KiB whose calls are all much slower does not move the wait."""
    from dataclasses import replace

    truth = with_values(local(4), TRUE)
    measured, cases = _bimodal(truth, SLOW_CALLS)
    slowed = [m if m.nbytes <= 256 * 1024 else Measurement.from_times(m.op, m.algorithm, m.ranks, m.nbytes,
                                                                      [t + 0.05 for t in m.times_s])
              for m in measured]
    fast = replace(truth, comm=replace(truth.comm, blocking_wait_us=()))
    assert blocking_waits(fast, slowed, executed_time(cases)) == pytest.approx(
        blocking_waits(fast, measured, executed_time(cases)), rel=1e-9)


def test_wait_spread_brackets_the_wait():
    truth = with_values(local(4), TRUE)
    measured, cases = _bimodal(truth, SLOW_CALLS)
    spread = wait_spread(truth, measured, executed_time(cases))
    for p, w in {2: 800.0, 3: 2000.0, 4: 3200.0}.items():
        lo, hi = spread[p]
        assert lo < w < hi and hi - lo < w


def test_waits_text_names_every_process_count():
    line = waits_text({2: 760.0, 4: 3700.0}, {2: (610.0, 930.0)})
    assert line == "2 processes 760.0 us (p10..p90 610..930), 4 processes 3700.0 us"


def test_replay_step_is_fitted_on_the_cluster_with_its_waits():
    """Ring replays timed on a cluster with replay_step_us = 50 and the same stalls as the native calls: fitted on
    the cluster with its waits, against the replays' means, the replay step is 50 (one wait per replayed call is
    already in the estimate)."""
    from dataclasses import replace

    from executor.calibrate_replay import PROBE_SERIES, REPLAY_SERIES

    truth = replace(with_values(local(4), TRUE), comm=replace(local(4).comm, call_latency_us=TRUE[0],
                                                                replay_step_us=50.0))
    measured, cases = _bimodal(truth, SLOW_CALLS, series_for(Op.ALL_REDUCE, DEFAULT_ALGORITHMS) + [REPLAY_SERIES])
    _, fit = fit_measured(local(4), measured, cases, PROBE_SERIES)
    assert fit.replay_step_us == pytest.approx(50.0, rel=1e-6)


# Per op (check15): each measured op's own wait, the broadcast's from its probe

OP_SLOW = {Op.ALL_REDUCE: {2: 6, 3: 10, 4: 16}, Op.ALL_GATHER: {2: 3, 3: 10, 4: 12}, Op.BROADCAST: {2: 1, 3: 3, 4: 5}}


def _bimodal_by_op(truth, slow: dict):
    """As :func:`_bimodal` with the native broadcast probe beside the fitted series, the slow calls by op then count."""
    from executor.calibrate_replay import PROBE_SERIES

    series = series_for(Op.ALL_REDUCE, DEFAULT_ALGORITHMS) + [PROBE_SERIES[0]]
    return _bimodal_series(truth, series, lambda op, p: slow[op][p])


def test_each_op_gets_its_own_wait_and_the_estimate_its_mean():
    """All-reduce, all-gather and broadcast waiting in 6 / 3 / 1 of 20 calls at 2 processes (and so on): the waits
    written per op are k/20 × 4 ms (1200 / 600 / 200 µs at 2), the default the fitted series' pooled mean (900 µs
    at 2: (6 + 3)/40 × 4 ms), and with them every fitted row and the broadcast probe's rows match their plain means
    exactly, where the pooled wait alone misses the all-reduce and the broadcast."""
    from executor.calibrate_replay import PROBE_SERIES

    truth = with_values(local(4), TRUE)
    measured, cases = _bimodal_by_op(truth, OP_SLOW)
    fitted, fit = fit_measured(local(4), measured, cases, PROBE_SERIES[:1])
    for op, slow in OP_SLOW.items():
        assert fit.op_wait_us[op] == pytest.approx({p: k / 20 * TICK_S * 1e6 for p, k in slow.items()}, rel=1e-6)
        assert dict(dict(fitted.comm.op_wait_us)[op]) == pytest.approx(fit.op_wait_us[op], rel=1e-9)
    assert fit.blocking_wait_us[2] == pytest.approx(900.0, rel=1e-6)
    for op, table in fit.op_wait_us.items():  # each op's bootstrap band holds its wait
        assert all(fit.op_wait_spread[op][p][0] <= w <= fit.op_wait_spread[op][p][1] for p, w in table.items())
    assert max(abs(r.error_pct) for r in fit.rows + fit.probes) < 1e-6
    pooled = replace(fitted, comm=replace(fitted.comm, op_wait_us=()))
    rows = fit_rows(pooled, [m for m in measured if m.op is not Op.ALL_GATHER], executed_time(cases))
    assert max(abs(r.error_pct) for r in rows) > 10


def test_calls_per_point_by_processes_per_core():
    """Hand-worked from CALLS_BY_CROWDING: 20 calls → 80 / 40 / 20 at 2 / 3 / 4 processes on 2 cores; on 8 cores
    4 processes (0.5 per core) take 80; 8 processes on 1 core take 20."""
    from executor.calibrate_modes import calls_per_point

    assert [calls_per_point(p, 20, 2) for p in (2, 3, 4)] == [80, 40, 20]
    assert calls_per_point(4, 20, 8) == 80 and calls_per_point(8, 20, 1) == 20
