"""torch ZeRO-1's broadcasts are one asynchronous batch (``ZeroRedundancyOptimizer._sync_params``: every
``dist.broadcast(..., async_op=True)`` issued, then all waited [src: torch-zero1-broadcasts]), priced per call from
``comm.async_broadcast_us`` where measured [src: own-gloo-async-broadcast-2026-11-25]
(:func:`simulator.collectives.gloo.async_broadcast_time_s`); checked by hand and on the recorded zero1 run
(tests/data/suite_default, 2026-11-25)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.comm import CommProfile
from simulator.cluster.io import load_cluster, save_cluster
from simulator.collectives.base import Op
from simulator.collectives.gloo import async_broadcast_time_s
from simulator.compile import compile_step
from simulator.errors import SpecError
from simulator.results import Category
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.validate import estimate_run, run_cluster, run_workload
from simulator.work import Transport

DATA = Path(__file__).parent / "data" / "suite_default"
LAYER = [32, 32, 3072, 96, 1024, 32, 32, 32, 4096, 128, 4096, 32]
TINY_TENSOR_BYTES = [4 * n for n in [4096, 512] + LAYER * 2 + [32, 32]]  # as tests/test_zero1_broadcasts.py
A_US = 400.0  # a per-call figure of the order measured at 2 processes (0.33-0.53 ms), for the hand sums
W_US = 955.0  # the blocking wait at 2 processes of the lead's quiet calibration of 17:00 UTC (docs/validation.md)


def _with(cluster, **comm):
    return replace(cluster, comm=replace(cluster.comm, **comm))


def test_async_broadcast_time_by_hand():
    """localhost-cpu at 2 processes (loopback 2.5 GB/s × efficiency 1, 2 cores: share 1): one binomial round,
    400 µs + 16,384 B / 2.5 GB/s = 406.5536 µs; 3 processes read between 2 and 4 (600 µs), two rounds."""
    base = load_cluster("localhost-cpu")
    link = base.node.intra_link
    assert link.bw_GBps * link.efficiency == pytest.approx(2.5)
    two = replace(_with(base, async_broadcast_us=((2, A_US), (4, 800.0))), node=replace(base.node, gpus_per_node=2))
    assert async_broadcast_time_s(two, 2, 16_384) == pytest.approx(406.5536e-6, rel=1e-12)
    three = replace(two, node=replace(two.node, gpus_per_node=3))  # share 1.5 at 3 processes on 2 cores
    assert async_broadcast_time_s(three, 3, 16_384) == pytest.approx(600e-6 + 2 * 16_384 / 2.5e9 * 1.5, rel=1e-12)
    assert async_broadcast_time_s(replace(base, node=replace(base.node, gpus_per_node=2)), 2, 16_384) is None


def test_table_is_checked_and_round_trips(tmp_path):
    with pytest.raises(SpecError, match="async_broadcast_us"):
        CommProfile(async_broadcast_us=((4, 1.0), (2, 1.0)))
    cluster = _with(load_cluster("localhost-cpu"), async_broadcast_us=((2, A_US),))
    save_cluster(cluster, tmp_path / "c.yaml")
    assert load_cluster(str(tmp_path / "c.yaml")).comm.async_broadcast_us == ((2, A_US),)
    text = (tmp_path / "c.yaml").read_text().replace("{2: 400.0}", "{0: 400.0}")
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(SpecError, match="async_broadcast_us"):
        load_cluster(str(tmp_path / "bad.yaml"))


def _zero1(cluster):
    results = load_results(DATA / "zero1.results.json")
    plan = results.run.plan
    workload = run_workload(results)
    layout = build_layout(plan.strategy, cluster, workload, gpus=plan._layout_gpus())
    return results, compile_step(cluster, workload, plan.strategy, layout=layout)


def test_each_tensor_one_batched_broadcast_by_hand():
    """28 broadcasts, each 400 µs + its bytes at 2.5 GB/s: 11.2 ms + 120,320 B / 2.5 GB/s = 11.248128 ms, in
    both engines; without the figure the calls stay blocking collectives."""
    results = load_results(DATA / "zero1.results.json")
    cluster = _with(run_cluster(results, "localhost-cpu"), async_broadcast_us=((2, A_US),))
    after = _zero1(cluster)[1].stages[0].after_step
    assert [c.nbytes for c in after] == TINY_TENSOR_BYTES
    assert all(c.op is Op.BROADCAST and c.transport is Transport.ASYNC_BATCH for c in after)
    for estimate in estimate_run(results, cluster):
        assert estimate.breakdown[Category.ZERO] == pytest.approx(28 * A_US * 1e-6 + 120_320 / 2.5e9, rel=1e-9)
    plain = _zero1(run_cluster(results, "localhost-cpu"))[1].stages[0].after_step
    assert all(c.transport is Transport.COLLECTIVE for c in plain)


def test_recorded_zero1_moves_towards_the_measured_step():
    """With the blocking wait of a quiet calibration (W(2) = 955 µs per call) the 28 broadcasts over-price the
    recorded zero1 run; their measured batch cost brings the estimate down, closer to the measured step."""
    results = load_results(DATA / "zero1.results.json")
    blocking = _with(run_cluster(results, "localhost-cpu"), blocking_wait_us=((2, W_US),))
    batched = _with(blocking, async_broadcast_us=((2, A_US),))
    measured = results.summary()["step_time_s"]["median_s"]
    for old, new in zip(estimate_run(results, blocking), estimate_run(results, batched)):
        assert old.step_time_s > measured
        assert new.step_time_s < old.step_time_s
        assert abs(new.step_time_s / measured - 1) < abs(old.step_time_s / measured - 1)


@settings(max_examples=40, deadline=None)
@given(a_us=st.floats(0.0, 5e3), p=st.integers(2, 8), n=st.integers(0, 1 << 24), extra=st.integers(1, 1 << 20))
def test_batched_broadcast_grows_with_bytes_and_starts_at_its_fixed_cost(a_us, p, n, extra):
    """T(n) = A(N) + ⌈log2 p⌉·n/bw·share: A at 0 bytes, strictly increasing in n (a property of the formula)."""
    base = load_cluster("localhost-cpu")
    cluster = replace(_with(base, async_broadcast_us=((2, a_us),)), node=replace(base.node, gpus_per_node=p))
    assert async_broadcast_time_s(cluster, p, 0) == pytest.approx(a_us * 1e-6, abs=1e-15)
    assert async_broadcast_time_s(cluster, p, n + extra) > async_broadcast_time_s(cluster, p, n)
