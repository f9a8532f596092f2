"""``benchmarks/bench_des_arrays.py``'s helpers: the cost fit recovers a hand-made linear cost, and the pairs per
resource of a tree step's routes are counted by hand."""

import numpy as np
import pytest
from benchmark_modules import load_benchmark

arrays = load_benchmark("bench_des_arrays")


def test_fit_recovers_fixed_and_per_flow_costs():
    """Settles costing exactly 0.8 ms + 0.9 µs per flow + 0.1 µs per pair (flows and pairs not proportional): the
    fit gives those three back."""
    flows = np.array([10, 500, 900, 1200, 40, 3000])
    pairs = np.array([4000, 4100, 9000, 2000, 700, 12000])
    seconds = 0.8e-3 + 0.9e-6 * flows + 0.1e-6 * pairs
    assert arrays.fit_costs(flows, pairs, seconds) == pytest.approx((0.8e-3, 0.9e-6, 0.1e-6), rel=1e-9)


def test_pairs_per_resource_hand_counted():
    """Four flows of a tree step, (0, 1), (1, 2), (2, 3), (4,): 7 pairs over resources 0–4, 5 distinct."""
    assert arrays.pairs_per_resource([(0, 1), (1, 2), (2, 3), (4,)]) == (7, 5)
