"""The well-posed network calibration: cores' time-sharing in the loopback estimate, the measurement design that
separates per-call from per-hop latency, trimmed means, bootstrap spreads, and a recorded real calibration.

Hand-worked numbers follow Thakur, Rabenseifner & Gropp 2005 (ring all-reduce: 2(p−1) steps of n/p bytes, each
rank reducing (p−1)·n/p bytes at 3 bytes of memory traffic per reduced byte), times ``share = p / cores``
(simulator/collectives/cost.py, "Time-sharing").
"""

from __future__ import annotations

import statistics

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executor.calibrate import TARGET, design_matrix, executed_time, fit_cluster, on_node, with_values
from executor.calibrate_run import HOP_SERIES, series_for
from executor.calibrate_spread import parameter_spread
from executor.collective_bench import BenchCase, Measurement, trimmed_mean
from simulator.cluster.hardware import HostSpec
from simulator.cluster.io import load_cluster
from simulator.cluster.spec import (Cluster, CommLibrary, CommProfile, Device, Dtype, Fabric, Link, LinkKind,
                                    NodeSpec)
from simulator.collectives import registry
from simulator.collectives.base import Op
from simulator.collectives.cost import Env

RECORDED = Path(__file__).parent / "data" / "calibration_2026-11-25.json"
TRUE = (60.0, 400.0, 1 / 1.2, 1 / 9.7)  # call µs, hop µs, 1/(GB/s), 1/(GB/s of the reduction: kept)
SIZES = [4096 * 4 ** k for k in range(6)]  # 4 KiB .. 4 MiB
NPROCS = (2, 3, 4)


def local(p: int = 4, cores: int | None = 2, call_us: float = 100.0, hop_us: float = 50.0, bw: float = 2.5,
          hbm: float = 9.7) -> Cluster:
    """A localhost-like node of ``p`` processes on ``cores`` cores (None: cores not stated)."""
    host = HostSpec(cpu_memory_bytes=8 * 10**9, h2d_bw_GBps=5.0, h2d_latency_us=10.0, cpu_cores=cores)
    return Cluster(name="test-loopback", nodes=1, network=None,
                   device=Device(name="cpu", peak_tflops={Dtype.FP32: 0.1}, memory_bytes=8 * 10**9, hbm_bw_GBps=hbm),
                   node=NodeSpec(gpus_per_node=p, fabric=Fabric.SWITCHED, host=host,
                                 intra_link=Link(kind=LinkKind.LOOPBACK, bw_GBps=bw, latency_us=hop_us)),
                   comm=CommProfile(library=CommLibrary.GLOO, call_latency_us=call_us))


def ring_all_reduce_s(p: int, n: int, share: float, call_us=100.0, hop_us=50.0, bw=2.5, hbm=9.7) -> float:
    steps = 2 * (p - 1)
    return share * (call_us * 1e-6 + steps * hop_us * 1e-6 + steps * (n / p) / (bw * 1e9)
                    + 3 * (p - 1) * (n / p) / (hbm * 1e9))


@pytest.mark.parametrize("p, cores, share", [(2, 2, 1.0), (3, 2, 1.5), (4, 2, 2.0), (8, 2, 4.0), (4, None, 1.0),
                                             (4, 8, 1.0)])
def test_ring_all_reduce_on_shared_cores_matches_the_hand_worked_sum(p, cores, share):
    n = 1 << 20  # p = 4, 2 cores: 2 × (100 + 6·50 µs + 6 · 262144 B / 2.5 GB/s + 3 · 786432 B / 9.7 GB/s) = 2544.7 µs
    got = registry.estimate(local(p, cores), list(range(p)), Op.ALL_REDUCE, n, "ring").time_s
    assert got == pytest.approx(ring_all_reduce_s(p, n, share), rel=1e-12)
    if (p, cores) == (4, 2):
        assert got == pytest.approx(2544.7e-6, abs=0.1e-6)


def test_time_sharing_only_on_loopback_without_a_protocol():
    assert Env(local(4, 2), None).time_share == 2.0
    gpu = load_cluster("dgx-a100")
    assert Env(gpu, None).time_share == 1.0  # NVLink: the copy engines, not the host's cores, move the bytes
    assert Env(gpu, gpu.comm.protocols[0]).time_share == 1.0


