"""Cluster file schema, the ``comm`` section: the collective library, its measured per-call terms and protocols.

Split from :mod:`simulator.cluster._schema` (which calls :func:`comm_profile`); keys and units in ``docs/clusters.md``.
"""

from __future__ import annotations

from simulator.cluster._fields import Section, enum_value
from simulator.cluster.nccl import ALGORITHMS, nccl_protocols
from simulator.cluster.spec import BusBwCap, CommLibrary, CommProfile, CpuVendor, LinkClass, Protocol
from simulator.collectives.base import Op
from simulator.errors import SpecError

COMM_KEYS = ("library", "call_latency_us", "replay_step_us", "blocking_wait_us", "op_wait_us", "group_wait_us",
             "async_broadcast_us", "dtensor_wait_us", "dtensor_sp_wait_us", "fsdp2_wait_us", "protocols",
             "collective_sms")
PROTOCOL_KEYS = ("name", "bw_factor", "base_latency_us", "hop_latency_us", "algo_hop_latency_us",
                 "algo_bw_factor", "algo_efficiency", "step_bytes", "fifo_steps", "bus_bw_cap_GBps",
                 "net_post_overhead_us")
BUS_BW_CAP_KEYS = ("one_node", "two_nodes", "more_nodes")


def comm_profile(s: Section) -> CommProfile:
    """The ``comm`` section: the library, its per-call terms and protocols (NCCL's table where none are given)."""
    library = s.choice("library", CommLibrary, CommLibrary.IDEAL.value)
    if s.has("protocols"):
        raw = s.raw("protocols")
        if not isinstance(raw, list):
            raise SpecError(s.field("protocols"), "must be a list of protocol mappings")
        protocols = tuple(_protocol(Section(p, f"{s.field('protocols')}[{i}]", PROTOCOL_KEYS))
                          for i, p in enumerate(raw))
        names = [p.name for p in protocols]
        if len(set(names)) != len(names):
            raise SpecError(s.field("protocols"), f"protocol names must be distinct, got {names}")
    else:
        protocols = nccl_protocols() if library is CommLibrary.NCCL else ()
    return CommProfile(library=library, call_latency_us=s.number("call_latency_us", 0.0, minimum="non_negative"),
                       replay_step_us=s.number("replay_step_us", 0.0, minimum="non_negative"),
                       blocking_wait_us=_per_processes(s, "blocking_wait_us"), op_wait_us=_per_op(s),
                       group_wait_us=_per_group(s),
                       async_broadcast_us=_per_processes(s, "async_broadcast_us"),
                       dtensor_wait_us=_per_processes(s, "dtensor_wait_us"),
                       dtensor_sp_wait_us=_per_processes(s, "dtensor_sp_wait_us"),
                       fsdp2_wait_us=_per_processes(s, "fsdp2_wait_us"), protocols=protocols,
                       collective_sms=s.integer("collective_sms", 0, minimum=0))


def _per_op(s: Section) -> tuple:
    """``comm.op_wait_us``: a mapping of collective op (``all-reduce``, ``broadcast``, ...) to a per-process-count
    mapping as :func:`_per_processes` reads it (:attr:`CommProfile.op_wait_us`)."""
    raw = s.raw("op_wait_us", {})
    field = s.field("op_wait_us")
    if not isinstance(raw, dict):
        raise SpecError(field, "must be a mapping of op to {process count: µs}, e.g. {all-reduce: {2: 1330.0}}")
    known = {o.value: o for o in Op}
    out = []
    for name in raw:
        if name not in known:
            raise SpecError(field, f"keys are collective ops ({', '.join(known)}), got {name!r}")
        out.append((known[name], _per_processes(Section(raw, field, raw.keys()), name)))
    return tuple(sorted(out, key=lambda kv: kv[0].value))


def _per_group(s: Section) -> tuple:
    """``comm.group_wait_us``: a mapping of group size (a whole number >= 2; JSON's text keys too) to a
    per-process-count mapping as :func:`_per_processes` reads it (:attr:`CommProfile.group_wait_us`; that its counts
    exceed the size is checked there)."""
    raw = s.raw("group_wait_us", {})
    field = s.field("group_wait_us")
    if not isinstance(raw, dict):
        raise SpecError(field, "must be a mapping of group size to {process count: µs}, e.g. {2: {4: 650.0}}")
    out = {}
    for name in raw:
        size = _whole_key(field, name, out, minimum=2, what="group size")
        out[size] = _per_processes(Section(raw, field, raw.keys()), name)
    return tuple(sorted(out.items()))


