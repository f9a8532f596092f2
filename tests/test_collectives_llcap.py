"""NCCL's LL bus-bandwidth cap (``llMaxBws`` in ``src/graph/tuning.cc``) [src: nccl-llmaxbw].

NCCL sets LL's bus bandwidth to ``min(llMaxBw, 0.5 × busBw)``: on one node by GPU generation
(Ampere 87.7, Hopper 141.0 GB/s), across nodes by host CPU (AMD hosts 22.5 on two nodes, 19.0 on
more; other hosts 39.0 / 20.4). Expected numbers below are worked by hand from those caps, NCCL's
latency table (simulator/cluster/nccl.py: ring LL base 6.6 µs, NVLink hop 0.6, network hop 2.7) and
the presets' links; tolerance 1e-9 relative (the same arithmetic in another order).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.comm import CpuVendor
from simulator.cluster.io import cluster_from_dict, cluster_to_dict
from simulator.cluster.nccl import LL_MAX_BW, nccl_protocols
from simulator.cluster.presets import load_preset, with_nodes
from simulator.cluster.spec import LinkClass
from simulator.collectives import registry
from simulator.collectives.base import Op
from simulator.collectives.replay import schedule_time_s

MiB = 1 << 20


def _cluster(name: str, nodes: int, vendor: CpuVendor | None = None):
    cluster = with_nodes(load_preset(name), nodes)
    if vendor is not None:
        host = dataclasses.replace(cluster.node.host, cpu_vendor=vendor)
        cluster = dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host))
    return cluster


def _ring(cluster, nbytes: int, protocol: str = "LL"):
    ranks = list(range(cluster.nodes * cluster.node.gpus_per_node))
    estimates = registry.estimate_protocols(cluster, ranks, Op.ALL_REDUCE, nbytes, "ring")
    return next(e for e in estimates if e.protocol == protocol)


def test_ring_all_reduce_four_a100_nodes_1MiB_ll_runs_at_the_cap():
    # 32 ranks on 4 DGX A100 nodes (AMD EPYC hosts): cap 19.0 GB/s, below 0.5 × 8 NICs × 24 GB/s = 96.
    # latency: 6.6 + 54 NVLink hops × 0.6 + 8 network hops × 2.7 = 60.6 µs (cost.py, ring chain)
    # bandwidth: 2·31/32 · 1 MiB / 19.0 GB/s = 106.93 µs
    expected_s = (6.6 + 54 * 0.6 + 8 * 2.7) * 1e-6 + (62 / 32) * MiB / 19.0e9
    e = _ring(_cluster("dgx-a100", 4), MiB)
    assert e.time_s == pytest.approx(expected_s, rel=1e-9)
    assert e.time_s * 1e6 == pytest.approx(167.53, abs=0.01)


def test_one_h100_node_ll_is_capped_at_141():
    # 8 H100 on one NVSwitch node: 0.5 × 450 × 0.82 = 184.5 GB/s > 141.0 (Hopper row).
    # 6.6 + 14 × 0.6 = 15.0 µs; 14/8 · 1 MiB / 141 GB/s = 13.01 µs
    expected_s = (6.6 + 14 * 0.6) * 1e-6 + (14 / 8) * MiB / 141.0e9
    assert _ring(_cluster("dgx-h100", 1), MiB).time_s == pytest.approx(expected_s, rel=1e-9)


def test_host_cpu_picks_the_multi_node_row():
    # 4 DGX H100 nodes (Intel hosts): 20.4 GB/s; the same nodes with AMD hosts: 19.0 GB/s.
    intel, amd = _cluster("dgx-h100", 4), _cluster("dgx-h100", 4, CpuVendor.AMD)
    latency_s = (6.6 + 54 * 0.6 + 8 * 2.7) * 1e-6
    assert _ring(intel, 64 * MiB).time_s == pytest.approx(latency_s + (62 / 32) * 64 * MiB / 20.4e9, rel=1e-9)
    assert _ring(amd, 64 * MiB).time_s == pytest.approx(latency_s + (62 / 32) * 64 * MiB / 19.0e9, rel=1e-9)


def test_no_cap_where_half_the_ring_is_below_it():
    # One GPU per node on 2 DGX A100 nodes: one NIC, 0.5 × 24 GB/s = 12 < 22.5: LL keeps half the link.
    cluster = _cluster("dgx-a100", 2)
    ranks = [0, 8]
    ll = next(e for e in registry.estimate_protocols(cluster, ranks, Op.ALL_REDUCE, 64 * MiB, "ring")
              if e.protocol == "LL")
    nic_Bps = cluster.network.link.bw_Bps
    # 2 ranks: 2 steps of n/2 over one NIC at half rate; latency 6.6 + 2 network hops (2.7)
    expected_s = (6.6 + 2 * 2.7) * 1e-6 + 2 * (32 * MiB) / (0.5 * nic_Bps)
    assert ll.time_s == pytest.approx(expected_s, rel=1e-9)


def test_unknown_architecture_has_no_one_node_cap():
    assert LL_MAX_BW.cap_GBps(1, None, None) is None
    assert LL_MAX_BW.cap_GBps(1, 8.9, None) == 87.7  # Ada (L40S) reads the Ampere row, as compCapIndex does
    assert LL_MAX_BW.cap_GBps(3, None, None) == 20.4  # across nodes only the host matters


def test_replay_and_closed_form_agree_under_the_cap():
    cluster = _cluster("dgx-a100", 4)
    ranks = list(range(32))
    ll = next(p for p in cluster.comm.protocols if p.name == "LL")
    schedule = registry.build_schedule(cluster, ranks, Op.ALL_REDUCE, 4 * MiB, "ring")
    closed = _ring(cluster, 4 * MiB).time_s
    assert schedule_time_s(cluster, schedule, ll) == pytest.approx(closed, rel=1e-9)


def test_cap_and_new_fields_survive_a_file_round_trip():
    cluster = _cluster("dgx-a100", 2)
    again = cluster_from_dict(cluster_to_dict(cluster))
    assert again == cluster
    assert again.comm.protocols[0].bus_bw_cap == LL_MAX_BW
    assert again.device.compute_capability == 8.0 and again.node.host.cpu_vendor is CpuVendor.AMD


def _switch_bytes(cluster) -> float:
    """Size where ring all-reduce under LL stops being the fastest protocol, worked from NCCL's
    constants: ``L_LL + y/bw_LL = L_q + y/bw_q`` for bus bytes ``y``, the first q that wins."""
    nodes, g = cluster.nodes, cluster.node.gpus_per_node
    p = nodes * g
    if nodes == 1:
        ring_Bps = cluster.node.intra_link.bw_Bps
    else:
        ring_Bps = min(cluster.node.intra_link.bw_Bps, cluster.node.nics_per_node * cluster.network.link.bw_Bps)
    net_edges = 2 * nodes if nodes > 1 else 0
    host = cluster.node.host.cpu_vendor
    cap_Bps = LL_MAX_BW.cap_GBps(nodes, cluster.device.compute_capability, host) * 1e9
    out = []
    table = {q.name: q for q in nccl_protocols()}
    def latency_s(q):
        hop = q.hop_latency_us
        return (q.base_latency_us["ring"] + (2 * (p - 1) - net_edges) * hop[LinkClass.NVLINK]
                + net_edges * hop[LinkClass.NET]) * 1e-6

    ll = table["LL"]
    bw_ll = min(0.5 * ring_Bps, cap_Bps)
    for name in ("LL128", "Simple"):
        q = table[name]
        y = (latency_s(q) - latency_s(ll)) / (1 / bw_ll - 1 / (q.bw_factor * ring_Bps))
        out.append(y * p / (2 * (p - 1)))
    return min(out)


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(["dgx-a100", "dgx-h100"]), nodes=st.sampled_from([1, 2, 3, 4, 8, 16]))
def test_ring_leaves_ll_where_nccls_caps_say(name, nodes):
    cluster = _cluster(name, nodes)
    ranks = list(range(nodes * cluster.node.gpus_per_node))
    switch = _switch_bytes(cluster)

    def fastest(nbytes: int) -> str:
        return min(registry.estimate_protocols(cluster, ranks, Op.ALL_REDUCE, nbytes, "ring"),
                   key=lambda e: e.time_s).protocol

    assert fastest(int(0.97 * switch)) == "LL"
    assert fastest(int(1.03 * switch)) != "LL"
    cap = LL_MAX_BW.cap_GBps(nodes, cluster.device.compute_capability, cluster.node.host.cpu_vendor)
    for nbytes in (MiB, 64 * MiB, 1 << 30):  # the cap holds at every size (latency only lowers busbw)
        assert _ring(cluster, nbytes).busbw_GBps < cap
