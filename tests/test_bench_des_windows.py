"""``benchmarks/bench_des_windows.py``: windows cut at the pipeline sends, and the flows left to play where windows
repeat (hand-worked)."""

from benchmark_modules import load_benchmark

windows = load_benchmark("bench_des_windows")


def test_windows_start_at_sends_with_replicas():
    """dp 4: a window starts at each launch of 3 flows with a latency; a 3-flow launch with none (a tree step of 3
    flows) and the launches before the first send stay out / inside."""
    launches = [(0.5, 9, 1.0, 0.0), (1.0, 3, 8.0, 5e-6), (1.25, 3, 2.0, 0.0), (1.5, 6, 2.0, 0.0),
                (3.0, 3, 8.0, 5e-6), (3.5, 6, 2.0, 0.0)]
    assert windows.windows_of(launches, 4) == [[(0.0, 3, 8.0), (0.25, 3, 2.0), (0.5, 6, 2.0)],
                                               [(0.0, 3, 8.0), (0.5, 6, 2.0)]]


def test_own_flows_count_after_the_longest_shared_prefix():
    """Window 2 repeats window 1 whole; window 3 shares its first two launches with window 1 and then differs in an
    offset's last bit; window 4 shares only its first launch with window 3 (bytes differ next)."""
    w1 = [(0.0, 511, 1e8), (0.0025, 2042, 4e5), (0.0026, 1530, 4e5)]
    w3 = [(0.0, 511, 1e8), (0.0025, 2042, 4e5), (0.0026000000000000003, 1530, 4e5), (0.8, 1022, 3e8)]
    w4 = [(0.0, 511, 1e8), (0.0025, 2042, 5e5)]
    assert windows.own_flows([w1, list(w1), w3, w4]) == [511 + 2042 + 1530, 0, 1530 + 1022, 2042]
