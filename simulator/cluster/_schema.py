"""Cluster file schema: a plain dict (from YAML or JSON) → a validated :class:`Cluster`.

The keys, their units and defaults are documented in ``docs/clusters.md``. A file is taken as
given: an efficiency is 1.0 and the communication library IDEAL unless the file names them.
Naming ``comm: {library: nccl}`` without ``protocols`` gives NCCL's table (:mod:`simulator.cluster.nccl`).
"""

from __future__ import annotations

import warnings

from simulator.cluster._fields import Section, enum_value
from simulator.cluster._comm_schema import COMM_KEYS, comm_profile
from simulator.cluster._files import parse_yaml, preset_text
from simulator.cluster.facts import DegradedNic, NodeGroup, SlowGpu
from simulator.cluster.spec import (Cluster, CommProfile, CpuVendor, Device, Dtype, Fabric, HostSpec, KernelDispatch,
                                    LeafUplinks, Link, LinkKind, NetworkSpec, NodeSpec, PcieTree)
from simulator.errors import SpecError, SpecNote
from simulator.attention_efficiency import attention_efficiency_from_dict
from simulator.gemm_efficiency import GemmCurve, fp8_gemm_efficiency_from_dict, gemm_efficiency_from_dict
from simulator.power_model import power_draw_from_dict
from simulator.units import GB

TOP_KEYS = ("name", "description", "nodes", "gpus_per_node", "device", "intra_node", "inter_node", "host",
            "comm", "in_switch_reduction", "source", "node_groups", "degraded")
GROUP_KEYS = ("first_node", "nodes", "device")
DEGRADED_KEYS = ("nics", "gpus")
DEVICE_KEYS = ("name", "peak_tflops", "memory_GB", "hbm_bw_GBps", "gemm_curve", "gemm_efficiency",
               "fp8_gemm_efficiency", "sm_count", "sustained_clock_ratio", "kernel_launch_overhead_us", "kernel_dispatch",
               "op_call_overhead_us", "dtensor_call_overhead_us", "backward_call_overhead_us", "compute_capability",
               "hbm_efficiency", "attention_efficiency", "power_limit_W", "power_draw")
LINK_KEYS = ("kind", "bw_GBps", "latency_us", "efficiency")
INTRA_KEYS = LINK_KEYS + ("fabric", "pcie_tree", "nvlink_pairs", "gpu_peer_to_peer")
INTER_KEYS = LINK_KEYS + ("nics_per_node", "rail_optimized", "oversubscription", "nodes_per_leaf",
                          "gpudirect_rdma", "leaf_uplinks")
PCIE_TREE_KEYS = ("gpus_per_switch", "switches_per_socket", "switch_uplink", "socket_link")
RETIRED_HOST_KEYS = ("step_after_save_us",)
"""Host keys older cluster files state that no model reads any more: accepted so those files load, their values
ignored. ``step_after_save_us`` priced the step after the executor's between-step results rewrite, which the
executor no longer does (2026-11-26, cal19: ``simulator/step_loop.py``)."""
HOST_KEYS = ("cpu_memory_GB", "h2d_bw_GBps", "h2d_latency_us", "nvme_GB", "nvme_read_GBps", "nvme_write_GBps",
             "cpu_adam_params_per_s", "storage_read_GBps", "cpu_vendor", "cpu_cores",
             "fsdp2_forward_module_us", "fsdp2_backward_module_us", "tp_forward_module_us", "tp_backward_module_us",
             "ddp_forward_call_us", "ddp_sync_backward_us", "checkpoint_forward_region_us",
             "checkpoint_backward_region_us", "pipeline_action_us", "pipeline_p2p_post_us", "pipeline_chunk_us",
             "fsdp2_zero2_backward_module_us", "step_loop_us", "first_microbatch_cold_us",
             "fsdp2_sync_switch_us", "fsdp2_zero_grad_us", "rank_jitter_sd_fraction", "tp_dtensor_call_us"
             ) + RETIRED_HOST_KEYS



def _note_retired(host) -> None:
    """One :class:`SpecNote` per retired host key the file states: loaded, ignored, and the user told so."""
    for key in RETIRED_HOST_KEYS:
        if isinstance(host, dict) and key in host:
            warnings.warn(f"host.{key}: retired 2026-11-26 (no model reads it); its value is ignored, delete the "
                          "line", SpecNote, stacklevel=2)


