"""``benchmarks/bench_des_plays.py``: the components of a step (hand-worked) and its kinds (equal up to a renaming of
the resources, unequal when a capacity, a route's shape, bytes or a latency differ)."""

from types import SimpleNamespace

from benchmark_modules import load_benchmark

plays = load_benchmark("bench_des_plays")


def test_components_hand_worked():
    """Routes 0: (a, b), 1: (c,), 2: (b, d), 3: (d, e), 4: (f,): 0, 2, 3 are joined through b and d (3 only through
    2); 1 and 4 stand alone. Groups in index order, by their first index."""
    a, b, c, d, e, f = range(6)
    assert plays.components([(a, b), (c,), (b, d), (d, e), (f,)]) == [[0, 2, 3], [1], [4]]


def test_kinds_equal_up_to_renaming_only():
    """Two copies of a two-flow chain on other resources are one kind; a copy with another capacity, another route
    shape (the second flow's resources swapped), other bytes or another latency is not."""
    main = SimpleNamespace(_cap=[10.0, 20.0, 30.0, 10.0, 20.0, 30.0, 10.0, 99.0, 30.0])
    path = SimpleNamespace(latency_s=1e-6)
    step = [(path, 5.0, None)] * 2
    kind = plays.kind

    def of(routes, nbytes=5.0, latency=None):
        return kind(main, [(path, nbytes, latency)] * 2, routes, [0, 1])

    base = kind(main, step, [(0, 1), (1, 2)], [0, 1])
    assert of([(3, 4), (4, 5)]) == base
    assert of([(6, 7), (7, 8)]) != base  # capacity 99 where 20 was
    assert of([(3, 4), (5, 4)]) != base  # the second flow crosses its resources the other way round
    assert of([(3, 4), (4, 5)], nbytes=6.0) != base
    assert of([(3, 4), (4, 5)], latency=2e-6) != base
