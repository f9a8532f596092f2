"""Cluster files: the minimal user form loads as given, files round-trip, bad input names its field."""

import copy
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.io import cluster_from_dict, cluster_to_dict, load_cluster, save_cluster
from simulator.cluster.nccl import nccl_protocols
from simulator.cluster.spec import CommLibrary, Dtype, Fabric, LinkClass, LinkKind
from simulator.errors import SpecError
from simulator.gemm_efficiency import GemmCurve, efficiency_for

MINIMAL_YAML = (Path(__file__).parent / "data" / "minimal_cluster.yaml").read_text()
"""The issue's minimal cluster file, verbatim (it must load)."""

MINIMAL = yaml.safe_load(MINIMAL_YAML)

PCIE_NODE = {
    "kind": "pcie", "bw_GBps": 31.5, "latency_us": 1.0,
    "pcie_tree": {"gpus_per_switch": 2, "switches_per_socket": 2,
                  "switch_uplink": {"bw_GBps": 31.5, "latency_us": 1.0},
                  "socket_link": {"bw_GBps": 62, "latency_us": 1.0}},
}
PCIE_TREE = PCIE_NODE["pcie_tree"]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def with_change(path: str, value, *more):
    """MINIMAL with the dotted ``path`` set to ``value`` (or removed when value is DELETE), and as
    many further (path, value) pairs as ``more`` holds."""
    d = copy.deepcopy(MINIMAL)
    changes = [(path, value)] + list(zip(more[::2], more[1::2]))
    for path, value in changes:
        keys = path.split(".")
        target = d
        for key in keys[:-1]:
            target = target[key]
        if value is DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return d


DELETE = object()


def test_minimal_yaml_loads_as_given(tmp_path):
    c = load_cluster(write(tmp_path, "my.yaml", MINIMAL_YAML))
    assert (c.name, c.nodes, c.node.gpus_per_node, c.world_size) == ("my-cluster", 4, 8, 32)
    assert c.device.peak_tflops == {Dtype.BF16: 989, Dtype.FP32: 67}
    assert c.device.memory_bytes == 80 * 10**9  # decimal GB
    assert c.node.fabric is Fabric.SWITCHED  # inferred from kind nvswitch
    assert c.node.intra_link.kind is LinkKind.NVSWITCH
    assert c.node.intra_link.bw_Bps == 450e9  # taken as given: efficiency 1.0
    assert c.network.link.bw_Bps == 50e9 and c.node.nics_per_node == 8
    assert c.comm.library is CommLibrary.IDEAL and c.comm.protocols == () and c.comm.call_latency_us == 0
    assert c.node.host is None and not c.in_switch_reduction


def test_equivalent_json_loads_equal(tmp_path):
    yml = load_cluster(write(tmp_path, "a.yml", MINIMAL_YAML))
    js = load_cluster(write(tmp_path, "a.json", json.dumps(MINIMAL)))
    assert js == yml


def test_nodes_override(tmp_path):
    path = write(tmp_path, "my.yaml", MINIMAL_YAML)
    assert load_cluster(path, nodes=16).world_size == 128
    assert load_cluster(path, nodes=None).nodes == 4


def test_naming_nccl_gives_the_table_and_explicit_empty_protocols_stay_empty():
    assert cluster_from_dict({**MINIMAL, "comm": {"library": "nccl"}}).comm.protocols == nccl_protocols()
    explicit = cluster_from_dict({**MINIMAL, "comm": {"library": "nccl", "protocols": []}})
    assert explicit.comm.protocols == ()


def test_pcie_kind_infers_the_tree_fabric():
    c = cluster_from_dict({**MINIMAL, "intra_node": PCIE_NODE})
    assert c.node.fabric is Fabric.PCIE_TREE
    assert c.node.pcie_tree.socket_link.kind is LinkKind.SOCKET  # default kind of a socket link
    assert c.node.pcie_tree.switch_uplink.kind is LinkKind.PCIE


def test_round_trip_of_the_minimal_form_in_both_formats(tmp_path):
    c = cluster_from_dict(MINIMAL)
    for name in ("c.yaml", "c.json"):
        assert load_cluster(str(save_cluster(c, tmp_path / name))) == c


