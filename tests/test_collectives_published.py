"""The collective models against published all-reduce measurements (nccl-tests), on the embedded presets.

Every expected figure is a measured bus bandwidth from an nccl-tests or NCCL GitHub issue named in
its row (docs/sources.md keys nccl-tests-N and nccl-N). Tolerance: 15 % of the measured figure at
8 GiB (large enough that latency is negligible); the presets' efficiency factors come from
single-node figures, so multi-node rows are real checks of the topology model (channels per NIC,
rails), not of a fitted constant. The RoCE row runs on 4 nodes: its source measured "> 2 nodes"; on
2 nodes NCCL (and our ``auto``) take NVLSTree, a different regime (test below).
"""

from dataclasses import replace

import pytest

from simulator.cluster.io import load_cluster
from simulator.collectives.base import Op
from simulator.collectives.registry import estimate

TOLERANCE = 0.15
SIZE = 8 * 2**30


def busbw(cluster, ranks, algorithm="auto"):
    return estimate(cluster, list(range(ranks)), Op.ALL_REDUCE, SIZE, algorithm).busbw_GBps


@pytest.mark.parametrize("preset, nodes, algorithm, measured_GBps, source", [
    ("dgx-a100", 1, "ring", 230.0, "nccl-tests issue 149/175: ~230-232.5 GB/s, 8x A100 NVLink3"),
    ("dgx-h100", 1, "ring", 370.0, "nccl-tests issue 212: ~370 GB/s ring, 8x H100 NVLink4"),
    ("dgx-h100", 1, "nvls", 480.0, "nccl issue 1455: NVLS all-reduce 480 GB/s at 8 GPUs"),
    ("dgx-a100", 2, "auto", 192.0, "nccl issue 1576: DGX A100 with 8x HDR ~192 GB/s"),
    ("dgx-h100", 4, "auto", 365.8, "nccl-tests issue 309: H100 8x NDR, 4 nodes 365.8 GB/s"),
    ("h100-roce", 4, "auto", 320.0, "nccl issue 1221: H100 8x 400G RoCE, >2 nodes ~320 GB/s"),
])
def test_busbw_matches_published_measurement(preset, nodes, algorithm, measured_GBps, source):
    cluster = load_cluster(preset, nodes=nodes)
    assert busbw(cluster, cluster.world_size, algorithm) == pytest.approx(measured_GBps, rel=TOLERANCE), source


def test_four_nics_per_node_halve_the_inter_node_bandwidth():
    """2 nodes x 8 A100 with 4x HDR: 86-91 GB/s measured (nccl-tests issues 175, 100).

    Same DGX A100 preset with 4 NICs per node instead of 8: the ring gets 4 channels, each NIC
    carrying one, so the inter-node part halves.
    """
    base = load_cluster("dgx-a100", nodes=2)
    four = replace(base, node=replace(base.node, nics_per_node=4))
    assert busbw(four, 16) == pytest.approx(88.5, rel=TOLERANCE)


def test_two_h100_nodes_reach_nvlstree_bandwidth():
    """H100 8x NDR, 2 nodes: 470 GB/s with NVLSTree (nccl-tests issue 309).

    nvls_tree.py: NVLS inside the node (n·(1 + 1/8) over 450·0.82·0.85 GB/s per port) and the
    network (n/8 per NIC at 48 GB/s) run at once; the switch is slower: algbw 279 GB/s, busbw
    279·2·15/16 = 523 GB/s (+11 %). ``auto`` picks it, as NCCL does at this size.
    """
    cluster = load_cluster("dgx-h100", nodes=2)
    assert estimate(cluster, list(range(16)), Op.ALL_REDUCE, SIZE).algorithm == "nvls_tree"
    assert busbw(cluster, 16) == pytest.approx(470.0, rel=TOLERANCE)


SMALL_TOLERANCE = 0.15
"""Latency-bound sizes: 15 % of the measured time, as for bandwidth (the figures are NCCL tuning
table latencies, not fitted; the rows say how far each lands)."""


