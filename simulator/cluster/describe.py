"""Readable summaries of a cluster: the text ``trainplan cluster show`` prints and its ``--json`` form.

Bandwidths are shown as line rate, efficiency and the achievable product
(``bw_GBps × efficiency``), so a reader sees both the datasheet figure and what the model uses.
"""

from __future__ import annotations

from simulator.cluster.spec import Cluster, Fabric, Link


def _num(x: float) -> str:
    """Number for display: 6 significant digits, no trailing ``.0`` (450, 0.82, 369, 30720)."""
    rounded = float(f"{x:.6g}")
    return str(int(rounded)) if rounded == int(rounded) else repr(rounded)


def _link_text(link: Link, per: str) -> str:
    text = f"{link.kind.value} {_num(link.bw_GBps)} GB/s" + (f" {per}" if per else "")
    if link.efficiency != 1.0:
        text += f" × {_num(link.efficiency)} = {_num(link.bw_GBps * link.efficiency)} GB/s achievable"
    return text + f", {_num(link.latency_us)} µs"


def _attention_text(d) -> str:
    """One line on the fused-attention rates the device gives, or why the matmul curve times it."""
    eff = d.attention_efficiency
    if eff is None:
        return "fused attention: no published kernel rates, timed on the matmul curve"
    backends = sorted({c.backend.value for c in eff.curves})
    dims = sorted({c.head_dim for c in eff.curves})
    return (f"fused attention: {', '.join(backends)} rates, head dim {'/'.join(map(str, dims))} "
            f"({len(eff.curves)} curves; {eff.source})")


def _device_lines(c: Cluster) -> list[str]:
    d = c.device
    peaks = ", ".join(f"{dtype.value} {_num(v)}" for dtype, v in d.peak_tflops.items())
    overhead = f"; {_num(d.kernel_launch_overhead_us)} µs host time per kernel" if d.kernel_launch_overhead_us else ""
    achievable = (f" × {_num(d.hbm_efficiency)} = {_num(d.hbm_bw_GBps * d.hbm_efficiency)} GB/s achievable"
                  if d.hbm_efficiency is not None else "")
    lines = [f"device       {d.name}: {peaks} TFLOP/s; {_num(d.memory_bytes / 1e9)} GB at {_num(d.hbm_bw_GBps)} GB/s"
             + achievable + overhead]
    lines.append("             " + _attention_text(d))
    for g in c.node_groups:
        dtype, tflops = next(iter(g.device.peak_tflops.items()))
        lines.append(f"             nodes {g.first_node}-{g.first_node + g.nodes - 1}: {g.device.name} "
                     f"({dtype.value} {_num(tflops)} TFLOP/s, {_num(g.device.memory_bytes / 1e9)} GB "
                     f"at {_num(g.device.hbm_bw_GBps)} GB/s)")
    lines += [f"degraded     node {f.node} GPU {f.gpu} at {_num(100 * f.speed_fraction)} % speed" for f in c.slow_gpus]
    lines += [f"degraded     node {f.node} NIC {f.nic} at {_num(100 * f.bw_fraction)} % bandwidth"
              for f in c.degraded_nics]
    return lines


def _intra_lines(c: Cluster) -> list[str]:
    n = c.node
    per = "per NVLink per direction" if n.fabric is Fabric.NVLINK_MESH else "per GPU per direction"
    lines = [f"intra-node   {n.fabric.value} fabric: {_link_text(n.intra_link, per)}"]
    if n.fabric is Fabric.NVLINK_MESH:
        links = sum(k for _, _, k in n.nvlink_pairs)
        lines.append(f"             {len(n.nvlink_pairs)} NVLink pairs, {links} links in all")
    if n.pcie_tree is not None:
        t = n.pcie_tree
        lines.append(f"             PCIe tree: {t.gpus_per_switch} GPUs per switch, {t.switches_per_socket} switches "
                     f"per socket; uplink {_link_text(t.switch_uplink, '')}; socket {_link_text(t.socket_link, '')}")
    if not n.gpu_peer_to_peer:
        lines.append("             GPU peer-to-peer off: PCIe traffic staged through host memory")
    return lines


def _network_lines(c: Cluster) -> list[str]:
    net = c.network
    if net is None:
        return ["network      none (single node only)"]
    extras = [("rail-optimised" if net.rail_optimized else "not rail-optimised"),
              f"oversubscription {_num(net.oversubscription)}:1"
              + (" (shared leaf uplinks)" if net.leaf_uplinks.value == "shared" else ""),
              (f"{net.nodes_per_leaf} nodes per leaf" if net.nodes_per_leaf else "one leaf tier"),
              ("GPUDirect RDMA" if net.gpudirect_rdma else "no GPUDirect RDMA (staged through host)")]
    return [f"network      {c.node.nics_per_node} NICs per node, {_link_text(net.link, 'per NIC per direction')}",
            f"             {', '.join(extras)}"]


