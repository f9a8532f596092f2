"""Calibration fit: recover known link parameters from synthetic measurements.

The synthetic times come from an α-β-γ model written here (Thakur, Rabenseifner & Gropp 2005,
ring and binomial-tree all-reduce), so the fit is checked independently of the simulator's
registry; with the registry present, the same recovery is checked through ``registry.estimate``.
Tolerances: exact data → parameters to 1e-6 relative (a linear problem solved exactly);
±4 % deterministic noise → parameters within 15 %, median error under 4 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from executor.calibrate import fit_cluster, with_values
from executor.collective_bench import Measurement
from simulator.cluster.spec import (Cluster, CommLibrary, CommProfile, Device, Dtype, Fabric, Link, LinkKind,
                                    NetworkSpec, NodeSpec)
from simulator.collectives.base import Op
from simulator.errors import SpecError

TRUE = {"call_latency_us": 40.0, "latency_us": 25.0, "bw_GBps": 1.8, "hbm_bw_GBps": 12.0}
SIZES = [2 ** k for k in range(16, 27)]  # 64 KiB .. 64 MiB, as the real calibration


def base_cluster(p: int = 4, nodes: int = 1) -> Cluster:
    """A localhost-like cluster with deliberately wrong parameters (the fit must move away from them)."""
    link = Link(kind=LinkKind.LOOPBACK, bw_GBps=10.0, latency_us=5.0, efficiency=0.8)
    network = NetworkSpec(link=Link(kind=LinkKind.ETHERNET, bw_GBps=1.0, latency_us=50.0)) if nodes > 1 else None
    return Cluster(name="test-local", nodes=nodes, network=network,
                   device=Device(name="cpu", peak_tflops={Dtype.FP32: 0.1}, memory_bytes=8 * 10**9,
                                 hbm_bw_GBps=20.0),
                   node=NodeSpec(gpus_per_node=p, fabric=Fabric.SWITCHED, intra_link=link),
                   comm=CommProfile(library=CommLibrary.GLOO, call_latency_us=1.0))


@dataclass(frozen=True)
class _Est:
    time_s: float


def alpha_beta_gamma(cluster: Cluster, ranks, op, nbytes, algorithm) -> _Est:
    """Ring: 2(p−1) hops, 2(p−1)/p·n sent, (p−1)/p·n reduced; tree: 2⌈log2 p⌉ hops, 2n sent, ⌈log2 p⌉·n reduced.

    Reduction cost 3 bytes of memory traffic per reduced byte (two reads, one write) at hbm_bw.
    """
    p = len(ranks)
    link, call = cluster.node.intra_link, cluster.comm.call_latency_us * 1e-6
    bw, hbm = link.bw_GBps * link.efficiency * 1e9, cluster.device.hbm_bw_GBps * 1e9
    if algorithm == "ring":
        hops, sent, reduced = 2 * (p - 1), 2 * (p - 1) / p * nbytes, (p - 1) / p * nbytes
    else:
        levels = math.ceil(math.log2(p))
        hops, sent, reduced = 2 * levels, 2 * nbytes, levels * nbytes
    return _Est(call + hops * link.latency_s + sent / bw + 3 * reduced / hbm)


def synthetic(p: int, noise: float = 0.0) -> list[Measurement]:
    truth = with_values(base_cluster(p), [TRUE["call_latency_us"], TRUE["latency_us"], 1 / TRUE["bw_GBps"],
                                          1 / TRUE["hbm_bw_GBps"]])
    out = []
    for i, (algorithm, n) in enumerate((a, n) for a in ("ring", "tree") for n in SIZES):
        t = alpha_beta_gamma(truth, list(range(p)), Op.ALL_REDUCE, n, algorithm).time_s
        t *= 1 + noise * math.sin(7.3 * i)  # deterministic "noise" in [−noise, +noise]
        out.append(Measurement.from_times(Op.ALL_REDUCE, algorithm, p, n, [t]))
    return out


def test_exact_data_recovers_all_four_parameters():
    fitted, fit = fit_cluster(base_cluster(), synthetic(4), fit_reduction=True, estimate=alpha_beta_gamma)
    for name, value in TRUE.items():
        assert getattr(fit, name) == pytest.approx(value, rel=1e-6), name
    assert fit.median_abs_error_pct < 1e-6
    assert fit.relinearised <= 2  # exactly linear: the second round only confirms the first
    assert fitted.node.intra_link.bw_GBps == pytest.approx(TRUE["bw_GBps"], rel=1e-6)
    assert fitted.node.intra_link.efficiency == 1.0
    assert fitted.comm.call_latency_us == pytest.approx(TRUE["call_latency_us"], rel=1e-6)


def test_noisy_data_still_lands_near_the_truth():
    _, fit = fit_cluster(base_cluster(), synthetic(4, noise=0.04), fit_reduction=True, estimate=alpha_beta_gamma)
    assert fit.median_abs_error_pct < 4.0
    assert fit.bw_GBps == pytest.approx(TRUE["bw_GBps"], rel=0.15)
    assert fit.hbm_bw_GBps == pytest.approx(TRUE["hbm_bw_GBps"], rel=0.15)


def test_without_fit_reduction_the_memory_bandwidth_is_kept():
    fitted, fit = fit_cluster(base_cluster(), synthetic(2), estimate=alpha_beta_gamma)
    assert fit.fitted == ("call_latency_us", "latency_us", "inv_bw")
    assert fitted.device.hbm_bw_GBps == 20.0
    assert fit.median_abs_error_pct < 10.0  # the γ term is absorbed by the bandwidth


def test_error_rows_report_estimate_against_measured():
    measurements = synthetic(4)
    _, fit = fit_cluster(base_cluster(), measurements, fit_reduction=True, estimate=alpha_beta_gamma)
    assert [(r.algorithm, r.nbytes) for r in fit.rows] == [(m.algorithm, m.nbytes) for m in measurements]
    row = fit.rows[0]
    assert row.error_pct == pytest.approx((row.estimate_s - row.measured_s) / row.measured_s * 100)


def test_multi_node_cluster_is_rejected():
    with pytest.raises(SpecError, match="one-node"):
        fit_cluster(base_cluster(nodes=2), synthetic(4), estimate=alpha_beta_gamma)


def test_no_measurements_is_rejected():
    with pytest.raises(SpecError, match="nothing to fit"):
        fit_cluster(base_cluster(), [], estimate=alpha_beta_gamma)


def test_recovery_through_the_simulator_estimate():
    from simulator.collectives import registry

    truth = with_values(base_cluster(4), [TRUE["call_latency_us"], TRUE["latency_us"], 1 / TRUE["bw_GBps"],
                                          1 / TRUE["hbm_bw_GBps"]])
    measurements = [Measurement.from_times(Op.ALL_REDUCE, a, 4, n, [
        registry.estimate(truth, [0, 1, 2, 3], Op.ALL_REDUCE, n, a).time_s]) for a in ("ring", "tree") for n in SIZES]
    _, fit = fit_cluster(base_cluster(4), measurements, fit_reduction=True)
    assert fit.median_abs_error_pct < 0.1
    assert fit.bw_GBps == pytest.approx(TRUE["bw_GBps"], rel=0.01)


def test_cli_nccl_without_cuda_is_one_line_exit_2(capsys, tmp_path):
    import torch

    from trainplan.__main__ import main

    if torch.cuda.is_available():
        pytest.skip("CUDA present: nccl is valid here")
    assert main(["calibrate", "--backend", "nccl", "--nproc", "2", "--out", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nccl needs CUDA" in err


@pytest.mark.multiproc
def test_cli_calibrates_and_writes_a_loadable_cluster(capfd, tmp_path):
    from simulator.cluster import io
    from trainplan.__main__ import main

    out = tmp_path / "local.yaml"
    code = main(["calibrate", "--nproc", "2", "--out", str(out), "--sizes", "4KB..32KB", "--repeats", "2",
                 "--warmup", "1", "--check"])
    captured = capfd.readouterr()  # file-descriptor capture: the ranks write progress from child processes
    assert code == 0, captured.err
    assert "measured all-reduce" in captured.err  # progress lines while measuring
    assert "median absolute error" in captured.out
    fit_out, fresh_out = captured.out.split("fresh measurement against the written file:")
    fitted_out, probes_out = fit_out.split("\nprobe ", 1)
    rows = [line.split() for line in fitted_out.splitlines() if line.split()[:1] == ["2"]]
    # the default design: gloo's native calls (fitted as the rings gloo runs), not replays
    assert sorted((r[1], r[3]) for r in rows) == [("all-gather", "native")] * 4 + [("all-reduce", "native")] * 4
    # then its probes, not fitted: the native broadcast (checked) and the ring replay (sets replay_step_us)
    probes = [line.split() for line in probes_out.splitlines() if line.split()[:1] == ["2"]]
    assert sorted((r[1], r[3]) for r in probes) == [("all-reduce", "ring")] * 4 + [("broadcast", "native")] * 4
    assert "probe broadcast native" in captured.out and "probe all-reduce ring" in captured.out
    assert "replay step" in fitted_out
    assert len([line for line in fresh_out.splitlines() if line.split()[:1] == ["2"]]) == 16
    assert captured.out.count("machine: ") == 2 and "of the CPU while measuring" in captured.out
    assert "p10..p90" in captured.out.splitlines()[0]  # each fitted parameter's bootstrap spread
    cluster = io.load_cluster(str(out))
    assert cluster.name.endswith("-calibrated")
    assert "nproc 2" in cluster.source and "backend gloo" in cluster.source
    assert cluster.node.intra_link.bw_GBps > 0
    assert cluster.comm.replay_step_us >= 0 and "replay_step_us" in cluster.source
    # the expected wait per blocking call, measured at the one process count, written as its own field
    assert [p for p, _ in cluster.comm.blocking_wait_us] == [2] and "blocking_wait_us" in cluster.source
    assert "wait per call 2 processes" in fitted_out
    # each measured op's own wait (the broadcast's from its probe), and the calls per point by processes per core
    assert [(op.value, [p for p, _ in t]) for op, t in cluster.comm.op_wait_us] == [
        ("all-gather", [2]), ("all-reduce", [2]), ("broadcast", [2])] and "op_wait_us" in cluster.source
    assert "    broadcast 2 processes" in fitted_out
    from executor.calibrate_host import host_cores
    from executor.calibrate_modes import calls_per_point

    # 2 processes taken at three moments (executor.calibrate_moments): the calls split, every moment's wait recorded
    from executor.calibrate_moments import MOMENTS, calls_per_moment

    assert f"repeats {MOMENTS} × {calls_per_moment(calls_per_point(2, 2, host_cores()))} at 2 processes" in cluster.source
    assert f"taken at {MOMENTS} moments, the median written" in cluster.source
    assert "at several moments (median written): 2 processes" in fitted_out
    # the asynchronous-batch probe (executor.calibrate_async): one broadcast of torch ZeRO-1's batch, per count
    assert [p for p, _ in cluster.comm.async_broadcast_us] == [2] and "async_broadcast_us" in cluster.source
    (_, us), = cluster.comm.async_broadcast_us
    assert f"async bcast   {us:.0f} us at 2" in fitted_out  # the table shows what the file holds
    # the DTensor probe (executor.calibrate_dtensor): the tp model's calls' wait, at the one process count
    assert [p for p, _ in cluster.comm.dtensor_wait_us] == [2] and "dtensor_wait_us" in cluster.source
    (_, us), = cluster.comm.dtensor_wait_us
    # taken at three moments spread over the calibration (tp22), the median written, every take in the source
    assert f"taken at {MOMENTS} moments spread over the calibration" in cluster.source
    assert f"2 processes {us:.0f} us (moments " in cluster.source.split("dtensor_wait_us (")[1]
    assert f"DTensor call  {us:.0f} us at 2" in fitted_out  # the table shows what the file holds
    # the FSDP2 probe (executor.calibrate_fsdp2): the ZeRO-2/3 models' calls' wait, at the one process count
    assert [p for p, _ in cluster.comm.fsdp2_wait_us] == [2] and "fsdp2_wait_us" in cluster.source
    (_, us), = cluster.comm.fsdp2_wait_us
    assert f"FSDP2 call    {us:.0f} us at 2" in fitted_out  # the table shows what the file holds


@pytest.mark.parametrize("argv, message", [
    (["--nproc", "1"], "nproc: a collective needs at least 2 processes"),
    (["--nproc", "2,x"], "nproc: give process counts as integers"),
    (["--nproc", "2,1"], "nproc: a collective needs at least 2 processes"),
    (["--nproc", "2", "--algorithms", "bogus"], "unknown algorithm 'bogus'"),
    (["--nproc", "3", "--op", "reduce-scatter", "--algorithms", "halving_doubling"], "does not implement"),
    (["--nproc", "2", "--op", "reduce-scatter"], "native reduce-scatter has no established gloo algorithm"),
])
def test_cli_bad_input_is_one_line_before_anything_runs(capfd, tmp_path, argv, message):
    from trainplan.__main__ import main

    code = main(["calibrate", "--out", str(tmp_path / "c.yaml"), *argv])
    err = capfd.readouterr().err
    assert code == 2 and message in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "c.yaml").exists()
