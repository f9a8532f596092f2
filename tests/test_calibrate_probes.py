"""The calibration's probes (executor/calibrate_replay.py): the ring replay fits ``comm.replay_step_us`` with the
native parameters held, and the native broadcast is checked (not fitted) against the binomial tree's formula.
Synthetic measurements: no process is launched."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from executor.calibrate import executed_time, fit_rows, on_node, with_values
from executor.calibrate_replay import PROBE_SERIES, REPLAY_SERIES, fit_replay_step, split_probes, weighted_median
from executor.calibrate_run import DEFAULT_ALGORITHMS, DEFAULT_SIZES, _cases, probes_for, series_for
from simulator.collectives.base import Op
from test_calibrate_design import TRUE, local
from test_calibrate_native import exact_on

NPROCS = (2, 3, 4)


def _cases_all(cluster, series):
    return [c for p in NPROCS for c in _cases(on_node(cluster, p), series, p, list(DEFAULT_SIZES))]




def test_weighted_median_hand_worked():
    assert weighted_median([3.0, 1.0, 2.0], [1.0, 1.0, 1.0]) == 2.0
    assert weighted_median([1.0, 10.0], [1.0, 3.0]) == 10.0  # 3 of 4 units of weight at 10
    assert weighted_median([1.0, 10.0], [3.0, 1.0]) == 1.0


def test_the_default_design_times_both_probes_on_gloo_only():
    assert probes_for(DEFAULT_ALGORITHMS, "gloo") == PROBE_SERIES
    assert (Op.BROADCAST, "native") in PROBE_SERIES and REPLAY_SERIES in PROBE_SERIES
    assert probes_for(["ring", "tree"], "gloo") == ()  # the replay design fits replays directly
    assert probes_for(DEFAULT_ALGORITHMS, "nccl") == ()


def test_replay_step_is_recovered_from_exact_replays():
    """Replays timed exactly on a cluster with replay_step_us = 850 give back 850 when the native parameters are
    held at their true values; each replay row then matches its measurement."""
    truth = with_values(local(4), TRUE)
    truth = replace(truth, comm=replace(truth.comm, replay_step_us=850.0))
    cases = _cases_all(truth, [REPLAY_SERIES])
    measured = exact_on(cases, truth)
    natively = replace(truth, comm=replace(truth.comm, replay_step_us=0.0))
    assert fit_replay_step(natively, measured, cases) == pytest.approx(850.0, rel=1e-9)
    rows = fit_rows(truth, measured, executed_time(cases))
    assert max(abs(r.error_pct) for r in rows) < 1e-9


def test_replay_steps_cost_what_the_formula_says():
    """A 4-process ring replay on 2 cores: 6 steps × share 2 × 850 µs = 10.2 ms over the native ring's time."""
    truth = with_values(local(4), TRUE)
    cases = _cases_all(truth, [REPLAY_SERIES])
    timed = executed_time(cases)
    with_replay = replace(truth, comm=replace(truth.comm, replay_step_us=850.0))
    four = on_node(with_replay, 4)
    extra = (timed(four, [0, 1, 2, 3], Op.ALL_REDUCE, 4096, "ring").time_s
             - timed(on_node(truth, 4), [0, 1, 2, 3], Op.ALL_REDUCE, 4096, "ring").time_s)
    assert extra == pytest.approx(6 * 2 * 850e-6, rel=1e-12)


def test_replays_slower_than_native_fit_positive_and_never_negative():
    truth = with_values(local(4), TRUE)
    cases = _cases_all(truth, [REPLAY_SERIES])
    measured = exact_on(cases, truth)  # replays exactly as fast as the native ring: nothing more per step
    assert fit_replay_step(truth, measured, cases) == pytest.approx(0.0, abs=1e-6)
    faster = [replace(m, mean_s=m.mean_s / 2) for m in measured]
    assert fit_replay_step(truth, faster, cases) == 0.0  # clamped at 0, not a negative cost


def test_broadcast_probe_is_checked_against_the_binomial_tree():
    """Native broadcast rows are estimated with gloo's binomial tree on the fitted cluster: exact measurements
    taken from that formula have no error, and the probe is split off the fitted series."""
    truth = with_values(local(4), TRUE)
    series = series_for(Op.ALL_REDUCE, DEFAULT_ALGORITHMS)
    cases = _cases_all(truth, series + list(PROBE_SERIES))
    measured = exact_on(cases, truth)
    fitted, replays, checked = split_probes(measured, PROBE_SERIES)
    assert {(m.op, m.algorithm) for m in fitted} == set(series)
    assert {(m.op, m.algorithm) for m in replays} == {REPLAY_SERIES}
    assert {(m.op, m.algorithm) for m in checked} == {(Op.BROADCAST, "native")}
    rows = fit_rows(truth, checked, executed_time(cases))
    assert max(abs(r.error_pct) for r in rows) < 1e-9
    models = {c.model.algorithm for c in cases if c.op is Op.BROADCAST}
    assert models == {"recursive_doubling"}  # the binomial tree gloo runs [src: gloo-native-algorithms]