_pos = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(bw=_pos, lat=st.floats(min_value=0, max_value=100), eff=st.floats(min_value=0.01, max_value=1.0),
       mem=st.integers(min_value=1, max_value=10**12), nodes=st.integers(min_value=1, max_value=64),
       nic_bw=_pos, protocol_lat=st.floats(min_value=0, max_value=50), factor=st.floats(min_value=0.01, max_value=1))
def test_round_trip_property(bw, lat, eff, mem, nodes, nic_bw, protocol_lat, factor):
    """Any valid cluster survives to_dict → YAML text → from_dict unchanged (floats included)."""
    d = copy.deepcopy(MINIMAL)
    d["nodes"] = nodes
    d["intra_node"].update(bw_GBps=bw, latency_us=lat, efficiency=eff)
    d["inter_node"]["bw_GBps"] = nic_bw
    d["device"]["memory_GB"] = mem / 1e9
    d["comm"] = {"library": "mpi", "call_latency_us": protocol_lat, "protocols": [
        {"name": "P", "bw_factor": factor, "base_latency_us": {"ring": protocol_lat},
         "hop_latency_us": {"nvlink": lat, "pcie": lat, "net": protocol_lat},
         "algo_hop_latency_us": {"tree": {"net": lat}}}]}
    c = cluster_from_dict(d)
    assert c.device.memory_bytes == mem
    assert c.comm.protocols[0].hop_latency("tree", LinkClass.NET) == lat
    assert cluster_from_dict(yaml.safe_load(yaml.safe_dump(cluster_to_dict(c)))) == c


BAD_DICTS = [
    (with_change("intra_node.bw_GBps", -3), "intra_node.bw_GBps: must be a positive number, got -3"),
    (with_change("device.memory_GB", DELETE), "device: missing key 'memory_GB'"),
    (with_change("name", DELETE), "cluster: missing key 'name'"),
    (with_change("device.memroy_GB", 80), "device: unknown key 'memroy_GB'; valid keys: name, peak_tflops,"),
    (with_change("nodez", 2), "cluster: unknown key 'nodez'; valid keys: name,"),
    (with_change("intra_node.kind", "nvlinc"), "intra_node.kind: unknown value 'nvlinc'; valid: nvlink,"),
    (with_change("intra_node.efficiency", 1.2), "intra_node.efficiency: must be a number in (0, 1]"),
    (with_change("inter_node.latency_us", "5us"), "inter_node.latency_us: must be a non-negative number"),
    (with_change("inter_node.nics_per_node", 0), "inter_node.nics_per_node: must be a positive integer"),
    (with_change("inter_node.oversubscription", 0.5), "inter_node.oversubscription: must be >= 1"),
    (with_change("inter_node.rail_optimized", "yes"), "inter_node.rail_optimized: must be true or false"),
    (with_change("gpus_per_node", 8.5), "gpus_per_node: must be a positive integer, got 8.5"),
    (with_change("nodes", 0), "nodes: must be a positive integer, got 0"),
    (with_change("inter_node", DELETE), "inter_node: a cluster of 4 nodes needs an inter_node section"),
    (with_change("device.peak_tflops", {"bf61": 1}), "device.peak_tflops: unknown key 'bf61'"),
    (with_change("device.peak_tflops", {}), "device.peak_tflops: give at least one format"),
    (with_change("device.peak_tflops.bf16", True), "device.peak_tflops.bf16: must be a positive number"),
    (with_change("device.hbm_bw_GBps", None), "device.hbm_bw_GBps: must be a positive number, got nothing"),
    (with_change("device", [1, 2]), "device: must be a mapping"),
    (with_change("intra_node.kind", "infiniband"), "intra_node.fabric: cannot infer the fabric"),
    (with_change("intra_node.fabric", "pcie_tree"), "intra_node.pcie_tree: fabric pcie_tree needs a pcie_tree"),
    (with_change("intra_node.nvlink_pairs", [[0, 1]]), "intra_node.nvlink_pairs[0]: must be [gpu_a"),
    (with_change("intra_node.nvlink_pairs", [[0, 9, 1]]), "intra_node.nvlink_pairs: pair (0, 9)"),
    (with_change("intra_node.pcie_tree", {"gpus_per_switch": 2}), "intra_node.pcie_tree: missing key"),
    (with_change("host", {"cpu_memory_GB": 1000, "h2d_bw_GBps": 24}), "host: missing key 'h2d_latency_us'"),
    (with_change("host", {"cpu_memory_GB": 1, "h2d_bw_GBps": 1, "h2d_latency_us": 1, "nvme_GB": -1}),
     "host.nvme_GB: must be a non-negative number"),
    (with_change("comm", {"library": "nccl2"}), "comm.library: unknown value 'nccl2'; valid: ideal, nccl,"),
    (with_change("comm", {"protocols": [{"name": "LL", "bw_factor": 0.5, "base_latency_us": {"ring": 1},
                                         "hop_latency_us": {"nvlink": 1}}]}),
     "comm.protocols[0].hop_latency_us: give every link class; missing net, pcie"),
    (with_change("comm", {"protocols": [{"name": "LL", "bw_factor": 0.5, "base_latency_us": {"rnig": 1},
                                         "hop_latency_us": {}}]}),
     "comm.protocols[0].base_latency_us: unknown key 'rnig'; valid keys: ring, tree, nvls"),
    (with_change("in_switch_reduction", 1), "in_switch_reduction: must be true or false"),
    # Cross-field rules (simulator/cluster/_crossfield.py; issue 15 §3: nics_per_node 64 on 8 GPUs was accepted).
    (with_change("inter_node.nics_per_node", 64), "inter_node.nics_per_node: 64 NICs on a node of 8 GPUs: the model "
                                                  "routes each GPU through one NIC, so give at most 8"),
    (with_change("inter_node.nics_per_node", 9), "inter_node.nics_per_node: 9 NICs on a node of 8 GPUs"),
    (with_change("intra_node.nvlink_pairs", [[0, 1, 2]]), "intra_node.nvlink_pairs: only an nvlink_mesh fabric uses"),
    (with_change("in_switch_reduction", True, "intra_node.kind", "pcie", "intra_node.pcie_tree", PCIE_TREE),
     "in_switch_reduction: in-switch reduction (NVLS) needs an NVSwitch node, this node's link is pcie"),
    (with_change("intra_node.kind", "pcie", "intra_node.pcie_tree", dict(PCIE_TREE, gpus_per_switch=16)),
     "intra_node.pcie_tree.gpus_per_switch: 16 GPUs under one PCIe switch on a node of 8 GPUs: give at most 8"),
    (with_change("intra_node.kind", "pcie", "intra_node.pcie_tree", dict(PCIE_TREE, switches_per_socket=8)),
     "intra_node.pcie_tree.switches_per_socket: 8 PCIe switches per socket, but 8 GPUs at 2 per switch fill only 4"),
]


