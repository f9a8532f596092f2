"""Collective bench: percentiles, timing every native op and a replay on 2 gloo ranks (tiny sizes)."""

from __future__ import annotations

import pytest

from executor import launch
from executor.collective_bench import NATIVE, BenchCase, Measurement, measure_cases
from simulator.collectives.base import Op
from simulator.errors import SpecError
from test_executor_p2p import ring_all_reduce


def test_percentiles_follow_linear_interpolation():
    # Hand-worked: sorted 1..11 → median 6, p10 at position 1.0 → 2, p90 at position 9.0 → 10.
    m = Measurement.from_times(Op.ALL_REDUCE, "ring", 2, 64, [11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert (m.median_s, m.p10_s, m.p90_s) == (6, 2, 10)
    # Four values: p10 at position 0.3 → 1 + 0.3·(2 − 1) = 1.3; p90 at 2.7 → 3 + 0.7·(10 − 3) = 7.9.
    m = Measurement.from_times(Op.ALL_REDUCE, "ring", 2, 64, [10, 1, 3, 2])
    assert m.p10_s == pytest.approx(1.3) and m.p90_s == pytest.approx(7.9) and m.median_s == 2.5


def test_measurement_needs_a_time():
    with pytest.raises(SpecError):
        Measurement.from_times(Op.ALL_REDUCE, "ring", 2, 64, [])


def test_measurement_is_frozen():
    m = Measurement.from_times(Op.ALL_REDUCE, "ring", 2, 64, [1.0])
    with pytest.raises(AttributeError):
        m.median_s = 2.0


@pytest.mark.multiproc
def test_native_ops_and_a_replay_are_timed_on_two_ranks():
    cases = [BenchCase(algorithm=NATIVE, nbytes=1024), BenchCase(algorithm="ring", nbytes=1024,
                                                                  schedule=ring_all_reduce(2, 1024))]
    results = measure_cases(Op.ALL_REDUCE, cases, 2, repeats=3, warmup=1)
    assert [(m.algorithm, m.nbytes, m.ranks, len(m.times_s)) for m in results] == [
        (NATIVE, 1024, 2, 3), ("ring", 1024, 2, 3)]
    for m in results:
        assert all(t > 0 for t in m.times_s)
        assert m.p10_s <= m.median_s <= m.p90_s


def _every_native_op(rank, world):
    import torch

    from executor.native_ops import native_call

    done = []
    for op in Op:
        buf = torch.full((64,), float(rank + 1))
        native_call(op, buf, rank, world)()
        done.append((op.value, buf[0].item()))
    return done


@pytest.mark.multiproc
def test_every_native_op_runs_on_gloo():
    results = launch.run(_every_native_op, 2)
    ops = [op for op, _ in results[0]]
    assert ops == [op.value for op in Op]
    # Rank r starts each op from r + 1: all-reduce gives 1 + 2 = 3; broadcast and send-recv give rank 0's 1.
    rank1 = dict(results[1])
    assert rank1["all-reduce"] == 3.0 and rank1["broadcast"] == 1.0 and rank1["send-recv"] == 1.0


def test_bad_repeats_are_rejected_before_launching():
    with pytest.raises(SpecError, match="repeats"):
        measure_cases(Op.ALL_REDUCE, [BenchCase(algorithm=NATIVE, nbytes=64)], 2, repeats=0)