def _per_processes(s: Section, key: str) -> tuple[tuple[int, float], ...]:
    """``comm.<key>`` (``blocking_wait_us``, ``async_broadcast_us``, ``dtensor_wait_us``, ``dtensor_sp_wait_us``,
    ``fsdp2_wait_us``): a mapping of process count (a whole number >= 1; JSON's text keys too) to µs >= 0, as
    ``((processes, µs), ...)`` in increasing process count (:attr:`CommProfile.blocking_wait_us`)."""
    raw = s.raw(key, {})
    field = s.field(key)
    if not isinstance(raw, dict):
        raise SpecError(field, "must be a mapping of process count to µs, e.g. {2: 760.0, 4: 3700.0}")
    table = {}
    for name in raw:
        count = _whole_key(field, name, table, minimum=1, what="process count")
        table[count] = Section(raw, field, raw.keys()).number(name, minimum="non_negative")
    return tuple(sorted(table.items()))


def _whole_key(field: str, name, seen: dict, *, minimum: int, what: str) -> int:
    """A mapping's key read as a whole number >= ``minimum`` (YAML's ints, JSON's text keys), not already in
    ``seen``; else the one-line error naming ``field``."""
    key = int(name) if isinstance(name, str) and name.isdigit() else name
    if not isinstance(key, int) or isinstance(key, bool) or key < minimum:
        raise SpecError(field, f"keys are {what}s (whole numbers >= {minimum}), got {name!r}")
    if key in seen:
        raise SpecError(field, f"{what} {key} is given twice")
    return key


def _protocol(s: Section) -> Protocol:
    base = _latency_map(s.section("base_latency_us", ALGORITHMS), str)
    hop = _latency_map(s.section("hop_latency_us", [c.value for c in LinkClass]), LinkClass)
    if set(hop) != set(LinkClass):
        missing = sorted(c.value for c in set(LinkClass) - set(hop))
        raise SpecError(s.field("hop_latency_us"), f"give every link class; missing {', '.join(missing)}")
    algos = s.section("algo_hop_latency_us", ALGORITHMS, {})
    overrides = {algo: _latency_map(algos.section(algo, [c.value for c in LinkClass]), LinkClass)
                 for algo in algos.data}
    ratios = s.section("algo_bw_factor", ALGORITHMS, {})
    algo_bw = {algo: ratios.fraction(algo) for algo in ratios.data}
    efficiencies = s.section("algo_efficiency", ALGORITHMS, {})
    algo_eff = {algo: efficiencies.fraction(algo) for algo in efficiencies.data}
    return Protocol(name=s.string("name"), base_latency_us=base, hop_latency_us=hop,
                    bw_factor=s.fraction("bw_factor"), algo_hop_latency_us=overrides, algo_bw_factor=algo_bw,
                    algo_efficiency=algo_eff,
                    step_bytes=s.integer("step_bytes") if s.has("step_bytes") else None,
                    fifo_steps=s.integer("fifo_steps", 1),
                    bus_bw_cap=_bus_bw_cap(s.section("bus_bw_cap_GBps", BUS_BW_CAP_KEYS))
                    if s.has("bus_bw_cap_GBps") else None,
                    net_post_overhead_us=_vendor_map(s.section("net_post_overhead_us", [v.value for v in CpuVendor], {})))


def _vendor_map(s: Section) -> dict:
    return {enum_value(s.field(v), CpuVendor, v): s.number(v, minimum="non_negative") for v in s.data}


def _bus_bw_cap(s: Section) -> BusBwCap:
    """``{one_node: [[compute capability, GB/s], ...], two_nodes: {vendor: GB/s}, more_nodes: {...}}``."""
    rows = s.raw("one_node", [])
    ok = isinstance(rows, list) and all(isinstance(r, (list, tuple)) and len(r) == 2 for r in rows)
    if not ok:
        raise SpecError(s.field("one_node"), "must be a list of [compute capability, GB/s] pairs")
    vendors = [v.value for v in CpuVendor]
    tables = {}
    for key in ("two_nodes", "more_nodes"):
        tables[key] = _vendor_map(s.section(key, vendors))
    return BusBwCap(one_node_GBps=tuple((float(cc), float(cap)) for cc, cap in rows),
                    two_nodes_GBps=tables["two_nodes"], more_nodes_GBps=tables["more_nodes"])


def _latency_map(s: Section, key_type) -> dict:
    out = {}
    for key in s.data:
        k = key if key_type is str else enum_value(s.field(key), key_type, key)
        out[k] = s.number(key, minimum="non_negative")
    return out