@pytest.mark.parametrize("data, message", BAD_DICTS, ids=[m[:40] for _, m in BAD_DICTS])
def test_bad_input_names_the_field(data, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        cluster_from_dict(data)


def test_field_attribute_is_the_dotted_path():
    with pytest.raises(SpecError) as err:
        cluster_from_dict(with_change("intra_node.bw_GBps", -3))
    assert err.value.field == "intra_node.bw_GBps"


def test_bad_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path, "broken.yaml", "name: x\nnodes: 1\ndevice: {name: X, memory_GB: 80\n")
    with pytest.raises(SpecError, match=r"broken\.yaml: invalid YAML at line \d+") as err:
        load_cluster(path)
    assert err.value.field == path


def test_yaml_key_given_twice_is_an_error(tmp_path):
    path = write(tmp_path, "dup.yaml", MINIMAL_YAML + "nodes: 2\n")
    with pytest.raises(SpecError, match=r"dup\.yaml: invalid YAML at line 7.*'nodes' given twice \(first at line 2\)"):
        load_cluster(path)


def test_bad_json_names_file_and_line(tmp_path):
    path = write(tmp_path, "broken.json", '{\n  "name": "x",\n  "nodes": 1,,\n}\n')
    with pytest.raises(SpecError, match=r"broken\.json: invalid JSON at line 3"):
        load_cluster(path)


def test_missing_file_names_the_path(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match=f"{missing}: no such file"):
        load_cluster(missing)


def test_file_must_hold_a_mapping_and_have_a_known_suffix(tmp_path):
    with pytest.raises(SpecError, match="must hold one mapping"):
        load_cluster(write(tmp_path, "list.yaml", "- 1\n- 2\n"))
    with pytest.raises(SpecError, match=r"must end in \.yaml, \.yml, \.json"):
        load_cluster(write(tmp_path, "c.txt", MINIMAL_YAML))
    with pytest.raises(SpecError, match=r"must end in"):
        save_cluster(cluster_from_dict(MINIMAL), tmp_path / "c.toml")


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(SpecError, match=r"unknown preset 'dgx-h10'; known: dgx-a100, dgx-b200, dgx-h100"):
        load_cluster("dgx-h10")