FABRIC_OF_KIND = {LinkKind.NVSWITCH: Fabric.SWITCHED, LinkKind.LOOPBACK: Fabric.SWITCHED,
                  LinkKind.PCIE: Fabric.PCIE_TREE, LinkKind.NVLINK: Fabric.NVLINK_MESH}
"""Fabric assumed when ``intra_node.fabric`` is absent, from the intra-node link kind."""



def cluster_from_dict(d: dict) -> Cluster:
    """Build and validate a :class:`Cluster` from the file form (see ``docs/clusters.md``)."""
    top = Section(d, "", TOP_KEYS)
    device = _device(top.section("device", DEVICE_KEYS))
    host = _host(top.section("host", HOST_KEYS)) if top.has("host") else None
    _note_retired(d.get("host"))
    inter = top.section("inter_node", INTER_KEYS) if top.has("inter_node") else None
    node = _node(top, top.section("intra_node", INTRA_KEYS), inter, host)
    network = _network(inter) if inter is not None else None
    comm = comm_profile(top.section("comm", COMM_KEYS)) if top.has("comm") else CommProfile()
    degraded = top.section("degraded", DEGRADED_KEYS) if top.has("degraded") else None
    return Cluster(name=top.string("name"), nodes=top.integer("nodes", 1), device=device, node=node,
                   network=network, comm=comm, in_switch_reduction=top.boolean("in_switch_reduction", False),
                   source=top.string("source", "", non_empty=False),
                   description=top.string("description", "", non_empty=False),
                   node_groups=_node_groups(top), degraded_nics=_facts(degraded, "nics", DegradedNic),
                   slow_gpus=_facts(degraded, "gpus", SlowGpu))


def _node_groups(top: Section) -> tuple[NodeGroup, ...]:
    """``node_groups: [{first_node, nodes, device}]``; ``device`` a mapping as the top one, or a preset's name."""
    items = top.raw("node_groups", [])
    if not isinstance(items, list):
        raise SpecError("node_groups", "must be a list of {first_node, nodes, device}")
    out = []
    for i, item in enumerate(items):
        s = Section(item, f"node_groups[{i}]", GROUP_KEYS)
        raw = s.raw("device")
        if isinstance(raw, str):  # a preset's device section
            try:
                preset = Section(parse_yaml(preset_text(raw), f"preset {raw}"), "", TOP_KEYS)
            except SpecError as err:
                raise SpecError(s.field("device"), err.problem) from None
            device = _device(preset.section("device", DEVICE_KEYS))
        else:
            device = _device(s.section("device", DEVICE_KEYS))
        out.append(NodeGroup(first_node=s.integer("first_node", minimum=0), nodes=s.integer("nodes"), device=device))
    return tuple(out)


def _facts(degraded: Section | None, key: str, kind) -> tuple:
    """``degraded.nics: [{node, nic, bw_fraction}]`` or ``degraded.gpus: [{node, gpu, speed_fraction}]``."""
    if degraded is None or not degraded.has(key):
        return ()
    items = degraded.raw(key)
    index, fraction = ("nic", "bw_fraction") if kind is DegradedNic else ("gpu", "speed_fraction")
    if not isinstance(items, list):
        raise SpecError(degraded.field(key), f"must be a list of {{node, {index}, {fraction}}}")
    out = []
    for i, item in enumerate(items):
        s = Section(item, f"{degraded.field(key)}[{i}]", ("node", index, fraction))
        out.append(kind(node=s.integer("node", minimum=0), **{index: s.integer(index, minimum=0),
                                                              fraction: s.fraction(fraction)}))
    return tuple(out)


