"""``executor.step_budget``: the step count of a time-budgeted run (hand-worked numbers and invariants)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from executor.step_budget import DEFAULT_MAX_STEPS, decision_step, total_steps, warm_step_s


def test_hand_worked_counts():
    # 1 s over a 5 ms warm-up step: 200 measured steps + 4 warm-up
    assert total_steps(steps=24, warmup=4, measure_s=1.0, warm_step_s=0.005) == 204
    # a 160 ms step: 1 s is 7 steps, fewer than --steps, so --steps stands
    assert total_steps(steps=24, warmup=4, measure_s=1.0, warm_step_s=0.160) == 24
    # a 1 ms step would want 1004: capped
    assert total_steps(steps=24, warmup=4, measure_s=1.0, warm_step_s=0.001) == DEFAULT_MAX_STEPS
    assert total_steps(steps=24, warmup=4, measure_s=None, warm_step_s=0.001) == 24


def test_the_warm_up_time_leaves_out_the_first_step_and_one_stalled_step():
    # the suite's 4 warm-up steps: first-call costs in the first, a 40 ms stall in the last: the median of 2nd..4th
    assert warm_step_s([0.030, 0.006, 0.005, 0.040]) == 0.006
    assert warm_step_s([0.030]) == 0.030


def test_the_count_is_decided_after_the_last_warm_up_step():
    assert decision_step(4) == 3 and decision_step(1) == 0 and decision_step(0) == 0


@given(steps=st.integers(1, 50), warmup=st.integers(0, 10), budget=st.floats(1e-3, 10.0),
       step_s=st.floats(1e-4, 1.0), cap=st.integers(1, 500))
def test_the_count_is_at_least_steps_and_at_most_the_cap(steps, warmup, budget, step_s, cap):
    n = total_steps(steps=steps, warmup=warmup, measure_s=budget, warm_step_s=step_s, max_steps=max(cap, steps))
    assert steps <= n <= max(cap, steps)
    if n < max(cap, steps) and n > steps:  # neither bound binds: the measured steps fill the budget
        assert (n - warmup) * step_s >= budget * (1 - 1e-9)
