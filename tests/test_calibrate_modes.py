"""The fast-mode diagnostic (executor/calibrate_modes.py): the model fitted to each point's 10th percentile, and
the per-call wait the trimmed means add. Synthetic measurements: no process is launched."""

from __future__ import annotations

import pytest

from executor.calibrate import executed_time, on_node, with_values
from executor.calibrate_modes import FastMode, fast_mode
from executor.calibrate_run import DEFAULT_ALGORITHMS, DEFAULT_SIZES, _cases, series_for
from executor.collective_bench import Measurement
from simulator.collectives.base import Op
from test_calibrate_design import TRUE, local

NPROCS = (2, 3, 4)
WAIT_S = 4e-3  # a slow call waits one 4 ms time slice


def _bimodal(truth, fast_calls: int, slow_calls: int):
    """Every native point of the default design timed as ``fast_calls`` calls at ``truth``'s exact time and
    ``slow_calls`` that waited :data:`WAIT_S` more."""
    series = series_for(Op.ALL_REDUCE, DEFAULT_ALGORITHMS)
    cases = [c for p in NPROCS for c in _cases(on_node(truth, p), series, p, list(DEFAULT_SIZES))]
    timed = executed_time(cases)
    out = []
    for case in cases:
        s, p = case.timed_schedule, len(case.timed_schedule.ranks)
        t = timed(on_node(truth, p), list(range(p)), s.op, case.nbytes, case.algorithm).time_s
        out.append(Measurement.from_times(s.op, case.algorithm, p, case.nbytes,
                                          [t] * fast_calls + [t + WAIT_S] * slow_calls))
    return local(4), out, timed


@pytest.mark.parametrize("slow_calls", [0, 10, 16])
def test_fast_mode_recovers_the_calls_that_did_not_wait(slow_calls):
    """20 calls per point, ``slow_calls`` of them 4 ms late: the 10th percentile is the fast time as long as at
    least 3 calls are fast, so the fit gives back the true call, hop and bandwidth however many waited; the
    trimmed mean (2 cut at each end) then carries (slow − 2) / 16 of the 4 ms: 0, 2 and 3.5 ms per call."""
    base, measured, timed = _bimodal(with_values(local(4), TRUE), 20 - slow_calls, slow_calls)
    fast = fast_mode(base, measured, timed)
    call_us, hop_us, inv_bw, _ = TRUE
    assert fast.call_latency_us == pytest.approx(call_us, rel=1e-6)
    assert fast.latency_us == pytest.approx(hop_us, rel=1e-6)
    assert fast.bw_GBps == pytest.approx(1 / inv_bw, rel=1e-6)
    expected_ms = max(0, slow_calls - 2) / 16 * WAIT_S * 1e3
    assert fast.wait_ms == pytest.approx({p: expected_ms for p in NPROCS}, abs=1e-9)


def test_text_names_every_process_count():
    line = FastMode(call_latency_us=70.0, latency_us=140.0, bw_GBps=2.0, wait_ms={2: 0.5, 3: 1.5, 4: 3.0}).text()
    assert "call 70.0 us, hop 140.0 us" in line and "3 processes 1.50 ms" in line


def test_fast_replay_step_is_the_step_of_the_replays_that_did_not_wait():
    """Ring replays timed on a cluster with replay_step_us = 50, most of their calls 4 ms late: the fast mode's
    replay step is 50 (their p10 on the fast cluster); the trimmed means would give far more."""
    from dataclasses import replace

    from executor.calibrate_replay import REPLAY_SERIES

    truth = replace(with_values(local(4), TRUE), comm=replace(local(4).comm, call_latency_us=TRUE[0],
                                                                replay_step_us=50.0))
    base, measured, _ = _bimodal(truth, 4, 16)
    cases = [c for p in NPROCS for c in _cases(on_node(truth, p), [REPLAY_SERIES], p, list(DEFAULT_SIZES))]
    timed = executed_time(cases)
    replays = []
    for case in cases:
        p = len(case.timed_schedule.ranks)
        t = timed(on_node(truth, p), list(range(p)), Op.ALL_REDUCE, case.nbytes, case.algorithm).time_s
        replays.append(Measurement.from_times(Op.ALL_REDUCE, case.algorithm, p, case.nbytes,
                                              [t] * 4 + [t + WAIT_S] * 16))
    all_cases = cases + [c for p in NPROCS for c in _cases(on_node(truth, p), series_for(
        Op.ALL_REDUCE, DEFAULT_ALGORITHMS), p, list(DEFAULT_SIZES))]
    fast = fast_mode(base, measured, executed_time(all_cases), replays, all_cases)
    assert fast.replay_step_us == pytest.approx(50.0, rel=1e-6)
    assert "replay step 50.0 us" in fast.text()
