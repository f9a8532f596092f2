"""The calibration's one rule for additive terms (executor.compute_bench.Timing.paid_s, mean22): every take that a
step pays as a sum reads the **mean** of its samples. Hand-worked on right-skewed samples whose mean, median and 10th
percentile all differ, so each test fails if a median or a 10th percentile comes back."""

from __future__ import annotations

import pytest

from executor.compute_bench import Timing, mean_over_ranks, timing_of

SKEWED_S = [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 10.0]
"""Mean 2.4, median 1.5, p10 1.0 (nearest rank), p90 3.0."""


def test_timing_of_keeps_the_mean_and_paid_s_reads_it():
    t = timing_of(SKEWED_S)
    assert (t.mean_s, t.median_s, t.p10_s, t.p90_s) == pytest.approx((2.4, 1.5, 1.0, 3.0))
    assert t.paid_s == pytest.approx(2.4)


def test_mean_over_ranks_averages_each_statistic():
    a, b = timing_of(SKEWED_S), timing_of([2.0] * 10)
    m = mean_over_ranks([a, b])
    assert (m.mean_s, m.median_s, m.p10_s, m.p90_s) == pytest.approx((2.2, 1.75, 1.5, 2.5))
    assert m.paid_s == pytest.approx(2.2)


def test_pipeline_terms_sum_the_ranks_means_over_their_actions():
    """Two ranks: 2.4 s and 2.0 s mean per step over 19 + 19 actions → 4.4 / 38 s = 115,789.47 µs per action
    (the medians 1.5 + 2.0 would give 92,105.26)."""
    from executor.pipeline_host_bench import per_count_us

    ranks = (timing_of(SKEWED_S), timing_of([2.0] * 10))
    assert per_count_us(ranks, (19, 19)) == pytest.approx(4.4 / 38 * 1e6)


def test_fsdp2_optimizer_surcharge_reads_the_mean_cpu_seconds():
    """Plain steps: a flat 1 ms; FSDP2 steps: SKEWED_S in ms (mean 2.4 ms, median 1.5) over 10 · 28 = 280 calls:
    (2.4 − 1) ms / 280 = 5 µs per call; the medians would give 1.79 µs."""
    from executor.fsdp2_host_bench import optimizer_timing

    t = optimizer_timing({"plain": [1e-3] * 10, "fsdp2": [s * 1e-3 for s in SKEWED_S]}, 28, 280)
    assert (t.plain_cpu_s, t.fsdp2_cpu_s) == pytest.approx((1e-3, 2.4e-3))
    assert t.dtensor_call_us == pytest.approx(5.0)


def test_a_timing_needs_its_mean():
    """No default: a take that builds a Timing by hand must say what the mean is."""
    with pytest.raises(TypeError):
        Timing(median_s=1.0, p10_s=1.0, p90_s=1.0)  # type: ignore[call-arg]
