"""Embedded presets: each loads, round-trips, and its numbers match their primary sources.

Sources are named by their docs/sources.md keys: NVIDIA datasheets, NCCL src/graph/tuning.cc v2.30.7
and topo.h/topo.cc, nccl-tests and NCCL GitHub issues. Tolerances are stated per test.
"""

import re

import pytest

from simulator.cluster.io import load_cluster, save_cluster
from simulator.cluster.nccl import nccl_protocols
from simulator.cluster.presets import load_preset, preset_names, preset_text
from simulator.cluster.spec import CommLibrary, Dtype, Fabric, LinkClass, LinkKind
from simulator.cluster.topology import path
from simulator.errors import SpecError
from simulator.gemm_efficiency import GemmCurve, curve_for_name

EXPECTED = ["dgx-a100", "dgx-b200", "dgx-h100", "dgx-v100", "h100-roce", "hgx-h200", "localhost-cpu",
            "pcie-a100", "pcie-l40s"]
GPU_PRESETS = [n for n in EXPECTED if n != "localhost-cpu"]

# GPU datasheets (dense): (16-bit TFLOP/s, TF32 or None, memory GB, HBM GB/s).
# [src: nvidia-v100-ds, nvidia-a100-ds, nvidia-h100-ds, nvidia-h200-ds, nvidia-dgx-b200-ds, nvidia-l40s-ds]
GPU_TABLE = {
    "dgx-v100": (125, None, 32, 900),       # V100 SXM2: FP16 125, 16/32 GB, 900 GB/s
    "dgx-a100": (312, 156, 80, 2039),       # A100 SXM 80 GB
    "dgx-h100": (989, 495, 80, 3350),       # H100 SXM
    "h100-roce": (989, 495, 80, 3350),      # H100 SXM
    "hgx-h200": (989, 495, 141, 4800),      # H200
    "dgx-b200": (2250, 1100, 180, 8000),    # B200
    "pcie-l40s": (362, 183, 48, 864),       # L40S
    "pcie-a100": (312, 156, 80, 1935),      # A100 PCIe: HBM from the A100 80GB PCIe datasheet (unverified)
}

# Line rates per direction: (intra kind, intra GB/s, NIC kind, NIC GB/s, NICs per node); NIC counts from
# the DGX datasheets. [src: nvidia-nvlink, pcie-spec, ibta-roadmap, ieee-802.3]
LINK_TABLE = {
    "dgx-v100": (LinkKind.NVLINK, 25, LinkKind.INFINIBAND, 12.5, 4),     # NVLink2 per link; EDR; DGX-1 4 NICs
    "dgx-a100": (LinkKind.NVSWITCH, 300, LinkKind.INFINIBAND, 25, 8),    # NVLink3 12×25; HDR; 8 NICs
    "dgx-h100": (LinkKind.NVSWITCH, 450, LinkKind.INFINIBAND, 50, 8),    # NVLink4 18×25; NDR; 8× CX-7
    "hgx-h200": (LinkKind.NVSWITCH, 450, LinkKind.INFINIBAND, 50, 8),
    "dgx-b200": (LinkKind.NVSWITCH, 900, LinkKind.INFINIBAND, 50, 8),    # NVLink5 18×50; 400G
    "h100-roce": (LinkKind.NVSWITCH, 450, LinkKind.ROCE, 50, 8),         # 400 GbE
    "pcie-l40s": (LinkKind.PCIE, 31.5, LinkKind.ROCE, 12.5, 2),          # Gen4 x16; 100 GbE
    "pcie-a100": (LinkKind.PCIE, 31.5, LinkKind.INFINIBAND, 25, 4),      # Gen4 x16; HDR
}

# Achievable fraction of the intra-node line rate (tolerance 0.01 absolute).
INTRA_EFFICIENCY = {
    "dgx-v100": 20 / 25,      # NCCL topo.h SM70_NVLINK_BW 20 GB/s per link [src: nccl-topo]
    "dgx-a100": 230 / 300,    # ~230 GB/s busbw [src: nccl-tests-149]
    "dgx-h100": 370 / 450,    # ~370 GB/s ring busbw [src: nccl-tests-212]
    "hgx-h200": 370 / 450,
    "h100-roce": 370 / 450,
    "dgx-b200": 40.1 / 50,    # NCCL topo.h SM100_NVLINK_BW 40.1 GB/s per link [src: nccl-topo]
    "pcie-l40s": 24 / 31.5,   # NCCL topo.cc Gen4 x16: width·rate/80 = 24 GB/s [src: nccl-topo]
    "pcie-a100": 24 / 31.5,
}