def test_both_engines_charge_the_share():
    """The DES replays the schedule with the same Env: on a quiet network the two agree exactly."""
    import simpy

    from simulator.collectives.replay import schedule_time_s
    from simulator.engine.collective import run_schedule
    from simulator.engine.network import FlowNetwork

    cluster = local(4, 2)
    schedule = registry.build_schedule(cluster, [0, 1, 2, 3], Op.ALL_REDUCE, 1 << 20, "ring")
    env = simpy.Environment()
    proc = run_schedule(env, FlowNetwork(env), cluster, schedule)
    env.run()
    assert proc.value == pytest.approx(schedule_time_s(cluster, schedule), rel=1e-9)
    assert proc.value == pytest.approx(ring_all_reduce_s(4, 1 << 20, 2.0), rel=1e-9)


def test_trimmed_mean_hand_worked():
    assert trimmed_mean(range(1, 11)) == pytest.approx(5.5)  # 10 % of 10 calls: drop 1 and 10
    assert trimmed_mean([1.0] * 9 + [100.0]) == pytest.approx(1.0)  # one call held by other work
    assert trimmed_mean([3.0]) == 3.0
    m = Measurement.from_times(Op.ALL_REDUCE, "ring", 2, 4096, [0.3, 0.3, 0.3, 0.3, 0.3, 4.3, 4.3, 4.3, 4.3, 4.3])
    assert m.trimmed_mean_s == pytest.approx(2.3) and m.median_s == pytest.approx(2.3)


def _cases(cluster: Cluster, series=None) -> list[BenchCase]:
    series = series or series_for(Op.ALL_REDUCE, ["ring"])
    out = []
    for p in NPROCS:
        at = on_node(cluster, p)
        for op, algorithm in series:
            out += [BenchCase(algorithm=algorithm, nbytes=n,
                              schedule=registry.build_schedule(at, list(range(p)), op, n, algorithm)) for n in SIZES]
    return out


def synthetic(cases, noise: float = 0.0, calls: int = 1, true=TRUE) -> list[Measurement]:
    """Each case timed on the true cluster; ``calls`` times per point with deterministic ±``noise``."""
    truth, timed = with_values(local(4), true), executed_time(cases)
    out = []
    for i, case in enumerate(cases):
        s = case.schedule
        t = timed(on_node(truth, len(s.ranks)), list(range(len(s.ranks))), s.op, s.nbytes, s.algorithm).time_s
        times = [t * (1 + noise * math.sin(7.3 * i + 1.9 * k)) for k in range(calls)]
        out.append(Measurement.from_times(s.op, s.algorithm, len(s.ranks), s.nbytes, times))
    return out


def test_the_hop_series_makes_call_and_hop_latency_separable():
    """Ring all-reduce alone: 2(p−1) hops and one call at every size, so their columns are proportional (rank 1)
    and the fit may trade one for the other; with the ring all-gather (p−1 hops, one call) they separate."""
    cluster = local(4)
    ring_only = _cases(cluster, [(Op.ALL_REDUCE, "ring")])
    ring_only = [c for c in ring_only if len(c.schedule.ranks) == 4]
    A, _ = design_matrix(cluster, synthetic(ring_only), executed_time(ring_only))
    assert np.linalg.matrix_rank(A[:, :2], tol=1e-12) == 1
    with_hops = _cases(cluster)
    A, _ = design_matrix(cluster, synthetic(with_hops), executed_time(with_hops))
    assert np.linalg.matrix_rank(A[:, :3], tol=1e-12) == 3
    assert HOP_SERIES in series_for(Op.ALL_REDUCE, ["ring"]) and len(series_for(Op.ALL_GATHER, ["ring"])) == 1


