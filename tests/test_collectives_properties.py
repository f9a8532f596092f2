"""Invariants of the cost models (hypothesis), and the ring/tree crossover NCCL's tuner relies on."""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from simulator.cluster.nccl import nccl_protocols as real_nccl_protocols
from simulator.cluster.spec import CommLibrary, CommProfile
from simulator.collectives.base import Op
from simulator.collectives.registry import algorithm_names, estimate, estimate_all, supports
from test_collectives_helpers import NIC, NVSWITCH, nccl_protocols, switched

IDEAL = switched(nodes=2, gpus=4)
NCCL = switched(nodes=2, gpus=4, comm=nccl_protocols())
GROUPS = [list(range(8)), [0, 4], [0, 1, 2, 4, 5, 6], [1, 2, 3]]
sizes = st.integers(min_value=1, max_value=2**31)
FAST = settings(max_examples=25, deadline=None)


def _pairs(cluster, ranks, op):
    return [a for a in algorithm_names() if supports(a, op, cluster, ranks)]


def _carried(op: Op, n: int, group) -> int:
    """``n``, or for an all-to-all the least it can carry: one 4-byte element per peer (registry refuses less)."""
    return max(n, 4 * len(group)) if op is Op.ALL_TO_ALL else n


@FAST
@given(n=sizes, m=sizes, group=st.sampled_from(GROUPS), op=st.sampled_from(list(Op)),
       cluster=st.sampled_from([IDEAL, NCCL]))
def test_time_grows_with_bytes(n, m, group, op, cluster):
    small, large = sorted((_carried(op, n, group), _carried(op, m, group)))
    for name in _pairs(cluster, group, op):
        assert (estimate(cluster, group, op, small, name).time_s
                <= estimate(cluster, group, op, large, name).time_s * (1 + 1e-12))


@FAST
@given(n=sizes, scale=st.floats(0.05, 0.95), group=st.sampled_from(GROUPS), which=st.sampled_from(["nic", "nvs"]),
       cluster=st.sampled_from([IDEAL, NCCL]))
def test_never_faster_with_less_bandwidth(n, scale, group, which, cluster):
    if which == "nic":
        slower = replace(cluster, network=replace(cluster.network, link=replace(NIC, bw_GBps=NIC.bw_GBps * scale)))
    else:
        slower = replace(cluster, node=replace(cluster.node, intra_link=replace(NVSWITCH, bw_GBps=100 * scale)))
    for op in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.BROADCAST, Op.ALL_TO_ALL):
        size = _carried(op, n, group)
        for name in _pairs(cluster, group, op):
            assert (estimate(slower, group, op, size, name).time_s
                    >= estimate(cluster, group, op, size, name).time_s * (1 - 1e-12))


@FAST
@given(n=sizes, group=st.sampled_from(GROUPS), op=st.sampled_from(list(Op)))
def test_auto_is_never_slower_than_any_algorithm(n, group, op):
    """Without a library tuner, auto beats every algorithm; on NCCL, every algorithm NCCL's tuner knows."""
    from simulator.cluster.nccl import tuner_choices

    n = _carried(op, n, group)
    ideal = replace(NCCL, comm=CommProfile())
    auto = estimate(ideal, group, op, n)
    assert all(auto.time_s <= e.time_s for e in estimate_all(ideal, group, op, n))
    auto = estimate(NCCL, group, op, n)
    choices = tuner_choices(op.value)
    assert all(auto.time_s <= e.time_s for e in estimate_all(NCCL, group, op, n) if e.algorithm in choices)
    assert auto.algorithm in choices


def test_ring_busbw_in_one_switched_node_approaches_link_bandwidth():
    # busbw → B: the pipelined ring's reduction (3·((p−1)/p)n/hbm) overlaps its 2((p−1)/p)n/B of
    # transfer and hbm/3 > B, so no γ shows (cost.py Env.gamma_s).
    cluster = switched(nodes=1, gpus=8)
    limit = 100
    busbw = [estimate(cluster, range(8), Op.ALL_REDUCE, 2**k, "ring").busbw_GBps for k in range(10, 31, 4)]
    assert busbw == sorted(busbw)
    assert busbw[-1] == pytest.approx(limit, rel=1e-3)
    assert busbw[0] < 0.1 * limit


def test_tree_beats_ring_small_ring_beats_tree_large_on_many_nodes():
    cluster = switched(nodes=16, gpus=8, comm=nccl_protocols())
    ranks = range(128)
    small = {e.algorithm: e.time_s for e in estimate_all(cluster, ranks, Op.ALL_REDUCE, 1024)}
    large = {e.algorithm: e.time_s for e in estimate_all(cluster, ranks, Op.ALL_REDUCE, 2**30)}
    assert small["tree"] < small["ring"] / 5
    assert large["ring"] < large["tree"]


STEP = 524288  # NCCL Simple's FIFO step (nccl.py STEP_BYTES)
REAL_NCCL = switched(nodes=2, gpus=4, comm=CommProfile(library=CommLibrary.NCCL, protocols=real_nccl_protocols()))
"""NCCL's own table (simulator/cluster/nccl.py), with its step sizes; the helpers' NCCL has none."""


@settings(max_examples=60, deadline=None)
@given(k=st.integers(0, 2047), d=st.integers(-4096, 4096), e=st.integers(1, 8192),
       op_name=st.sampled_from([("ring", Op.BROADCAST), ("ring", Op.REDUCE), ("tree", Op.ALL_REDUCE)]),
       cluster=st.sampled_from([IDEAL, NCCL, REAL_NCCL]))
def test_pipelines_grow_with_bytes_across_chunk_boundaries(k, d, e, op_name, cluster):
    """Monotone in bytes where the chunk count changes: sizes just around multiples of NCCL's
    step (where the step bound moves the chunk count) and of 1024 steps (the cap)."""
    name, op = op_name
    n = max(1, k * STEP * 2 + d)
    small = estimate(cluster, list(range(8)), op, n, name).time_s
    assert estimate(cluster, list(range(8)), op, n + e, name).time_s >= small * (1 - 1e-12)