def test_registry_lists_every_preset():
    assert preset_names() == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_preset_loads_with_one_node_by_default(name):
    c = load_preset(name)
    assert c.name == name and c.nodes == 1 and c.description and c.source


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_gpu_numbers_match_datasheets(name):
    half, tf32, mem_gb, hbm = GPU_TABLE[name]
    d = load_preset(name).device
    assert d.peak_tflops[Dtype.FP16] == half
    if tf32 is not None:
        assert d.peak_tflops[Dtype.BF16] == half and d.peak_tflops[Dtype.TF32] == tf32
    else:
        assert Dtype.BF16 not in d.peak_tflops  # V100 has no bf16: asking for it must fail, not guess
    assert d.memory_bytes == mem_gb * 10**9 and d.hbm_bw_GBps == hbm


# The published matmul measurement each preset's device is timed with (MAMF table [src: bekman-mle]);
# NONE where the table has no row for the GPU.
GEMM_CURVE = {
    "dgx-v100": GemmCurve.NONE, "dgx-a100": GemmCurve.A100_SXM, "dgx-h100": GemmCurve.H100_SXM,
    "h100-roce": GemmCurve.H100_SXM, "hgx-h200": GemmCurve.H200, "dgx-b200": GemmCurve.B200,
    "pcie-l40s": GemmCurve.NONE, "pcie-a100": GemmCurve.A100_PCIE, "localhost-cpu": GemmCurve.NONE,
}


@pytest.mark.parametrize("name", EXPECTED)
def test_every_preset_names_its_gemm_curve_and_the_name_rule_agrees(name):
    """The field is explicit in every preset; the name fallback (for older user files) picks the same curve."""
    d = load_preset(name).device
    assert d.gemm_curve is GEMM_CURVE[name]
    assert curve_for_name(d.name) is GEMM_CURVE[name]


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_link_numbers_match_line_rates(name):
    intra_kind, intra_bw, nic_kind, nic_bw, nics = LINK_TABLE[name]
    c = load_preset(name)
    assert (c.node.intra_link.kind, c.node.intra_link.bw_GBps) == (intra_kind, intra_bw)
    assert (c.network.link.kind, c.network.link.bw_GBps, c.node.nics_per_node) == (nic_kind, nic_bw, nics)
    assert c.node.intra_link.efficiency == pytest.approx(INTRA_EFFICIENCY[name], abs=0.01)


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "dgx-v100", "pcie-a100"])
def test_infiniband_efficiency_is_nccls_net_model(name):
    # 0.96 of line rate: 12 / 24 / 48 GB/s for EDR / HDR / NDR. EDR: topo.h NET_BW 12 ("100Gbit") [src: nccl-topo];
    # HDR: 8 × HDR busbw ≈ 192 GB/s [src: nccl-1576]; NDR: CX-7 46-49 GB/s [src: nccl-tests-290, nccl-tests-267].
    net = load_preset(name).network.link
    assert net.bw_GBps * net.efficiency == pytest.approx(net.bw_GBps * 0.96, rel=1e-9)
    assert net.bw_GBps * net.efficiency == pytest.approx({12.5: 12, 25: 24, 50: 48}[net.bw_GBps], abs=0.01)


def test_roce_400g_efficiency_from_measured_busbw():
    # H100 8 × 400G RoCE, > 2 nodes, all-reduce busbw ≈ 320 GB/s over 8 NICs of 50 GB/s [src: nccl-1221].
    c = load_preset("h100-roce")
    assert c.node.nics_per_node * c.network.link.bw_GBps * c.network.link.efficiency == pytest.approx(320, rel=0.01)


@pytest.mark.parametrize("name, expected", [("dgx-h100", True), ("hgx-h200", True), ("dgx-b200", True),
                                            ("dgx-a100", False), ("dgx-v100", False), ("pcie-a100", False)])
def test_in_switch_reduction_only_from_nvswitch_3(name, expected):
    assert load_preset(name).in_switch_reduction is expected


