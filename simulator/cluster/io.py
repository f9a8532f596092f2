"""Read and write cluster files: a preset name or a YAML/JSON file → :class:`Cluster`, and back.

``load_cluster("dgx-h100", nodes=4)`` and ``load_cluster("my.yaml")`` give validated clusters;
``save_cluster(c, "out.yaml")`` writes a file that loads back equal (``trainplan calibrate``
writes its measured clusters this way). Units in files: bandwidths in decimal GB/s per
direction (per GPU intra-node, per NIC inter-node), memory in decimal GB, latencies in µs.
The format is documented key by key in ``docs/clusters.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from simulator.cluster._files import parse_yaml, with_nodes  # noqa: F401 (re-exported)
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.presets import load_preset
from simulator.cluster.spec import Cluster, CommProfile, Link, NetworkSpec, NodeSpec, Protocol
from simulator.errors import SpecError
from simulator.attention_efficiency import attention_efficiency_to_dict
from simulator.gemm_efficiency import gemm_efficiency_to_dict
from simulator.power_model import power_draw_to_dict
from simulator.jsonio import parse_json, read_text

__all__ = ["load_cluster", "save_cluster", "cluster_from_dict", "cluster_to_dict", "read_cluster_file", "parse_yaml",
           "with_nodes"]

FILE_SUFFIXES = (".yaml", ".yml", ".json")


def load_cluster(path_or_name: str, nodes: int | None = None) -> Cluster:
    """A preset name (``dgx-h100``) or a ``.yaml``/``.yml``/``.json`` path; ``nodes`` overrides the node count."""
    text = str(path_or_name)
    if _looks_like_file(text):
        cluster = cluster_from_dict(read_cluster_file(text))
    else:
        return load_preset(text, nodes=nodes)
    return with_nodes(cluster, nodes)


def _looks_like_file(text: str) -> bool:
    return text.lower().endswith(FILE_SUFFIXES) or "/" in text or "\\" in text or Path(text).is_file()


def read_cluster_file(path: str | Path) -> dict:
    """Parse a YAML or JSON file into a dict; syntax errors name the file and line, and a missing file,
    a directory, a binary or non-UTF-8 file, or nesting too deep to parse is one SpecError."""
    p = Path(path)
    if p.suffix.lower() not in FILE_SUFFIXES:
        raise SpecError(str(p), f"a cluster file must end in {', '.join(FILE_SUFFIXES)}")
    if not p.exists():
        raise SpecError(str(p), "no such file")
    text = read_text(p, "cluster")
    data = parse_json(text, str(p)) if p.suffix.lower() == ".json" else parse_yaml(text, str(p))
    if not isinstance(data, dict):
        raise SpecError(str(p), "the file must hold one mapping (name:, nodes:, device:, ...)")
    return data


def save_cluster(cluster: Cluster, path: str | Path) -> Path:
    """Write ``cluster`` as YAML (``.yaml``/``.yml``) or JSON (``.json``); it loads back equal."""
    p = Path(path)
    data = cluster_to_dict(cluster)
    if p.suffix.lower() == ".json":
        p.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    elif p.suffix.lower() in (".yaml", ".yml"):
        header = "# trainplan cluster file (units: GB/s per direction, decimal GB, µs); see docs/clusters.md\n"
        p.write_text(header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=None, width=100), encoding="utf-8")
    else:
        raise SpecError(str(p), f"a cluster file must end in {', '.join(FILE_SUFFIXES)}")
    return p


def cluster_to_dict(c: Cluster) -> dict:
    """The file form of ``c``, every value explicit (so a saved file does not depend on defaults)."""
    d: dict[str, Any] = {"name": c.name}
    if c.description:
        d["description"] = c.description
    d["nodes"] = c.nodes
    d["gpus_per_node"] = c.node.gpus_per_node
    d["device"] = _device_dict(c.device)
    d["intra_node"] = _intra_dict(c.node)
    if c.network is not None:
        d["inter_node"] = _inter_dict(c.network, c.node.nics_per_node)
    if c.node.host is not None:
        h = c.node.host
        d["host"] = {"cpu_memory_GB": _gb(h.cpu_memory_bytes), "h2d_bw_GBps": h.h2d_bw_GBps,
                     "h2d_latency_us": h.h2d_latency_us, "nvme_GB": _gb(h.nvme_bytes),
                     "nvme_read_GBps": h.nvme_read_GBps, "nvme_write_GBps": h.nvme_write_GBps,
                     "cpu_adam_params_per_s": h.cpu_adam_params_per_s, "storage_read_GBps": h.storage_read_GBps}
        if h.cpu_vendor is not None:
            d["host"]["cpu_vendor"] = h.cpu_vendor.value
        if h.cpu_cores is not None:
            d["host"]["cpu_cores"] = h.cpu_cores
        if h.fsdp2_zero2_backward_module_us is not None:
            d["host"]["fsdp2_zero2_backward_module_us"] = h.fsdp2_zero2_backward_module_us
        if h.tp_dtensor_call_us is not None:
            d["host"]["tp_dtensor_call_us"] = h.tp_dtensor_call_us
        for key in ("fsdp2_forward_module_us", "fsdp2_backward_module_us", "tp_forward_module_us",
                    "tp_backward_module_us", "ddp_forward_call_us", "ddp_sync_backward_us",
                    "checkpoint_forward_region_us", "checkpoint_backward_region_us", "pipeline_action_us",
                    "pipeline_p2p_post_us", "pipeline_chunk_us", "step_loop_us", "first_microbatch_cold_us",
                    "fsdp2_sync_switch_us", "fsdp2_zero_grad_us", "rank_jitter_sd_fraction"):
            if getattr(h, key):
                d["host"][key] = getattr(h, key)
    d["comm"] = _comm_dict(c.comm)
    d["in_switch_reduction"] = c.in_switch_reduction
    if c.source:
        d["source"] = c.source
    if c.node_groups:
        d["node_groups"] = [{"first_node": g.first_node, "nodes": g.nodes, "device": _device_dict(g.device)}
                            for g in c.node_groups]
    if c.degraded_nics or c.slow_gpus:
        d["degraded"] = {"nics": [{"node": f.node, "nic": f.nic, "bw_fraction": f.bw_fraction}
                                  for f in c.degraded_nics],
                         "gpus": [{"node": f.node, "gpu": f.gpu, "speed_fraction": f.speed_fraction}
                                  for f in c.slow_gpus]}
    return d


def _device_dict(device) -> dict:
    d = {"name": device.name, "peak_tflops": {dtype.value: v for dtype, v in device.peak_tflops.items()},
         "memory_GB": _gb(device.memory_bytes), "hbm_bw_GBps": device.hbm_bw_GBps}
    if device.hbm_efficiency is not None:
        d["hbm_efficiency"] = device.hbm_efficiency
    if device.gemm_curve is not None:
        d["gemm_curve"] = device.gemm_curve.value
    if device.sm_count is not None:
        d["sm_count"] = device.sm_count
    if device.compute_capability is not None:
        d["compute_capability"] = device.compute_capability
    if device.sustained_clock_ratio != 1.0:
        d["sustained_clock_ratio"] = device.sustained_clock_ratio
    if device.power_limit_W is not None:
        d["power_limit_W"] = device.power_limit_W
    if device.power_draw is not None:
        d["power_draw"] = power_draw_to_dict(device.power_draw)
    d["kernel_launch_overhead_us"] = device.kernel_launch_overhead_us
    d["kernel_dispatch"] = device.kernel_dispatch.value
    if device.backward_call_overhead_us is not None:
        d["backward_call_overhead_us"] = device.backward_call_overhead_us
    if device.op_call_overhead_us:
        d["op_call_overhead_us"] = device.op_call_overhead_us
    if device.dtensor_call_overhead_us:
        d["dtensor_call_overhead_us"] = device.dtensor_call_overhead_us
    if device.gemm_efficiency is not None:
        d["gemm_efficiency"] = gemm_efficiency_to_dict(device.gemm_efficiency)
    if device.fp8_gemm_efficiency is not None:
        fp8 = gemm_efficiency_to_dict(device.fp8_gemm_efficiency)
        d["fp8_gemm_efficiency"] = {"points": fp8["points"], "source": fp8["source"]}  # HBM: device-wide
    if device.attention_efficiency is not None:
        d["attention_efficiency"] = attention_efficiency_to_dict(device.attention_efficiency)
    return d


def _link_dict(link: Link) -> dict:
    return {"kind": link.kind.value, "bw_GBps": link.bw_GBps, "latency_us": link.latency_us,
            "efficiency": link.efficiency}


def _intra_dict(node: NodeSpec) -> dict:
    d = _link_dict(node.intra_link)
    d["fabric"] = node.fabric.value
    if node.pcie_tree is not None:
        t = node.pcie_tree
        d["pcie_tree"] = {"gpus_per_switch": t.gpus_per_switch, "switches_per_socket": t.switches_per_socket,
                          "switch_uplink": _link_dict(t.switch_uplink), "socket_link": _link_dict(t.socket_link)}
    if node.nvlink_pairs:
        d["nvlink_pairs"] = [list(p) for p in node.nvlink_pairs]
    d["gpu_peer_to_peer"] = node.gpu_peer_to_peer
    return d


def _inter_dict(net: NetworkSpec, nics: int) -> dict:
    d = _link_dict(net.link)
    d.update(nics_per_node=nics, rail_optimized=net.rail_optimized, oversubscription=net.oversubscription,
             nodes_per_leaf=net.nodes_per_leaf, gpudirect_rdma=net.gpudirect_rdma,
             leaf_uplinks=net.leaf_uplinks.value)
    return d


def _comm_dict(comm: CommProfile) -> dict:
    d = {"library": comm.library.value, "call_latency_us": comm.call_latency_us,
         "protocols": [_protocol_dict(p) for p in comm.protocols]}
    if comm.collective_sms:
        d["collective_sms"] = comm.collective_sms
    if comm.replay_step_us:
        d["replay_step_us"] = comm.replay_step_us
    if comm.blocking_wait_us:
        d["blocking_wait_us"] = {p: us for p, us in comm.blocking_wait_us}
    if comm.op_wait_us:
        d["op_wait_us"] = {op.value: {p: us for p, us in table} for op, table in comm.op_wait_us}
    if comm.group_wait_us:
        d["group_wait_us"] = {g: {p: us for p, us in table} for g, table in comm.group_wait_us}
    if comm.async_broadcast_us:
        d["async_broadcast_us"] = {p: us for p, us in comm.async_broadcast_us}
    if comm.dtensor_wait_us:
        d["dtensor_wait_us"] = {p: us for p, us in comm.dtensor_wait_us}
    if comm.dtensor_sp_wait_us:
        d["dtensor_sp_wait_us"] = {p: us for p, us in comm.dtensor_sp_wait_us}
    if comm.fsdp2_wait_us:
        d["fsdp2_wait_us"] = {p: us for p, us in comm.fsdp2_wait_us}
    return d


def _protocol_dict(p: Protocol) -> dict:
    d = {"name": p.name, "bw_factor": p.bw_factor, "base_latency_us": dict(p.base_latency_us),
         "hop_latency_us": {cls.value: v for cls, v in p.hop_latency_us.items()}}
    if p.algo_hop_latency_us:
        d["algo_hop_latency_us"] = {algo: {cls.value: v for cls, v in table.items()}
                                    for algo, table in p.algo_hop_latency_us.items()}
    if p.algo_bw_factor:
        d["algo_bw_factor"] = dict(p.algo_bw_factor)
    if p.algo_efficiency:
        d["algo_efficiency"] = dict(p.algo_efficiency)
    if p.bus_bw_cap is not None:
        cap = p.bus_bw_cap
        d["bus_bw_cap_GBps"] = {"one_node": [list(row) for row in cap.one_node_GBps],
                                "two_nodes": {v.value: x for v, x in cap.two_nodes_GBps.items()},
                                "more_nodes": {v.value: x for v, x in cap.more_nodes_GBps.items()}}
    if p.net_post_overhead_us:
        d["net_post_overhead_us"] = {v.value: us for v, us in p.net_post_overhead_us.items()}
    if p.step_bytes is not None:
        d["step_bytes"] = p.step_bytes
    if p.fifo_steps != 1:
        d["fifo_steps"] = p.fifo_steps
    return d


def _gb(nbytes: int) -> float | int:
    """Bytes → decimal GB, as an int when whole (so files read ``memory_GB: 80``)."""
    gb = nbytes / 1e9
    return int(gb) if gb == int(gb) else gb
