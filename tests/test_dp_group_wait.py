"""benchmarks/dp_group_wait.py (val31): a tp × dp run's dp phase split into the call and the other tp group's wait."""

import pytest

from benchmark_modules import load_benchmark

dp_group_wait = load_benchmark("dp_group_wait")


def _results(pre_ms: list[list[float]], dp_ms: list[list[float]], placement: str = "tp-pp-dp") -> dict:
    """4 ranks, one warm-up step (ignored, 99 ms everywhere); ``pre_ms[step][rank]`` is the forward (backward and tp
    0), ``dp_ms[step][rank]`` the dp phase."""
    steps = len(pre_ms)
    ranks = [{"step_time_s": [0.1] * (steps + 1),
              "phases_s": {"forward": [0.099] + [p[k] * 1e-3 for p in pre_ms],
                           "backward": [0.0] * (steps + 1), "tp": [0.0] * (steps + 1),
                           "dp": [0.099] + [d[k] * 1e-3 for d in dp_ms]}} for k in range(4)]
    return {"plan": {"strategy": {"tp": 2, "dp": 2, "placement": placement}}, "run": {"warmup": 1}, "ranks": ranks,
            "summary": {"step_time_s": {"median_s": 0.1}}}


def test_the_early_groups_wait_and_the_late_groups_call():
    """Groups {0, 1} and {2, 3} (tp fastest). Step 1: group A's slower rank 30 ms, B's 40 → |ΔT| 10; step 2: 50 and
    45 → 5; mean 7.5 ms, half of it 3.75 % of the 100 ms step. dp: the late group's ranks 2 ms (the call), the early
    group's 12 / 7 ms: max median 9.5, min median 2."""
    r = dp_group_wait.dp_wait(_results([[30, 28, 40, 39], [50, 47, 45, 44]], [[12, 12, 2, 2], [2, 2, 7, 7]]))
    assert r["skew"] == pytest.approx(7.5e-3)
    assert r["half"] == pytest.approx(0.0375)
    assert r["dp_max"] == pytest.approx(9.5e-3) and r["dp_own"] == pytest.approx(2e-3)


def test_groups_by_placement():
    assert dp_group_wait.groups({"strategy": {"tp": 2, "dp": 2, "placement": "tp-pp-dp"}}) == [[0, 1], [2, 3]]
    assert dp_group_wait.groups({"strategy": {"tp": 2, "dp": 2, "placement": "pp-tp-dp"}}) == [[0, 1], [2, 3]]
    assert dp_group_wait.groups({"strategy": {"tp": 2, "dp": 2, "placement": "dp-pp-tp"}}) == [[0, 2], [1, 3]]
    assert dp_group_wait.groups({"strategy": {"tp": 2, "dp": 3, "placement": "pp-dp-tp"}}) == [[0, 3], [1, 4], [2, 5]]