def test_dgx_v100_hybrid_cube_mesh():
    c = load_preset("dgx-v100")
    assert c.node.fabric is Fabric.NVLINK_MESH
    per_gpu = [sum(k for a, b, k in c.node.nvlink_pairs if g in (a, b)) for g in range(8)]
    assert per_gpu == [6] * 8  # NVLink 2: 6 links per V100, 6 × 25 = 150 GB/s [src: nvidia-v100-ds]
    pairs = {frozenset((a, b)) for a, b, _ in c.node.nvlink_pairs}
    assert len(pairs) == len(c.node.nvlink_pairs) == 16
    # Doubled pair 0-3 gets 2 × 25 × 0.8 = 40 GB/s; 0-5 has no NVLink and falls back to PCIe across sockets.
    assert path(c, 0, 3).bottleneck_Bps == pytest.approx(40e9)
    fallback = path(c, 0, 5)
    assert fallback.link_class is LinkClass.PCIE
    assert [h.resource[0] for h in fallback.hops] == ["port_tx", "switch_up", "socket", "switch_down", "port_rx"]


def test_pcie_presets_use_a_tree():
    for name in ("pcie-l40s", "pcie-a100"):
        c = load_preset(name)
        assert c.node.fabric is Fabric.PCIE_TREE and c.node.nvlink_pairs == ()
        assert path(c, 0, 7).link_class is LinkClass.PCIE


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_gpu_presets_use_nccls_single_table(name):
    comm = load_preset(name).comm
    assert comm.library is CommLibrary.NCCL and comm.protocols == nccl_protocols()


def test_nccl_table_reproduces_tuning_cc_worked_example():
    # NCCL tuning.cc [src: nccl-tuning]: 8 GPUs on one NVLink node, ring all-reduce latency = base + 2(p-1) × hop:
    # LL 6.6 + 14 × 0.6 = 15.0 µs; Simple 8.4 + 14 × 3.4 = 56 µs (exact to float rounding).
    protocols = {p.name: p for p in load_preset("dgx-h100").comm.protocols}
    steps = 2 * (8 - 1)
    ll, simple = protocols["LL"], protocols["Simple"]
    assert ll.base_latency_us["ring"] + steps * ll.hop_latency("ring", LinkClass.NVLINK) == pytest.approx(15.0)
    assert simple.base_latency_us["ring"] + steps * simple.hop_latency("ring", LinkClass.NVLINK) == pytest.approx(56.0)
    # Tree hop latencies differ from the ring's (tuning.cc hwLat): network LL 5.0 vs 2.7, LL128 8.5 vs 4.0.
    assert ll.hop_latency("tree", LinkClass.NET) == 5.0 and ll.hop_latency("ring", LinkClass.NET) == 2.7
    assert protocols["LL128"].hop_latency("tree", LinkClass.NET) == 8.5
    assert simple.hop_latency("nvls", LinkClass.NVLINK) == 25 and simple.hop_latency("nvls", LinkClass.NET) == 18
    assert [p.bw_factor for p in protocols.values()] == [0.5, 0.92, 1.0]


@pytest.mark.parametrize("name", EXPECTED)
def test_round_trip_yaml_and_json(name, tmp_path):
    c = load_preset(name, nodes=None)
    for suffix in ("yaml", "json"):
        assert load_cluster(str(save_cluster(c, tmp_path / f"{name}.{suffix}"))) == c


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_node_count_is_a_parameter(name):
    c = load_preset(name, nodes=16)
    assert c.nodes == 16 and c.world_size == 16 * c.node.gpus_per_node
    assert load_cluster(name, nodes=2) == load_preset(name, nodes=2)


def test_localhost_cpu_is_single_node_gloo_with_placeholders_said_plainly():
    c = load_preset("localhost-cpu")
    assert c.comm.library is CommLibrary.GLOO and c.node.intra_link.kind is LinkKind.LOOPBACK
    assert c.node.fabric is Fabric.SWITCHED and c.network is None
    assert "PLACEHOLDER" in c.description and "trainplan calibrate" in c.description
    assert "PLACEHOLDER NUMBERS" in preset_text("localhost-cpu")
    with pytest.raises(SpecError, match="inter_node"):
        load_preset("localhost-cpu", nodes=2)


_NUMBER_LINE = re.compile(r"^\s*([A-Za-z_0-9]+):\s*-?[0-9][0-9.]*\s*(#.*)?$")


@pytest.mark.parametrize("name", EXPECTED)
def test_every_number_in_a_preset_has_a_comment(name):
    """Project rule: every number carries its source (or says it is an assumption) in a YAML comment."""
    bare = [line for line in preset_text(name).splitlines()
            if (m := _NUMBER_LINE.match(line)) and not m.group(2)]
    assert bare == []


def test_unknown_preset_message_lists_all_names():
    with pytest.raises(SpecError) as err:
        load_preset("dgx-h10")
    assert str(err.value).startswith("cluster: unknown preset 'dgx-h10'; known: " + ", ".join(EXPECTED))
