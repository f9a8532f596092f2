"""Volatile calibration probes taken at several moments (executor/calibrate_moments.py): the median of the moments
written, their range recorded. Hand-worked numbers, hypothesis properties, and the network fit on synthetic
bimodal calls (no process is launched)."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, strategies as st

from executor.calibrate import with_values
from executor.calibrate_moments import (MOMENTS, Moments, calls_per_moment, launch_order, moments_source_text,
                                        moments_text, pooled)
from executor.calibrate_run import fit_measured
from executor.collective_bench import Measurement
from simulator.collectives.base import Op
from test_calibrate_design import TRUE, local
from test_calibrate_modes import _bimodal

VALUES = st.floats(min_value=0.0, max_value=1e5, allow_nan=False)


def test_three_moments_by_hand():
    """save16's two quiet readings of host.step_after_save_us and a third: the written value is the middle one, the
    range the extremes (docs/validation.md, 72 and 695 µs)."""
    m = Moments((72.0, 695.0, 710.0))
    assert (m.median, m.low, m.high) == (695.0, 72.0, 710.0)
    assert m.text() == "695 us (moments 72, 695, 710; min..max 72..710)"
    assert Moments((710.0, 72.0, 695.0)).median == 695.0  # the order taken does not matter
    with pytest.raises(ValueError):
        Moments(())


@given(st.lists(VALUES, min_size=1, max_size=7))
def test_median_lies_within_the_range_and_ignores_order(values):
    m = Moments(tuple(values))
    assert m.low <= m.median <= m.high
    assert Moments(tuple(reversed(values))).median == m.median


@given(VALUES, VALUES, st.floats(min_value=-1e9, max_value=1e9, allow_nan=False))
def test_one_wild_moment_of_three_cannot_move_the_median_outside_the_others(a, b, wild):
    """The reason for three moments: one take read at an odd moment (72 against ~700 µs) is outvoted."""
    assert min(a, b) <= Moments((a, wild, b)).median <= max(a, b)


def test_launch_order_of_the_default_sweep():
    """2 processes (volatile) taken three times, its takes separated by the 3- and 4-process launches."""
    assert launch_order((2, 3, 4), (2,), 3) == ((2, 0), (3, 0), (2, 1), (4, 0), (2, 2))
    assert launch_order((2, 3, 4), (), 3) == ((2, 0), (3, 0), (4, 0))
    assert launch_order((3, 4), (2,), 3) == ((3, 0), (4, 0))  # no volatile count measured: as before


@given(st.sets(st.integers(2, 8), min_size=1, max_size=6), st.sets(st.integers(2, 8), max_size=3),
       st.integers(1, 5))
def test_launch_order_takes_each_volatile_count_k_times_and_the_others_once(counts, volatile, k):
    nprocs = sorted(counts)
    order = launch_order(nprocs, tuple(volatile), k)
    for p in nprocs:
        moments = [m for q, m in order if q == p]
        assert moments == (list(range(k)) if p in volatile else [0])
    assert {p for p, _ in order} == set(nprocs)


@given(st.integers(1, 500), st.integers(1, 6))
def test_calls_per_moment_covers_the_calls_with_less_than_one_moment_to_spare(calls, k):
    c = calls_per_moment(calls, k)
    assert c * k >= calls > (c - 1) * k
    assert calls_per_moment(80, 3) == 27  # the 2-process points: 80 calls as 3 × 27


def test_pooled_merges_a_point_taken_at_several_moments():
    a = Measurement.from_times(Op.ALL_REDUCE, "native", 2, 4096, [1.0, 3.0])
    b = Measurement.from_times(Op.ALL_REDUCE, "native", 2, 4096, [2.0])
    c = Measurement.from_times(Op.ALL_GATHER, "native", 2, 4096, [5.0])
    merged = pooled([a, c, b])
    assert [m.op for m in merged] == [Op.ALL_REDUCE, Op.ALL_GATHER]  # first-seen order
    assert merged[0].times_s == (1.0, 3.0, 2.0) and merged[0].mean_s == pytest.approx(2.0)
    assert merged[1] is c


@given(st.lists(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=5), min_size=1, max_size=4))
def test_pooling_keeps_every_call(moments):
    taken = [Measurement.from_times(Op.ALL_REDUCE, "native", 2, 4096, ts) for ts in moments]
    (merged,) = pooled(taken)
    assert len(merged.times_s) == sum(map(len, moments))
    assert merged.mean_s == pytest.approx(statistics.fmean(t for ts in moments for t in ts))


def test_the_2_process_wait_written_is_the_median_of_its_moments():
    """Three 2-process takes whose calls wait a 4 ms tick in 2, 4 and 12 of 20 calls: their waits are 400, 800 and
    2,400 µs; all calls pooled would give their mean, 1,200 µs; the median written is 800 µs. The network is fitted
    on the pooled calls (the true parameters back) and the 3- and 4-process waits are as taken once."""
    truth = with_values(local(4), TRUE)
    takes = [_bimodal(truth, {2: slow, 3: 10, 4: 16}) for slow in (2, 4, 12)]
    cases = takes[0][1]
    by_moment = [[m for m in measured if m.ranks == 2] for measured, _ in takes]
    others = [m for m in takes[0][0] if m.ranks != 2]
    fitted, fit = fit_measured(local(4), pooled([m for ms in by_moment for m in ms] + others), cases,
                               by_moment=by_moment)
    assert fit.wait_moments[2].values == pytest.approx((400.0, 800.0, 2400.0), rel=1e-6)
    assert fit.blocking_wait_us == pytest.approx({2: 800.0, 3: 2000.0, 4: 3200.0}, rel=1e-6)
    assert dict(fitted.comm.blocking_wait_us)[2] == pytest.approx(800.0, rel=1e-6)  # written to the file
    assert fit.op_wait_us[Op.ALL_REDUCE][2] == pytest.approx(800.0, rel=1e-6)
    assert fit.op_wait_moments[Op.ALL_GATHER][2].values == pytest.approx((400.0, 800.0, 2400.0), rel=1e-6)
    assert fit.latency_us == pytest.approx(TRUE[1], rel=1e-6)
    text = moments_source_text(fit.wait_moments, fit.op_wait_moments)
    assert text.startswith(f"taken at {MOMENTS} moments") and "2 processes 800 us (moments 400, 800, 2400" in text
    _, once = fit_measured(local(4), pooled([m for ms in by_moment for m in ms] + others), cases)
    assert once.blocking_wait_us[2] == pytest.approx(1200.0, rel=1e-6) and not once.wait_moments


def test_moments_text_per_process_count():
    assert moments_text({3: Moments((1.0, 2.0, 3.0)), 2: Moments((5.0,))}) == (
        "2 processes 5 us (moments 5; min..max 5..5), 3 processes 2 us (moments 1, 2, 3; min..max 1..3)")
    assert moments_source_text(None, None) == "" and moments_source_text({}, {}) == ""