def _device(s: Section) -> Device:
    peak = s.raw("peak_tflops")
    if not isinstance(peak, dict) or not peak:
        raise SpecError(s.field("peak_tflops"), "give at least one format, e.g. {bf16: 989, fp32: 67}")
    tflops = {}
    peak_section = Section(peak, s.field("peak_tflops"), [d.value for d in Dtype])
    for key in peak:
        tflops[enum_value(peak_section.field(key), Dtype, key)] = peak_section.number(key)
    curve = None
    if s.has("gemm_efficiency"):
        curve = gemm_efficiency_from_dict(s.raw("gemm_efficiency"), field=s.field("gemm_efficiency"),
                                          peak_tflops=tflops)
    fp8_curve = None
    if s.has("fp8_gemm_efficiency"):
        fp8_curve = fp8_gemm_efficiency_from_dict(s.raw("fp8_gemm_efficiency"), field=s.field("fp8_gemm_efficiency"),
                                                  peak_tflops=tflops)
    attention = None
    if s.has("attention_efficiency"):
        attention = attention_efficiency_from_dict(s.raw("attention_efficiency"), s.field("attention_efficiency"),
                                                   tflops.get(Dtype.BF16))
    named = s.choice("gemm_curve", GemmCurve) if s.has("gemm_curve") else None
    return Device(name=s.string("name"), peak_tflops=tflops, memory_bytes=_bytes(s.number("memory_GB")),
                  hbm_bw_GBps=s.number("hbm_bw_GBps"), gemm_efficiency=curve, gemm_curve=named,
                  fp8_gemm_efficiency=fp8_curve, attention_efficiency=attention,
                  hbm_efficiency=s.fraction("hbm_efficiency") if s.has("hbm_efficiency") else None,
                  sm_count=s.integer("sm_count") if s.has("sm_count") else None,
                  sustained_clock_ratio=s.number("sustained_clock_ratio", 1.0),
                  power_limit_W=s.number("power_limit_W") if s.has("power_limit_W") else None,
                  power_draw=(power_draw_from_dict(s.raw("power_draw"), s.field("power_draw"))
                              if s.has("power_draw") else None),
                  kernel_launch_overhead_us=s.number("kernel_launch_overhead_us", 0.0, minimum="non_negative"),
                  kernel_dispatch=s.choice("kernel_dispatch", KernelDispatch, KernelDispatch.INLINE.value),
                  op_call_overhead_us=s.number("op_call_overhead_us", 0.0, minimum="non_negative"),
                  backward_call_overhead_us=(s.number("backward_call_overhead_us", minimum="non_negative")
                                             if s.has("backward_call_overhead_us") else None),
                  dtensor_call_overhead_us=s.number("dtensor_call_overhead_us", 0.0, minimum="non_negative"),
                  compute_capability=s.number("compute_capability") if s.has("compute_capability") else None)


def _link(s: Section, default_kind: LinkKind | None = None) -> Link:
    kind = s.choice("kind", LinkKind) if default_kind is None else s.choice("kind", LinkKind, default_kind.value)
    return Link(kind=kind, bw_GBps=s.number("bw_GBps"), latency_us=s.number("latency_us", minimum="non_negative"),
                efficiency=s.fraction("efficiency", 1.0))


def _node(top: Section, intra: Section, inter: Section | None, host: HostSpec | None) -> NodeSpec:
    link = _link(intra)
    if intra.has("fabric"):
        fabric = intra.choice("fabric", Fabric)
    elif link.kind in FABRIC_OF_KIND:
        fabric = FABRIC_OF_KIND[link.kind]
    else:
        raise SpecError(intra.field("fabric"), f"cannot infer the fabric of a {link.kind.value} link; "
                        f"give one of: {', '.join(f.value for f in Fabric)}")
    tree = _pcie_tree(intra.section("pcie_tree", PCIE_TREE_KEYS)) if intra.has("pcie_tree") else None
    gpus = top.integer("gpus_per_node")
    nics = inter.integer("nics_per_node", 1) if inter is not None else 1
    return NodeSpec(gpus_per_node=gpus, fabric=fabric, intra_link=link, nics_per_node=nics, pcie_tree=tree,
                    nvlink_pairs=_pairs(intra), gpu_peer_to_peer=intra.boolean("gpu_peer_to_peer", True),
                    host=host)


def _pcie_tree(s: Section) -> PcieTree:
    uplink = _link(s.section("switch_uplink", LINK_KEYS), LinkKind.PCIE)
    socket = _link(s.section("socket_link", LINK_KEYS), LinkKind.SOCKET)
    return PcieTree(gpus_per_switch=s.integer("gpus_per_switch"), switches_per_socket=s.integer("switches_per_socket"),
                    switch_uplink=uplink, socket_link=socket)


def _pairs(intra: Section) -> tuple[tuple[int, int, int], ...]:
    raw = intra.raw("nvlink_pairs", [])
    field = intra.field("nvlink_pairs")
    if not isinstance(raw, list):
        raise SpecError(field, "must be a list of [gpu_a, gpu_b, links] triples")
    pairs = []
    for i, item in enumerate(raw):
        ok = isinstance(item, (list, tuple)) and len(item) == 3 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in item)
        if not ok:
            raise SpecError(f"{field}[{i}]", f"must be [gpu_a, gpu_b, links] of non-negative integers, got {item!r}")
        pairs.append(tuple(item))
    return tuple(pairs)


