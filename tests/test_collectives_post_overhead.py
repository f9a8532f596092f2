"""Per-peer network post overhead (NCCL ``tuning.cc`` ``getNetOverhead``) [src: nccl-net-overhead].

NCCL's proxy posts each network message from the host: 1 µs on Intel hosts, 2 µs on AMD, three
times that under Simple. A step in which a rank sends to (or receives from) ``k`` distinct network
peers waits ``(k − 1)`` posts before its last message leaves; a ring step (one peer, however many
channels) waits none. Expected differences are worked by hand from those figures; tolerance 1e-9
relative (the same sums in another order).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.presets import load_preset, with_nodes
from simulator.collectives import registry
from simulator.collectives.base import Op
from simulator.collectives.cost import Env, Group
from simulator.collectives.replay import schedule_time_s


def _without_posts(cluster):
    protocols = tuple(dataclasses.replace(p, net_post_overhead_us={}) for p in cluster.comm.protocols)
    return dataclasses.replace(cluster, comm=dataclasses.replace(cluster.comm, protocols=protocols))


def _time(cluster, op: Op, nbytes: int, algorithm: str, protocol: str) -> float:
    ranks = list(range(cluster.nodes * cluster.node.gpus_per_node))
    return next(e.time_s for e in registry.estimate_protocols(cluster, ranks, op, nbytes, algorithm)
                if e.protocol == protocol)


def _extra_s(cluster, op: Op, nbytes: int, algorithm: str, protocol: str) -> float:
    return _time(cluster, op, nbytes, algorithm, protocol) - _time(_without_posts(cluster), op, nbytes, algorithm,
                                                                   protocol)


def test_direct_all_to_all_on_four_a100_nodes_waits_23_posts():
    # 32 ranks, 8 per node: each rank sends to 24 network peers; AMD EPYC hosts: 2 µs per post under LL.
    cluster = with_nodes(load_preset("dgx-a100"), 4)
    assert _extra_s(cluster, Op.ALL_TO_ALL, 4 * 32, "direct", "LL") == pytest.approx(23 * 2.0e-6, rel=1e-9)


def test_simple_posts_cost_three_times_and_intel_hosts_half():
    # 4 DGX H100 nodes (Intel hosts): 1 µs per post, × 3 under Simple: 23 × 3 µs.
    cluster = with_nodes(load_preset("dgx-h100"), 4)
    assert _extra_s(cluster, Op.ALL_TO_ALL, 4 * 32, "direct", "Simple") == pytest.approx(69e-6, rel=1e-9)
    assert _extra_s(cluster, Op.ALL_TO_ALL, 4 * 32, "direct", "LL") == pytest.approx(23e-6, rel=1e-9)


def test_one_network_peer_per_step_pays_nothing():
    cluster = with_nodes(load_preset("dgx-a100"), 4)  # 8 ring channels leave each node by 8 NICs: one peer
    for algorithm, op in (("ring", Op.ALL_REDUCE), ("pairwise", Op.ALL_TO_ALL), ("hierarchical", Op.ALL_REDUCE)):
        assert _extra_s(cluster, op, 1 << 20, algorithm, "LL") == 0.0, algorithm


def test_no_protocol_no_post_overhead():
    cluster = with_nodes(load_preset("dgx-a100"), 2)
    assert Env(cluster, None).post_overhead_s == 0.0


def test_replay_charges_the_same_posts():
    cluster = with_nodes(load_preset("dgx-a100"), 4)
    ranks = list(range(32))
    ll = next(p for p in cluster.comm.protocols if p.name == "LL")
    schedule = registry.build_schedule(cluster, ranks, Op.ALL_TO_ALL, 1 << 16, "direct")
    closed = _time(cluster, Op.ALL_TO_ALL, 1 << 16, "direct", "LL")
    assert schedule_time_s(cluster, schedule, ll) == pytest.approx(closed, rel=1e-9)
    assert Env(cluster, ll, group=Group(cluster, tuple(ranks))).post_overhead_s == 2.0e-6


@settings(max_examples=8, deadline=None)
@given(nodes=st.integers(min_value=2, max_value=16), gpus=st.sampled_from([2, 4, 8]))
def test_many_peer_step_grows_with_its_network_peers(nodes, gpus):
    # g GPUs on each of N nodes: every rank has g·(N−1) network peers → (g·(N−1) − 1) posts of 2 µs.
    cluster = with_nodes(load_preset("dgx-a100"), nodes)
    ranks = [n * 8 + i for n in range(nodes) for i in range(gpus)]
    nbytes = 4 * len(ranks)

    def time_s(c):
        return next(e.time_s for e in registry.estimate_protocols(c, ranks, Op.ALL_TO_ALL, nbytes, "direct")
                    if e.protocol == "LL")

    extra = time_s(cluster) - time_s(_without_posts(cluster))
    assert extra == pytest.approx((gpus * (nodes - 1) - 1) * 2.0e-6, rel=1e-9)
