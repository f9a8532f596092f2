"""``trainplan calibrate``'s default design times gloo's NATIVE all-reduce and all-gather, and fits each native
point with the schedule of the algorithm gloo runs (ring for both [src: gloo-native-algorithms]); replayed
algorithms (``--algorithms ring,tree``) still work."""

from __future__ import annotations

import numpy as np
import pytest

from executor.calibrate import design_matrix, executed_time, fit_cluster, on_node, with_values
from executor.calibrate_run import (DEFAULT_ALGORITHMS, HOP_SERIES, NATIVE, NATIVE_HOP_SERIES, _cases, native_bytes,
                                    native_model, series_for)
from executor.collective_bench import BenchCase, Measurement, measure_cases
from simulator.collectives import registry
from simulator.collectives.base import Op
from simulator.errors import SpecError
from test_calibrate_design import TRUE, local

SIZES = [4096 * 4 ** k for k in range(6)]  # 4 KiB .. 4 MiB
NPROCS = (2, 3, 4)


def native_cases(cluster, series=None) -> list[BenchCase]:
    series = series or series_for(Op.ALL_REDUCE, DEFAULT_ALGORITHMS)
    return [c for p in NPROCS for c in _cases(on_node(cluster, p), series, p, SIZES)]


def synthetic(cases, true=TRUE) -> list[Measurement]:
    """Each case timed exactly on the true cluster by its model (gloo's algorithm's schedule)."""
    return exact_on(cases, with_values(local(4), true))


def exact_on(cases, truth) -> list[Measurement]:
    """Each case timed exactly on the cluster ``truth`` by the schedule it runs."""
    timed = executed_time(cases)
    out = []
    for case in cases:
        s = case.timed_schedule
        p = len(s.ranks)
        t = timed(on_node(truth, p), list(range(p)), s.op, case.nbytes, case.algorithm).time_s
        out.append(Measurement.from_times(s.op, case.algorithm, p, case.nbytes, [t]))
    return out


def test_default_design_is_native_all_reduce_and_all_gather():
    assert series_for(Op.ALL_REDUCE, DEFAULT_ALGORITHMS) == [(Op.ALL_REDUCE, NATIVE), NATIVE_HOP_SERIES]
    assert NATIVE_HOP_SERIES == (Op.ALL_GATHER, NATIVE)
    assert series_for(Op.ALL_REDUCE, ["ring", "tree"]) == [(Op.ALL_REDUCE, "ring"), (Op.ALL_REDUCE, "tree"),
                                                           HOP_SERIES]


def test_native_cases_are_called_natively_and_modelled_by_gloos_ring():
    cases = native_cases(local(4))
    assert all(c.schedule is None and c.algorithm == NATIVE for c in cases)  # timed as dist.* calls, not replays
    assert {c.op for c in cases} == {Op.ALL_REDUCE, Op.ALL_GATHER}
    assert {c.model.algorithm for c in cases} == {"ring"}
    for c in cases:
        assert c.model.op is c.op and c.model.nbytes == c.nbytes


def test_native_all_gather_sizes_split_evenly():
    assert native_bytes(Op.ALL_GATHER, 4096, 3) == 4092  # 1024 floats do not split over 3 ranks: 1023 do
    assert native_bytes(Op.ALL_GATHER, 4096, 4) == 4096
    assert native_bytes(Op.ALL_REDUCE, 4096, 3) == 4096
    three = [c for c in native_cases(local(4)) if len(c.model.ranks) == 3 and c.op is Op.ALL_GATHER]
    assert all(c.nbytes % 12 == 0 for c in three)


def test_a_native_point_has_the_coefficients_of_the_ring_replay():
    cluster = local(4)
    native = [c for c in native_cases(cluster) if c.op is Op.ALL_REDUCE]
    ring = [c for p in NPROCS for c in _cases(on_node(cluster, p), [(Op.ALL_REDUCE, "ring")], p, SIZES)]
    A_native, t_native = design_matrix(cluster, synthetic(native), executed_time(native))
    A_ring, t_ring = design_matrix(cluster, synthetic(ring), executed_time(ring))
    np.testing.assert_allclose(A_native, A_ring, rtol=1e-12)
    np.testing.assert_allclose(t_native, t_ring, rtol=1e-12)


def test_native_design_separates_call_hop_and_bandwidth():
    """Native all-reduce alone: 2(p−1) hops and one call at every size (rank 1 in call and hop); with the native
    all-gather (p−1 hops) the three columns are independent."""
    cluster = local(4)
    alone = [c for c in native_cases(cluster, [(Op.ALL_REDUCE, NATIVE)]) if len(c.model.ranks) == 4]
    A, _ = design_matrix(cluster, synthetic(alone), executed_time(alone))
    assert np.linalg.matrix_rank(A[:, :2], tol=1e-12) == 1
    cases = native_cases(cluster)
    A, _ = design_matrix(cluster, synthetic(cases), executed_time(cases))
    assert np.linalg.matrix_rank(A[:, :3], tol=1e-12) == 3


@pytest.mark.parametrize("true", [TRUE, (250.0, 90.0, 1 / 0.6, 1 / 9.7), (0.0, 700.0, 1 / 3.0, 1 / 9.7)])
def test_fit_recovers_known_parameters_from_synthetic_native_measurements(true):
    cases = native_cases(local(4))
    fitted, fit = fit_cluster(local(4), synthetic(cases, true), estimate=executed_time(cases))
    assert fit.call_latency_us == pytest.approx(true[0], rel=1e-5, abs=1e-3)
    assert fit.latency_us == pytest.approx(true[1], rel=1e-5)
    assert fit.bw_GBps == pytest.approx(1 / true[2], rel=1e-5)
    assert {(r.op, r.algorithm) for r in fit.rows} == {("all-reduce", NATIVE), ("all-gather", NATIVE)}


def test_native_fit_matches_the_registry_auto_estimate():
    """After the fit, a native point's fitted estimate is ``registry.estimate(..., "auto")`` on the fitted
    cluster: on gloo ``auto`` is the ring the model timed (to 1e-4: the closed form splits the bytes evenly, the
    schedule in whole float32 elements, e.g. 5e-6 apart at 4 MiB on 3 ranks)."""
    cases = native_cases(local(4))
    fitted, fit = fit_cluster(local(4), synthetic(cases), estimate=executed_time(cases))
    for row in fit.rows:
        auto = registry.estimate(on_node(fitted, row.ranks), list(range(row.ranks)), Op(row.op), row.nbytes, "auto")
        assert auto.algorithm == "ring" and auto.time_s == pytest.approx(row.estimate_s, rel=1e-4)


def test_ops_without_an_established_native_algorithm_are_refused():
    with pytest.raises(SpecError, match="algorithms"):
        native_model(Op.REDUCE_SCATTER)
    with pytest.raises(SpecError, match="algorithms"):
        _cases(local(2), [(Op.REDUCE, NATIVE)], 2, [4096])


@pytest.mark.multiproc
def test_native_all_reduce_and_all_gather_are_timed_in_one_launch():
    cases = _cases(local(3), series_for(Op.ALL_REDUCE, DEFAULT_ALGORITHMS), 3, [4096])
    results = measure_cases(Op.ALL_REDUCE, cases, 3, repeats=2, warmup=1)
    assert [(m.op, m.algorithm, m.nbytes, m.ranks) for m in results] == [
        (Op.ALL_REDUCE, NATIVE, 4096, 3), (Op.ALL_GATHER, NATIVE, 4092, 3)]
    assert all(t > 0 for m in results for t in m.times_s)
