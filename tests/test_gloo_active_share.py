"""gloo's native broadcast charges each binomial round the time-sharing of the processes active in it
(simulator/collectives/gloo.py, "Active processes"); a ring, whose steps keep every process busy, and NCCL
clusters are unchanged."""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from simulator.cluster.io import load_cluster
from simulator.collectives.base import Op
from simulator.collectives.gloo import active_share_time_s
from simulator.collectives.registry import build_schedule, estimate, get_algorithm
from simulator.collectives.replay import schedule_time_s

_CPU = load_cluster("localhost-cpu")  # 2 cores


def _cpu(p: int, call_us=100.0, hop_us=400.0, bw_GBps=2.0):
    link = replace(_CPU.node.intra_link, latency_us=hop_us, bw_GBps=bw_GBps, efficiency=1.0)
    return replace(_CPU, node=replace(_CPU.node, gpus_per_node=p, intra_link=link),
                   comm=replace(_CPU.comm, call_latency_us=call_us))


@pytest.mark.parametrize("p, expected_us, nodewide_us", [
    # c = 100 µs, α = 400 µs, n/bw = 1 MB / 2 GB/s = 500 µs; cores 2, node-wide share max(1, p/2)
    (2, 100 + 400 + 500, 100 + 400 + 500),  # one round, 2 active: nothing changes
    # rounds 0→1 and 0→2, 2 active in each (share 1); the chain is one α (the root sends both); call × 1.5
    (3, 1.5 * 100 + 400 + 2 * 500, 1.5 * (100 + 400 + 2 * 500)),
    # round 0→1 (2 active, share 1), round 0→2 and 1→3 (4 active, share 2): chain α + 2α; call × 2
    (4, 2 * 100 + 3 * 400 + (1 + 2) * 500, 2 * (100 + 2 * 400 + 2 * 500)),
])
def test_broadcast_hand_worked(p, expected_us, nodewide_us):
    cluster, ranks, n = _cpu(p), list(range(p)), 10**6
    auto = estimate(cluster, ranks, Op.BROADCAST, n, "auto")
    assert auto.algorithm == "recursive_doubling"
    assert auto.time_s == pytest.approx(expected_us * 1e-6, rel=1e-9)
    assert estimate(cluster, ranks, Op.BROADCAST, n, "recursive_doubling").time_s == pytest.approx(
        nodewide_us * 1e-6, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 8), n=st.integers(4096, 1 << 24), hop_us=st.floats(0, 2000), call_us=st.floats(0, 2000))
def test_ring_unchanged_and_never_dearer(p, n, hop_us, call_us):
    """Every ring step has all p processes active, so the active-share time is the ordinary one; any schedule's
    active-share time is at most its node-wide one (a step never has more active processes than the node)."""
    cluster, ranks = _cpu(p, call_us, hop_us), list(range(p))
    ring = build_schedule(cluster, ranks, Op.ALL_GATHER, n // (4 * p) * 4 * p or 4 * p, "ring")
    assert active_share_time_s(cluster, ring, get_algorithm("ring")) == pytest.approx(schedule_time_s(cluster, ring), rel=1e-9)
    tree = build_schedule(cluster, ranks, Op.BROADCAST, n, "recursive_doubling")
    assert active_share_time_s(cluster, tree, get_algorithm("recursive_doubling")) <= schedule_time_s(cluster, tree) * (1 + 1e-12)


def test_nccl_clusters_unchanged():
    """No time-sharing on a GPU node: the active-share time is the ordinary one."""
    gpu = load_cluster("dgx-h100")
    ranks = list(range(8))
    tree = build_schedule(gpu, ranks, Op.BROADCAST, 1 << 20, "recursive_doubling")
    assert active_share_time_s(gpu, tree, get_algorithm("recursive_doubling")) == pytest.approx(schedule_time_s(gpu, tree), rel=1e-12)


def test_calibration_prices_the_native_broadcast_probe_the_same_way():
    """The calibration's broadcast probe is checked against what the simulator charges a native broadcast."""
    from executor.calibrate import executed_time
    from executor.collective_bench import BenchCase

    cluster, ranks, n = _cpu(4), list(range(4)), 1 << 16
    model = build_schedule(cluster, ranks, Op.BROADCAST, n, "recursive_doubling")
    timed = executed_time([BenchCase(algorithm="native", nbytes=n, op=Op.BROADCAST, model=model)])
    assert timed(cluster, ranks, Op.BROADCAST, n, "native").time_s == pytest.approx(
        estimate(cluster, ranks, Op.BROADCAST, n, "auto").time_s, rel=1e-12)


def test_a_group_smaller_than_the_node_keeps_the_others_busy():
    """A 2-rank broadcast on a node of 4 processes: the 2 outside the group may be working (another group's
    collective, compute), so its one round keeps the node-wide share 2; the whole-node group drops to 1."""
    cluster, n = _cpu(4), 10**6
    pair = estimate(cluster, [0, 1], Op.BROADCAST, n, "auto").time_s
    assert pair == pytest.approx(2 * (100 + 400 + 500) * 1e-6, rel=1e-9)
    assert pair == pytest.approx(estimate(cluster, [0, 1], Op.BROADCAST, n, "recursive_doubling").time_s, rel=1e-12)