@pytest.mark.parametrize("nbytes", [4, 128, 1024])
def test_two_node_nvlstree_small_message_latency(nbytes):
    """2 nodes x 8 H20 (NVLink 4, NVSwitch 3) over NDR, NCCL 2.21.5, NCCL_ALGO=NVLSTree: 46.3-47.8 µs
    out-of-place from 4 B to 1 KB (nccl issue 1244). The dgx-h100 preset has the same NVLink and
    NDR latency classes; at these sizes the bandwidths do not matter. Model: NCCL's NVLS-Tree
    latency intraLat + 2·log2(2)·interLat = 23 + 2·14 = 51 µs (2.20-era tuning.cc), +8 % on 47."""
    cluster = load_cluster("dgx-h100", nodes=2)
    est = estimate(cluster, list(range(16)), Op.ALL_REDUCE, nbytes, "nvls_tree")
    assert est.time_s * 1e6 == pytest.approx(47.0, rel=SMALL_TOLERANCE)


def test_two_node_small_messages_auto_is_faster_than_forced_nvlstree():
    """Where NCCL is free to choose (no NCCL_ALGO), small all-reduces do not take NVLSTree: our
    ``auto`` picks the tree with LL (6.8 + 2·(7·0.6 + 5.0) = 25.2 µs at 4 B), below the 46 µs the
    forced NVLSTree measured (nccl issue 1244); nccl issue 1362: for small sizes ring/tree LL is
    faster than NVLSTree."""
    cluster = load_cluster("dgx-h100", nodes=2)
    est = estimate(cluster, list(range(16)), Op.ALL_REDUCE, 4)
    assert (est.algorithm, est.protocol) == ("tree", "LL")
    assert est.time_s * 1e6 == pytest.approx(25.2, rel=1e-3)
    assert est.time_s * 1e6 < 46.0


@pytest.mark.xfail(strict=True, reason="NCCL's tuning model charges one NVLS call 23-25 µs (tuning.cc: "
                   "latency = intraLat, hwLat NVLS row), our model now 25 µs (was 2 x 25); measured with "
                   "CUDA graphs it is ~6 µs at 2 GPUs: no tuning.cc term gives that")
def test_one_node_nvls_small_message_latency():
    """2 H100 in one HGX node, NCCL 2.20.5, NCCL_ALGO=NVLSTree (NVLS inside one node), CUDA graphs:
    about 6 µs at 128 B (nccl issue 1259). Not met: the NVLS latency we have is NCCL's tuner's whole-call
    figure, 25 µs (tuning.cc ``latencies[coll][NVLS][p] = intraLat``; it steers small messages away
    from NVLS), not a measured one: +317 %. Searched for a sourced replacement (2026-11-24): the NVLink NVLS
    ``hwLat`` row of the stored tuning.cc copies is 0 (before NVLS had a latency), 23 or 25 µs, never a
    measured few µs; NCCL's docs and issues (1259, 1362, 1455) give no device-side NVLS latency; NCCL's
    later low-latency symmetric-memory kernels are not the 2.20.5 kernel measured here. So it stays xfail."""
    cluster = load_cluster("dgx-h100", nodes=1)
    est = estimate(cluster, [0, 1], Op.ALL_REDUCE, 128, "nvls")
    assert est.time_s * 1e6 == pytest.approx(6.0, rel=SMALL_TOLERANCE)


def test_one_node_nvls_latency_is_nccls_tuner_figure():
    """What the model does give at 128 B on 2 H100s: NCCL's tuner latency for one NVLS call, charged once
    (tuning.cc ``latencies[coll][NVLS][Simple] = intraLat`` = hwLat NVLink/NVLS 25 µs, baseLat 0), plus
    128·(1 + 1/2) B over 450·0.82·0.85 GB/s: 25.0006 µs. Before, the hop latency was charged twice (50 µs)."""
    cluster = load_cluster("dgx-h100", nodes=1)
    est = estimate(cluster, [0, 1], Op.ALL_REDUCE, 128, "nvls")
    assert est.time_s * 1e6 == pytest.approx(25.0 + 128 * 1.5 / (450e9 * 0.82 * 0.85) * 1e6, rel=1e-6)
