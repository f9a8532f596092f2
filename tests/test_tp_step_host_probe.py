"""benchmarks/tp_step_host_probe.py's arithmetic: per-module differences per statistic, the mean over ranks."""

import pytest

from tests.benchmark_modules import load_benchmark


def test_per_module_us_hand_worked():
    """10 modules. Rank 0: tp forward per micro-batch 1, 4, 4, 4, 7 ms (p10 1, median 4, mean 4), plain 1 ms flat;
    rank 1: tp 3, 6, 6, 6, 9 ms (p10 3, median 6, mean 6), plain 1 ms. Means over ranks: p10 (2 − 1) / 10 = 100 µs,
    median (5 − 1) / 10 = 400 µs, mean 400 µs; a plain list of the other loop is not read."""
    probe = load_benchmark("tp_step_host_probe")

    def rank(tp_ms):
        return {"step_tp_fwd": [ms * 1e-3 for ms in tp_ms], "step_plain_fwd": [1e-3] * 5,
                "calib_plain_fwd": [9.0] * 5}
    out = probe.per_module_us([rank([1, 4, 4, 4, 7]), rank([3, 6, 6, 6, 9])], "step", "fwd", 10)
    assert out == pytest.approx({"p10": 100.0, "median": 400.0, "mean": 400.0})
