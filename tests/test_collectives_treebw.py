"""NCCL's tree all-reduce bandwidth refinements (``ncclTopoTuneModel`` in ``src/graph/tuning.cc``)
[src: nccl-tree-bw]: the tree reaches ``busBw × .92`` under every protocol, then ``× 1/3.8`` under LL
(capped at ``llMaxBw``) and ``× 120/128`` under LL128 across nodes; ``ratio = .5`` converts bus to
algorithm bandwidth. Expected numbers are those constants; tolerance 1e-9 relative (exact arithmetic),
and a hypothesis property that time stays monotone in bytes under every protocol.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_collectives_helpers import switched
from presets_once import cluster as preset_cluster
from simulator.cluster.io import load_cluster
from simulator.cluster.nccl import LL_MAX_BW, nccl_protocols
from simulator.cluster.spec import CommLibrary, CommProfile, LinkClass, Protocol
from simulator.collectives.base import Op
from simulator.collectives.cost import Env, Group
from simulator.collectives.registry import estimate_protocols, get_algorithm

NCCL = {p.name: p for p in nccl_protocols()}


@pytest.mark.parametrize("name, efficiency", [("LL", 0.92 / 3.8), ("LL128", 0.92 * 120 / 128), ("Simple", 0.92)])
def test_nccl_tree_efficiency_per_protocol(name, efficiency):
    protocol = NCCL[name]
    assert protocol.efficiency("tree") == pytest.approx(efficiency, rel=1e-12)
    assert protocol.bw_ratio("tree") == pytest.approx(0.5 * efficiency, rel=1e-12)
    assert protocol.bw_ratio("ring") == protocol.bw_factor  # the ring keeps the generic factor


def _zero_latency(efficiency: float | None) -> Protocol:
    return Protocol(name="S", base_latency_us={"tree": 0.0}, hop_latency_us={c: 0.0 for c in LinkClass},
                    bw_factor=1.0, algo_efficiency={} if efficiency is None else {"tree": efficiency})


def test_tree_time_scales_with_one_over_the_efficiency():
    # No latency anywhere: the tree's time is its bandwidth terms, each ∝ 1 / (link bw × ratio), so an
    # efficiency of 0.92 makes every chunk count's time, and their minimum, exactly 1/0.92 longer.
    times = []
    for eff in (None, 0.92):
        protocol = _zero_latency(eff)
        cluster = switched(nodes=4, gpus=4, comm=CommProfile(library=CommLibrary.NCCL, protocols=(protocol,)))
        times.append(get_algorithm("tree").time_s(Group(cluster, tuple(range(16))), Op.ALL_REDUCE, 64 << 20,
                                                  protocol))
    assert times[1] == pytest.approx(times[0] / 0.92, rel=1e-9)


def test_tree_ll_cap_applies_to_its_own_fraction():
    # 2 nodes × 8 GPUs, NVSwitch 100 GB/s, 8 NICs of 25 GB/s: B_ring = min(100, 8 × 25) = 100 GB/s; other
    # host: llMaxBw 39.0 GB/s. NCCL: tree LL busBw = min(100 × 0.92/3.8, 39.0) = 24.2 GB/s, × 0.5: the
    # fraction binds (before: the generic LL factor, min(100 × 0.5, 39.0) = 39.0 GB/s, ratio 0.195).
    cluster = switched(nodes=2, gpus=8, comm=CommProfile(library=CommLibrary.NCCL, protocols=nccl_protocols()))
    group = Group(cluster, tuple(range(16)))
    assert group.ring_bus_bw_Bps == pytest.approx(100e9, rel=1e-12)
    assert Env(cluster, NCCL["LL"], family="tree", group=group).bw_ratio == pytest.approx(0.5 * 0.92 / 3.8, rel=1e-9)
    # A 20 GB/s cap binds instead: 0.5 × 20/100, compared with the tree's own fraction (24.2 GB/s).
    tight = dataclasses.replace(NCCL["LL"], bus_bw_cap=dataclasses.replace(
        LL_MAX_BW, two_nodes_GBps={k: 20.0 for k in LL_MAX_BW.two_nodes_GBps}))
    assert Env(cluster, tight, family="tree", group=group).bw_ratio == pytest.approx(0.5 * 20 / 100, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(nbytes=st.integers(min_value=1, max_value=1 << 30), extra=st.integers(min_value=1, max_value=1 << 24),
       nodes=st.sampled_from([1, 2, 4]))
def test_tree_and_ring_time_monotone_in_bytes_under_every_protocol(nbytes, extra, nodes):
    cluster = preset_cluster("dgx-h100", nodes)
    ranks = list(range(cluster.world_size))
    for algorithm in ("tree", "ring"):
        small = {e.protocol: e.time_s for e in estimate_protocols(cluster, ranks, Op.ALL_REDUCE, nbytes, algorithm)}
        large = {e.protocol: e.time_s for e in
                 estimate_protocols(cluster, ranks, Op.ALL_REDUCE, nbytes + extra, algorithm)}
        for protocol, t in small.items():
            assert large[protocol] >= t * (1 - 1e-12), (algorithm, protocol, nbytes, extra)


def test_algo_efficiency_round_trips_and_is_checked():
    from simulator.cluster.io import cluster_from_dict, cluster_to_dict
    from simulator.errors import SpecError
    cluster = load_cluster("dgx-h100", nodes=2)
    d = cluster_to_dict(cluster)
    assert cluster_from_dict(d).comm == cluster.comm
    with pytest.raises(SpecError, match="algo_efficiency"):
        dataclasses.replace(NCCL["LL"], algo_efficiency={"tree": 1.5})