def test_nodes_override_must_be_positive(tmp_path):
    with pytest.raises(SpecError, match="nodes: must be a positive integer, got -1"):
        load_cluster(write(tmp_path, "my.yaml", MINIMAL_YAML), nodes=-1)


def test_yaml_exponent_without_dot_gets_a_hint(tmp_path):
    path = write(tmp_path, "e.yaml", MINIMAL_YAML.replace("hbm_bw_GBps: 3350", "hbm_bw_GBps: 3e3"))
    with pytest.raises(SpecError, match=re.escape("device.hbm_bw_GBps: must be a positive number, got '3e3' "
                                                  "(YAML reads this as text; write it with a dot, e.g. 3.0e+03)")):
        load_cluster(path)


def test_device_gemm_efficiency_round_trips_through_a_cluster_file(tmp_path):
    """A measured GEMM curve in ``device.gemm_efficiency`` loads, saves and loads back equal."""
    path = tmp_path / "c.yaml"
    data = {"name": "c", "nodes": 1, "gpus_per_node": 2,
            "device": {"name": "cpu", "peak_tflops": {"fp32": 1.0}, "memory_GB": 16, "hbm_bw_GBps": 20,
                       "gemm_efficiency": {"points": [[1.0e6, 0.2], [1.0e9, 0.6]], "source": "measured"}},
            "intra_node": {"kind": "loopback", "bw_GBps": 2.0, "latency_us": 30.0}}
    path.write_text(yaml.safe_dump(data))
    cluster = load_cluster(str(path))
    assert cluster.device.gemm_efficiency.efficiency(1.0e9) == 0.6
    save_cluster(cluster, tmp_path / "again.yaml")
    assert load_cluster(str(tmp_path / "again.yaml")) == cluster


def test_malformed_gemm_efficiency_names_the_field(tmp_path):
    data = {"name": "c", "gpus_per_node": 1,
            "device": {"name": "cpu", "peak_tflops": {"fp32": 1.0}, "memory_GB": 16, "hbm_bw_GBps": 20,
                       "gemm_efficiency": {"points": [[1.0e6, 1.5]]}},
            "intra_node": {"kind": "loopback", "bw_GBps": 2.0, "latency_us": 30.0}}
    with pytest.raises(SpecError, match="gemm_efficiency"):
        cluster_from_dict(data)


def test_gemm_curve_names_the_published_measurement_and_round_trips(tmp_path):
    """``device.gemm_curve`` picks the default curve explicitly; a wrong value is one line listing the valid ones."""
    data = copy.deepcopy(MINIMAL)
    data["device"]["name"] = "my-accelerator"          # no name rule matches: the field alone decides
    data["device"]["gemm_curve"] = "h100-sxm"
    cluster = cluster_from_dict(data)
    assert cluster.device.gemm_curve is GemmCurve.H100_SXM
    # plateau 794.5 / 989 [src: bekman-mle] times 10000/10004, the last sample (t = 10 ms, t0 = 4 us)
    assert efficiency_for(cluster.device).plateau == pytest.approx(794.5 / 989 * 10000 / 10004, rel=1e-12)
    save_cluster(cluster, tmp_path / "again.yaml")
    assert load_cluster(str(tmp_path / "again.yaml")) == cluster
    data["device"]["gemm_curve"] = "h100"
    with pytest.raises(SpecError) as err:
        cluster_from_dict(data)
    assert str(err.value) == ("device.gemm_curve: unknown value 'h100'; valid: "
                              + ", ".join(c.value for c in GemmCurve))
    assert "\n" not in str(err.value)


def test_a_file_without_gemm_curve_falls_back_to_the_device_name():
    """Files written before ``gemm_curve`` keep working: the minimal file's ``H100-SXM`` gets the H100 curve."""
    cluster = cluster_from_dict(copy.deepcopy(MINIMAL))
    assert cluster.device.gemm_curve is None
    assert efficiency_for(cluster.device) == efficiency_for(replace(cluster.device, gemm_curve=GemmCurve.H100_SXM))