def _network(s: Section) -> NetworkSpec:
    return NetworkSpec(link=_link(s), rail_optimized=s.boolean("rail_optimized", True),
                       oversubscription=_at_least_one(s, "oversubscription"),
                       nodes_per_leaf=s.integer("nodes_per_leaf", 0, minimum=0),
                       gpudirect_rdma=s.boolean("gpudirect_rdma", True),
                       leaf_uplinks=s.choice("leaf_uplinks", LeafUplinks, LeafUplinks.PER_NIC))


def _at_least_one(s: Section, key: str) -> float:
    value = s.number(key, 1.0)
    if value < 1:
        raise SpecError(s.field(key), f"must be >= 1 (1 means non-blocking), got {value!r}")
    return value


def _host(s: Section) -> HostSpec:
    return HostSpec(cpu_memory_bytes=_bytes(s.number("cpu_memory_GB")), h2d_bw_GBps=s.number("h2d_bw_GBps"),
                    h2d_latency_us=s.number("h2d_latency_us", minimum="non_negative"),
                    nvme_bytes=_bytes(s.number("nvme_GB", 0, minimum="non_negative")),
                    nvme_read_GBps=s.number("nvme_read_GBps", 0.0, minimum="non_negative"),
                    nvme_write_GBps=s.number("nvme_write_GBps", 0.0, minimum="non_negative"),
                    cpu_adam_params_per_s=s.number("cpu_adam_params_per_s", 0.0, minimum="non_negative"),
                    storage_read_GBps=s.number("storage_read_GBps", 0.0, minimum="non_negative"),
                    cpu_vendor=s.choice("cpu_vendor", CpuVendor) if s.has("cpu_vendor") else None,
                    cpu_cores=s.integer("cpu_cores") if s.has("cpu_cores") else None,
                    fsdp2_forward_module_us=s.number("fsdp2_forward_module_us", 0.0, minimum="non_negative"),
                    fsdp2_backward_module_us=s.number("fsdp2_backward_module_us", 0.0, minimum="non_negative"),
                    tp_forward_module_us=s.number("tp_forward_module_us", 0.0, minimum="non_negative"),
                    tp_backward_module_us=s.number("tp_backward_module_us", 0.0, minimum="non_negative"),
                    ddp_forward_call_us=s.number("ddp_forward_call_us", 0.0, minimum="non_negative"),
                    ddp_sync_backward_us=s.number("ddp_sync_backward_us", 0.0, minimum="non_negative"),
                    checkpoint_forward_region_us=s.number("checkpoint_forward_region_us", 0.0,
                                                          minimum="non_negative"),
                    checkpoint_backward_region_us=s.number("checkpoint_backward_region_us", 0.0,
                                                           minimum="non_negative"),
                    pipeline_action_us=s.number("pipeline_action_us", 0.0, minimum="non_negative"),
                    pipeline_p2p_post_us=s.number("pipeline_p2p_post_us", 0.0, minimum="non_negative"),
                    pipeline_chunk_us=s.number("pipeline_chunk_us", 0.0, minimum="non_negative"),
                    step_loop_us=s.number("step_loop_us", 0.0, minimum="non_negative"),
                    first_microbatch_cold_us=s.number("first_microbatch_cold_us", 0.0, minimum="non_negative"),
                    fsdp2_sync_switch_us=s.number("fsdp2_sync_switch_us", 0.0, minimum="non_negative"),
                    fsdp2_zero_grad_us=s.number("fsdp2_zero_grad_us", 0.0, minimum="non_negative"),
                    rank_jitter_sd_fraction=s.number("rank_jitter_sd_fraction", 0.0, minimum="non_negative"),
                    tp_dtensor_call_us=(s.number("tp_dtensor_call_us", 0.0, minimum="non_negative")
                                        if s.has("tp_dtensor_call_us") else None),
                    fsdp2_zero2_backward_module_us=(s.number("fsdp2_zero2_backward_module_us", 0.0,
                                                             minimum="non_negative")
                                                    if s.has("fsdp2_zero2_backward_module_us") else None))


def _bytes(gb: float) -> int:
    """Decimal GB → bytes, rounded to a whole byte."""
    return int(round(gb * GB))
