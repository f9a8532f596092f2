"""benchmarks/summary_batch_probe.py's ``exposure_rows`` (cold22): one bucket tuple's exposure asked once over a vector
of last backwards answers each backward as :meth:`simulator.analytical_sync.Exposure.at` does, to the bit (one category
or several, empty tuples, infinite seconds and backwards, tuples long enough for numpy's pairwise sums)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from benchmark_modules import load_benchmark
from simulator.analytical_sync import Exposure

load_benchmark("bench_analytical")  # the probe imports it by name
exposure_rows = load_benchmark("summary_batch_probe").exposure_rows


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf − inf in both: NaN either way
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.floats(0.0, 3.0), st.sampled_from([0.0, np.inf])), st.floats(0.0, 1.0),
                          st.integers(0, 3)), max_size=300),
       st.lists(st.one_of(st.floats(0.0, 60.0), st.sampled_from([0.0, np.inf, np.nan])), min_size=1, max_size=6))
def test_exposure_rows_equal_one_ask_per_backward(items, backwards):
    d = np.array([x[0] for x in items], dtype=float)
    f = np.sort(np.array([x[1] for x in items], dtype=float))
    k = np.array([x[2] for x in items], dtype=int)
    exposure = Exposure(d, f, k)
    tails, kinds = exposure_rows(exposure, backwards)
    for j, b_last in enumerate(backwards):
        tail, want = exposure.at(b_last)
        assert np.float64(tail).tobytes() == tails[j].tobytes()
        assert want.tobytes() == kinds[j].tobytes()