def test_exact_measurements_at_several_process_counts_recover_the_parameters():
    cases = _cases(local(4))
    fitted, fit = fit_cluster(local(4), synthetic(cases), estimate=executed_time(cases))
    assert fit.call_latency_us == pytest.approx(TRUE[0], rel=1e-6)
    assert fit.latency_us == pytest.approx(TRUE[1], rel=1e-6)
    assert fit.bw_GBps == pytest.approx(1 / TRUE[2], rel=1e-6)
    assert fit.median_abs_error_pct < 1e-6
    assert {r.ranks for r in fit.rows} == set(NPROCS) and fitted.node.intra_link.efficiency == 1.0


def test_noisy_calls_land_near_the_truth_and_the_spread_brackets_it():
    cases = _cases(local(4))
    measurements = synthetic(cases, noise=0.1, calls=20)
    estimate = executed_time(cases)
    fitted, fit = fit_cluster(local(4), measurements, estimate=estimate)
    assert fit.latency_us == pytest.approx(TRUE[1], rel=0.1)
    assert fit.bw_GBps == pytest.approx(1 / TRUE[2], rel=0.1)
    assert fit.median_abs_error_pct < 5.0
    # fitted to the plain means (TARGET), so resampled to the plain means
    spread = parameter_spread(fitted, measurements, fit.fitted, estimate, statistic=statistics.fmean, resamples=30)
    assert set(spread) == {"call_latency_us", "latency_us", "bw_GBps"}
    lo, hi = spread["latency_us"]
    assert lo <= fit.latency_us * 1.02 and hi >= fit.latency_us * 0.98 and hi - lo < 0.2 * TRUE[1]
    assert spread == parameter_spread(fitted, measurements, fit.fitted, estimate, statistic=statistics.fmean,
                                      resamples=30)  # seeded


def test_recorded_calibration_refits_to_its_recorded_parameters():
    """A real calibration (2-core VM, 2026-11-25, `trainplan calibrate`'s design; docs/calibration.md): the fit
    of its calls is deterministic and gives the parameters recorded beside them."""
    data = json.loads(RECORDED.read_text())
    cluster = replace(load_cluster("localhost-cpu"), node=replace(load_cluster("localhost-cpu").node,
                                                                  gpus_per_node=max(data["nprocs"])))
    measurements, cases = [], []
    for m in data["measurements"]:
        op, ranks = Op(m["op"]), list(range(m["ranks"]))
        at = on_node(cluster, m["ranks"])
        cases.append(BenchCase(algorithm=m["algorithm"], nbytes=m["bytes"],
                               schedule=registry.build_schedule(at, ranks, op, m["bytes"], m["algorithm"])))
        measurements.append(Measurement.from_times(op, m["algorithm"], m["ranks"], m["bytes"], m["times_s"]))
    # recorded when the fit targeted each point's trimmed mean: fitted to that statistic here
    measurements = [replace(m, **{TARGET: m.trimmed_mean_s}) for m in measurements]
    _, fit = fit_cluster(cluster, measurements, estimate=executed_time(cases))
    expected = data["fit"]
    assert fit.call_latency_us == pytest.approx(expected["call_latency_us"], rel=1e-6, abs=1e-6)
    assert fit.latency_us == pytest.approx(expected["latency_us"], rel=1e-6)
    assert fit.bw_GBps == pytest.approx(expected["bw_GBps"], rel=1e-6)
    assert fit.median_abs_error_pct == pytest.approx(expected["median_abs_error_pct"], rel=1e-6)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call_us=st.floats(0.0, 2000.0), hop_us=st.floats(10.0, 3000.0), bw=st.floats(0.1, 5.0))
def test_any_true_parameters_are_recovered_from_exact_times(call_us, hop_us, bw):
    """Property: whatever the machine's call latency, hop latency and bandwidth, exact times of the default design
    (both rings at 2, 3 and 4 processes on 2 cores, 4 KiB .. 4 MiB) give them back."""
    cases = _cases(local(4))
    measurements = synthetic(cases, true=(call_us, hop_us, 1 / bw, 1 / 9.7))
    _, fit = fit_cluster(local(4), measurements, estimate=executed_time(cases))
    assert fit.call_latency_us == pytest.approx(call_us, rel=1e-5, abs=1e-3)
    assert fit.latency_us == pytest.approx(hop_us, rel=1e-5)
    assert fit.bw_GBps == pytest.approx(bw, rel=1e-5)
