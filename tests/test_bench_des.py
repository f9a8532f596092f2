"""``benchmarks/bench_des.py``: ``--dp-algorithm`` reaches the strategy's ``dp_sync.algorithm`` and changes the
workload (256 GPUs = 32 nodes, dp 4: a ring all-reduce and NCCL's double binary tree route different flows), and the
fits of the exponents against GPUs and against flows on hand-worked rows."""

import pytest
from benchmark_modules import load_benchmark

from simulator.strategy import AllReduceAlgorithm

bench = load_benchmark("bench_des")


def test_algorithm_reaches_the_strategy():
    for name in bench.ALGORITHMS:
        _, _, strategy = bench.step_case(256, name)
        assert strategy.dp_sync.algorithm is AllReduceAlgorithm(name)
    assert bench.step_case(256)[2] == bench.step_case(256, "auto")[2]  # the default is today's strategy


def test_ring_and_tree_differ_in_flows():
    ring, tree = (bench.measure(256, exact=False, algorithm=a) for a in ("ring", "tree"))
    assert ring["algorithm"] == "ring" and tree["algorithm"] == "tree"
    assert ring["flows"] != tree["flows"]
    assert ring["cpu_per_flow_us"] == pytest.approx(ring["cpu_s"] / ring["flows"] * 1e6)


def test_exponents_hand_worked():
    """CPU ∝ gpus² with flows ∝ gpus⁴: slope 2 against GPUs, 0.5 against flows; the 256-GPU row is left out."""
    rows = [{"gpus": g, "flows": g ** 4, "cpu_s": g ** 2 * 1e-6} for g in (256, 1024, 2048, 4096)]
    rows[0]["cpu_s"] = 1e3  # below FIT_FROM_GPUS: would spoil both slopes if it counted
    assert bench.fitted_exponent(rows) == pytest.approx(2.0)
    assert bench.fitted_exponent(rows, "flows") == pytest.approx(0.5)
