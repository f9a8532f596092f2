"""``benchmarks/bench_des_windows.py``: windows cut at the pipeline sends, and the flows left to play where windows
repeat (hand-worked)."""

from benchmark_modules import load_benchmark

windows = load_benchmark("bench_des_windows")
L, R = windows.LAUNCH, windows.RATING


def test_windows_start_at_sends_with_replicas():
    """dp 4: a window starts at each launch of 3 flows with a latency; a 3-flow launch with none (a tree step of 3
    flows), a rating of 3 flows and the entries before the first send do not start one."""
    log = [(0.5, L, 9, 1.0, 0.0), (1.0, L, 3, 8.0, 5e-6), (1.25, L, 3, 2.0, 0.0), (1.25, R, 3, "d1", 0.0),
           (1.5, L, 6, 2.0, 0.0), (3.0, L, 3, 8.0, 5e-6), (3.5, L, 6, 2.0, 0.0)]
    assert windows.windows_of(log, 4) == [[(0.0, L, 3, 8.0), (0.25, L, 3, 2.0), (0.25, R, 3, "d1"), (0.5, L, 6, 2.0)],
                                          [(0.0, L, 3, 8.0), (0.5, L, 6, 2.0)]]


def test_own_flows_count_launches_after_the_longest_shared_prefix():
    """Window 2 repeats window 1 whole; window 3 shares its first three entries with window 1, then a launch's offset
    differs in its last bit; window 4 shares its first two launches with window 1 (then its rating's digest differs),
    and re-ratings count no flows."""
    w1 = [(0.0, L, 511, 1e8), (0.0025, L, 2042, 4e5), (0.0025, R, 2553, "a"), (0.0026, L, 1530, 4e5)]
    w3 = [(0.0, L, 511, 1e8), (0.0025, L, 2042, 4e5), (0.0025, R, 2553, "a"), (0.0026000000000000003, L, 1530, 4e5),
          (0.8, L, 1022, 3e8)]
    w4 = [(0.0, L, 511, 1e8), (0.0025, L, 2042, 4e5), (0.0025, R, 2553, "b"), (0.0026, L, 1530, 4e5)]
    assert windows.own_flows([w1, list(w1), w3, w4]) == [511 + 2042 + 1530, 0, 1530 + 1022, 1530]