def test_broadcast_formula_hand_worked():
    """4 processes on 2 cores, 4 MiB: the call × share 2, then gloo's 2 binomial rounds each at the share of its
    busy processes (simulator/collectives/gloo.py): round 0→1 has 2 (share 1), round 0→2, 1→3 has 4 (share 2), so
    n/bw + 2·n/bw of bytes and a latency chain α + 2α."""
    truth = with_values(local(4), TRUE)
    call_us, hop_us, inv_bw, _ = TRUE
    n = 4 * 4 ** 5 * 1024
    cases = _cases(on_node(truth, 4), [(Op.BROADCAST, "native")], 4, [n])
    got = executed_time(cases)(on_node(truth, 4), [0, 1, 2, 3], Op.BROADCAST, n, "native").time_s
    expected = 2 * call_us * 1e-6 + 3 * (hop_us * 1e-6 + n * inv_bw / 1e9)
    assert got == pytest.approx(expected, rel=1e-9)


def test_the_suite_calibrates_with_trainplan_calibrates_design(monkeypatch, tmp_path):
    """``validate --suite --calibrate`` measures the network with ``calibrate()``'s own defaults (sizes, repeats,
    warm-up, algorithms, probes): it passes only the process counts up to ``--nproc`` and the base, so a design
    change reaches both through one home (it used to pass 5 sizes ×8/×4 and 15 calls of its own)."""
    import inspect
    from types import SimpleNamespace

    import executor.calibrate as calibrate_module
    import executor.calibrate_compute as compute_module
    from executor.calibrate_moments import Moments
    from executor.calibrate_run import calibrate as design
    from executor.suite_calibration import calibrated_cluster
    from simulator.cluster.io import load_cluster

    seen = {}
    cluster = load_cluster("localhost-cpu")
    cluster = replace(cluster, comm=replace(cluster.comm, async_broadcast_us=((2, 429.0), (3, 707.0)),
                                            dtensor_wait_us=((2, 829.0),), dtensor_sp_wait_us=((2, 673.0),)))
    fit = SimpleNamespace(call_latency_us=1.0, latency_us=2.0, bw_GBps=3.0, spread=None, median_abs_error_pct=4.0,
                          replay_step_us=500.0, probes=(), blocking_wait_us={2: 760.0, 3: 2116.0},
                          machine="load average 0.50 before, 0.60 after; other work took 3% of the CPU while measuring",
                          wait_moments={2: Moments((700.0, 760.0, 1000.0))})

    def fake_calibrate(**kwargs):
        seen.update(kwargs)
        return cluster, fit

    fields = SimpleNamespace(kernel_launch_overhead_us=1.0, backward_call_overhead_us=0.5, op_call_overhead_us=1.0,
                             dtensor_call_overhead_us=17.7, peak_tflops={})
    compute = SimpleNamespace(threads=1, fields=fields, tp_modules=None, ddp=None, fsdp2=None, pipeline=None,
                              fsdp2_optimizer=None, rank_steps=None,
                              dtype=SimpleNamespace(value="fp32", compute_dtype=None),
                              block_call_us=(0.25, 0.125, 0.75))
    fields.peak_tflops[None] = 1e-3
    monkeypatch.setattr(calibrate_module, "calibrate", fake_calibrate)
    monkeypatch.setattr(compute_module, "calibrate_compute", lambda c, *a, **k: (c, compute))
    path, notes = calibrated_cluster("localhost-cpu", tmp_path, calibrate_network=True, nproc=3)
    assert seen["nproc"] == (2, 3)
    defaults = {"sizes", "repeats", "warmup", "algorithms"}
    assert not defaults & set(seen), f"the suite overrides calibrate()'s design: {defaults & set(seen)}"
    assert defaults <= set(inspect.signature(design).parameters)
    assert "replay step 500 us" in notes[0]
    assert "wait per blocking call 760 us at 2, 2116 us at 3" in notes[0]  # the suite's report names the waits
    assert "(median of moments: 2 processes 760 us (moments 700, 760, 1000" in notes[0]  # probe17: and their moments
    assert "per broadcast of an asynchronous batch 429 us at 2, 707 us at 3" in notes[0]  # executor.calibrate_async
    assert "wait per DTensor tp call 829 us at 2 (with sequence parallelism 673 us at 2)" in notes[0]  # tp16's probe
    assert "per DTensor optimizer call 17.7 us more, " in notes[0]  # val27: the figure written
    assert "results rewrite" not in notes[0]  # cal19: the executor no longer rewrites between steps, no term
    # cal19: how quiet the machine was during each half of the calibration, as the cases' own records say it
    assert "; while the network was measured: load average 0.50 before, 0.60 after; other work took 3%" in notes[0]
    compute = (r"; while the compute was measured \(\d+ s\): (NOISY MACHINE: )?load average [\d.]+ before, [\d.]+ "
               r"after; other work took (\d+%|not sampled) of the CPU while measuring$")
    assert re.search(compute, notes[0]), notes[0]
    assert "1.00 us forward, 0.50 us backward (a rank's step; the block's tight loop 0.25 / 0.12 us, AdamW's 0.75 us per op call)" in notes[0]
