"""Path and tier queries on small hand-built clusters (values chosen so the answers are hand-checkable)."""

import pytest

from simulator.cluster.spec import (Cluster, Device, Dtype, Fabric, HostSpec, Link, LinkClass, LinkKind,
                                    NetworkSpec, NodeSpec, PcieTree)
from simulator.cluster.topology import Tier, group_tiers, path
from simulator.errors import SpecError

DEVICE = Device(name="X", peak_tflops={Dtype.BF16: 100.0}, memory_bytes=80 * 10**9, hbm_bw_GBps=2000)
NVSWITCH = Link(kind=LinkKind.NVSWITCH, bw_GBps=100, latency_us=1.0)
NIC = Link(kind=LinkKind.INFINIBAND, bw_GBps=25, latency_us=5.0)
PCIE = Link(kind=LinkKind.PCIE, bw_GBps=16, latency_us=2.0)
UPI = Link(kind=LinkKind.SOCKET, bw_GBps=40, latency_us=3.0)


def switched(nodes=2, nics=4, **net):
    node = NodeSpec(gpus_per_node=4, fabric=Fabric.SWITCHED, intra_link=NVSWITCH, nics_per_node=nics,
                    host=HostSpec(cpu_memory_bytes=10**12, h2d_bw_GBps=20, h2d_latency_us=4.0))
    return Cluster(name="t", nodes=nodes, device=DEVICE, node=node, network=NetworkSpec(link=NIC, **net))


def pcie_tree():
    tree = PcieTree(gpus_per_switch=2, switches_per_socket=1, switch_uplink=PCIE, socket_link=UPI)
    node = NodeSpec(gpus_per_node=4, fabric=Fabric.PCIE_TREE, intra_link=PCIE, pcie_tree=tree)
    return Cluster(name="p", nodes=1, device=DEVICE, node=node)


def test_switched_pair_uses_both_ports_and_one_latency():
    p = path(switched(), 0, 3)
    assert [h.resource for h in p.hops] == [("port_tx", 0, 0), ("port_rx", 0, 3)]
    assert p.link_class is LinkClass.NVLINK
    # 1 MB at 100 GB/s = 10 us, plus 1 us latency.
    assert p.transfer_time_s(1e6) == pytest.approx(11e-6)


def test_inter_node_same_rail_uses_nics_only():
    p = path(switched(), 1, 5)  # local 1 on both nodes -> NIC 1 on both
    assert [h.resource for h in p.hops] == [("nic_tx", 0, 1), ("nic_rx", 1, 1)]
    assert p.transfer_time_s(25e6) == pytest.approx(5e-6 + 1e-3)


def test_rail_mismatch_and_oversubscription_cross_the_leaf_uplink():
    p = path(switched(oversubscription=2.0), 0, 5)  # NIC 0 -> NIC 1: different rails
    assert ("leaf_up", 0, 0) in [h.resource for h in p.hops]
    assert p.bottleneck_Bps == pytest.approx(12.5e9)


def test_no_gpudirect_stages_through_host_at_half_h2d_bandwidth():
    p = path(switched(gpudirect_rdma=False), 1, 5)
    assert p.bottleneck_Bps == pytest.approx(10e9)  # h2d 20 GB/s crossed twice
    assert p.latency_s == pytest.approx((5 + 4 + 4) * 1e-6)


def test_pcie_tree_routes_across_switch_and_socket():
    c = pcie_tree()
    same_switch = path(c, 0, 1)
    assert len(same_switch.hops) == 2
    across = path(c, 0, 2)  # switch 0 (socket 0) -> switch 1 (socket 1)
    kinds = [h.resource[0] for h in across.hops]
    assert kinds == ["port_tx", "switch_up", "socket", "switch_down", "port_rx"]
    assert across.latency_s == pytest.approx(5e-6)


def test_p2p_off_routes_same_switch_pairs_through_the_root():
    from dataclasses import replace
    c = pcie_tree()
    c = replace(c, node=replace(c.node, gpu_peer_to_peer=False))
    assert "switch_up" in [h.resource[0] for h in path(c, 0, 1).hops]


def test_group_tiers_report_intra_and_inter():
    tiers = group_tiers(switched(), list(range(8)))
    assert [t.tier for t in tiers] == [Tier.INTRA_NODE, Tier.INTER_NODE]
    assert tiers[0].bw_Bps == pytest.approx(100e9)
    assert tiers[1].span == 2 and tiers[1].nics_per_node == 4


def test_bad_inputs_name_the_field():
    with pytest.raises(SpecError, match="bw_GBps"):
        Link(kind=LinkKind.PCIE, bw_GBps=-1, latency_us=1)
    with pytest.raises(SpecError, match="inter_node"):
        Cluster(name="x", nodes=2, device=DEVICE,
                node=NodeSpec(gpus_per_node=1, fabric=Fabric.SWITCHED, intra_link=NVSWITCH))
    with pytest.raises(SpecError, match="ranks"):
        path(switched(), 0, 99)