def _host_lines(c: Cluster) -> list[str]:
    h = c.node.host
    if h is None:
        return ["host         not given"]
    line = (f"host         {_num(h.cpu_memory_bytes / 1e9)} GB RAM; H2D {_num(h.h2d_bw_GBps)} GB/s per GPU, "
            f"{_num(h.h2d_latency_us)} µs")
    if h.nvme_bytes:
        line += (f"; NVMe {_num(h.nvme_bytes / 1e9)} GB, read {_num(h.nvme_read_GBps)} / "
                 f"write {_num(h.nvme_write_GBps)} GB/s")
    if h.cpu_adam_params_per_s:
        line += f"; CPU Adam {_num(h.cpu_adam_params_per_s)} params/s"
    if h.storage_read_GBps:
        line += f"; storage read {_num(h.storage_read_GBps)} GB/s"
    return [line]


def _comm_line(c: Cluster) -> str:
    comm = c.comm
    text = f"comm         {comm.library.value}"
    if comm.protocols:
        text += ": protocols " + " / ".join(f"{p.name} (bw × {_num(p.bw_factor)})" for p in comm.protocols)
    if comm.call_latency_us:
        text += f"; {_num(comm.call_latency_us)} µs per call"
    if comm.replay_step_us:
        text += f"; {_num(comm.replay_step_us)} µs per replayed step"
    if comm.blocking_wait_us:
        text += "; wait per blocking call " + ", ".join(f"{_num(us)} µs at {p}" for p, us in comm.blocking_wait_us) \
            + " processes"
    for op, table in comm.op_wait_us:
        text += f"; wait per {op.value} " + ", ".join(f"{_num(us)} µs at {p}" for p, us in table) + " processes"
    for size, table in comm.group_wait_us:
        text += f"; wait per call of a {size}-rank group " + ", ".join(f"{_num(us)} µs at {p}" for p, us in table) \
            + " processes"
    if comm.async_broadcast_us:
        text += "; per broadcast of an asynchronous batch " + ", ".join(
            f"{_num(us)} µs at {p}" for p, us in comm.async_broadcast_us) + " processes"
    if comm.dtensor_wait_us:
        text += "; wait per DTensor tp call " + ", ".join(
            f"{_num(us)} µs at {p}" for p, us in comm.dtensor_wait_us) + " processes"
    if comm.dtensor_sp_wait_us:
        text += "; with sequence parallelism " + ", ".join(
            f"{_num(us)} µs at {p}" for p, us in comm.dtensor_sp_wait_us) + " processes"
    if comm.fsdp2_wait_us:
        text += "; wait per FSDP2 call " + ", ".join(f"{_num(us)} µs at {p}" for p, us in comm.fsdp2_wait_us) \
            + " processes"
    if comm.library.value == "ideal" and not comm.protocols:
        text += " (links' own latency and bandwidth, no library overhead)"
    return text


def describe_cluster(c: Cluster) -> str:
    """Multi-line summary: GPUs, device, intra fabric, network, host, comm library, world size, source."""
    head = f"{c.name}" + (f" - {c.description}" if c.description else "")
    lines = [head,
             f"size         {c.nodes} node{'s' if c.nodes != 1 else ''} × {c.node.gpus_per_node} GPUs "
             f"= world size {c.world_size}"]
    lines += _device_lines(c) + _intra_lines(c) + _network_lines(c) + _host_lines(c)
    lines.append(_comm_line(c))
    lines.append(f"in-switch    {'yes (NVLS / SHARP)' if c.in_switch_reduction else 'no'}")
    if c.source:
        lines.append(f"source       {' '.join(c.source.split())}")
    return "\n".join(lines)


def cluster_summary_dict(c: Cluster) -> dict:
    """The facts of :func:`describe_cluster` as JSON-ready values (units in the key names)."""
    n, net, h = c.node, c.network, c.node.host
    return {
        "name": c.name, "description": c.description, "nodes": c.nodes, "gpus_per_node": n.gpus_per_node,
        "world_size": c.world_size,
        "device": {"name": c.device.name, "peak_tflops": {k.value: v for k, v in c.device.peak_tflops.items()},
                   "memory_GB": c.device.memory_bytes / 1e9, "hbm_bw_GBps": c.device.hbm_bw_GBps,
                   "kernel_launch_overhead_us": c.device.kernel_launch_overhead_us},
        "intra_node": {"fabric": n.fabric.value, **_link_dict(n.intra_link),
                       "nvlink_pairs": len(n.nvlink_pairs), "gpu_peer_to_peer": n.gpu_peer_to_peer},
        "inter_node": None if net is None else {
            "nics_per_node": n.nics_per_node, **_link_dict(net.link), "rail_optimized": net.rail_optimized,
            "oversubscription": net.oversubscription, "nodes_per_leaf": net.nodes_per_leaf,
            "gpudirect_rdma": net.gpudirect_rdma},
        "host": None if h is None else {
            "cpu_memory_GB": h.cpu_memory_bytes / 1e9, "h2d_bw_GBps": h.h2d_bw_GBps,
            "h2d_latency_us": h.h2d_latency_us, "nvme_GB": h.nvme_bytes / 1e9},
        "comm": {"library": c.comm.library.value, "call_latency_us": c.comm.call_latency_us,
                 "protocols": [p.name for p in c.comm.protocols]},
        "in_switch_reduction": c.in_switch_reduction,
        "source": " ".join(c.source.split()),
    }


def _link_dict(link: Link) -> dict:
    return {"kind": link.kind.value, "bw_GBps": link.bw_GBps, "efficiency": link.efficiency,
            "achievable_GBps": link.bw_GBps * link.efficiency, "latency_us": link.latency_us}
