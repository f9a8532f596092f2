"""NCCL's protocol table: the one definition every cluster with ``comm: {library: nccl}`` gets.

Source: NVIDIA/nccl ``src/graph/tuning.cc`` v2.30.7 (arrays ``baseLat`` and ``hwLat``, and the
bandwidth refinements in ``ncclTopoTuneModel``) [src: nccl-tuning]. NCCL's time model is
``latency + bytes / (busbw × ratio)``; this table holds the latency terms and each protocol's ratio.

- Base latency per call, µs (LL / LL128 / Simple): tree 6.8 / 14.0 / 8.4, ring 6.6 / 14.0 / 8.4.
  NVLS runs only with Simple; its ``baseLat`` row is 0 (checked in a 2.19-era ``tuning.cc``,
  not in v2.30.7).
- Per-hop latency, µs (LL / LL128 / Simple):
  ring:  NVLink 0.6 / 1.9 / 3.4,  PCIe 1.0 / 2.5 / 5.7,  network 2.7 / 4.0 / 14.0;
  tree:  NVLink 0.6 / 1.25 / 4.0, PCIe 1.0 / 1.9 / 4.0,  network 5.0 / 8.5 / 14.0;
  NVLS (Simple): NVLink 25, network 18; NVLS-Tree (Simple, 2.20-era table): NVLink 23, network 14.
- Bandwidth factor: LL 0.5 (each 8-byte line carries 4 bytes of data and a 4-byte flag); LL128 0.92
  (the constant ``tuning.cc`` uses, commented there as 120/128: 120 payload bytes per 128-byte line);
  Simple 1.0.

The ring's hop latencies are each protocol's ``hop_latency_us``; the tree's and NVLS's are the
per-algorithm overrides in ``algo_hop_latency_us``.

Step size (the largest pipeline chunk, ``Protocol.step_bytes``): NCCL's FIFO per peer holds
``NCCL_STEPS = 8`` steps (``src/include/device.h``); a pipelined broadcast, reduce or tree moves one
step per chunk (``BROADCAST_CHUNKSTEPS 1``, ``REDUCE_CHUNKSTEPS 1``, ``src/include/collectives.h``;
non-ring algorithms use one step per chunk, ``enqueue.cc``) [src: nccl-chunks]. Default buffers
(``src/init.cc``): Simple ``DEFAULT_BUFFSIZE`` 4 MiB (``NCCL_BUFFSIZE`` [src: nccl-env]) → 512 KiB per
step; LL ``8 lines/thread × 512 threads × 8 steps × 16 B`` = 512 KiB → 64 KiB of lines per step, half of
it payload (each 8-byte half-line carries 4 data bytes and a 4-byte flag): 32 KiB; LL128
``120 elements/thread × 640 threads × 8 steps × 8 B`` = 4 915 200 B → 614 400 B per step, 120 of every
128 bytes payload: 576 000 B. A sender may run ``NCCL_STEPS`` steps ahead of its receiver, so a
pipeline's per-chunk hop latency overlaps eight ways (``Protocol.fifo_steps``).

LL's bus-bandwidth cap (``llMaxBws``, ``Protocol.bus_bw_cap``) [src: nccl-llmaxbw]: NCCL sets LL's bus
bandwidth to ``min(llMaxBw, busBw × ratio)`` for the ring and the tree. On one node ``llMaxBw`` is read
by GPU generation: Volta 39.0, Ampere (and Ada, compute capability 8.x) 87.7, Hopper 141.0, Blackwell
282.0 GB/s; across nodes by host CPU: AMD hosts 22.5 (2 nodes) / 19.0 (more), other hosts 39.0 / 20.4.
The Hopper and Blackwell rows also list 45/35 and 90/70 for 2 and more nodes, but ``tuning.cc`` never
reads them: across nodes the row index is the CPU vendor's (0 or 1). LL128's per-channel caps
(``perChMaxRingLL128Bws``) are not modelled: they scale with NCCL's channel count, which this model
does not reproduce (``Group.channels`` counts NICs).
"""

from __future__ import annotations

from simulator.cluster.spec import BusBwCap, CpuVendor, LinkClass, Protocol

NCCL_VERSION = "2.30.7"
NCCL_SOURCE = f"NVIDIA/nccl src/graph/tuning.cc v{NCCL_VERSION} (baseLat, hwLat, LL/LL128 bandwidth factors)"

ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "nvls_tree")
"""Algorithm families a protocol's base latency may be given for."""

P2P_ALGORITHMS: tuple[str, ...] = ("pairwise", "direct")
"""How NCCL runs all-to-all and send/recv: grouped point-to-point calls, no tuner choice."""


COLLECTIVE_CHOICES: dict[str, tuple[str, ...]] = {
    "all-reduce": ("ring", "tree", "nvls", "nvls_tree"),
    "reduce-scatter": ("ring", "nvls"),
    "all-gather": ("ring", "nvls"),
    "broadcast": ("ring",),
}
"""Algorithms NCCL's tuner chooses between, per collective (``tuning.cc``, v2.18+: the tree runs
all-reduce only, NVLS all-reduce, reduce-scatter and all-gather; CollNet, which needs SHARP-capable
switches, is not modelled). The one home of this rule: the registry's ``auto`` on an NCCL cluster
and :class:`simulator.compile.CostCache`'s ``auto`` both read it."""


def tuner_choices(op_name: str) -> tuple[str, ...]:
    """Algorithms NCCL's tuner chooses among for an operation (``auto`` on an NCCL cluster):
    :data:`COLLECTIVE_CHOICES`; all-to-all and send/recv are point-to-point in NCCL; any other
    operation, every algorithm family (the registry keeps those that implement it)."""
    if op_name in ("all-to-all", "send-recv"):
        return P2P_ALGORITHMS
    return COLLECTIVE_CHOICES.get(op_name, ALGORITHMS)


PROTOCOL_NAMES: tuple[str, ...] = ("LL", "LL128", "Simple")

_BASE_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
_HOP_US = {
    "ring": {LinkClass.NVLINK: (0.6, 1.9, 3.4), LinkClass.PCIE: (1.0, 2.5, 5.7), LinkClass.NET: (2.7, 4.0, 14.0)},
    "tree": {LinkClass.NVLINK: (0.6, 1.25, 4.0), LinkClass.PCIE: (1.0, 1.9, 4.0), LinkClass.NET: (5.0, 8.5, 14.0)},
}
_NVLS_BASE_US = 0.0
_NVLS_HOP_US = {LinkClass.NVLINK: 25.0, LinkClass.NET: 18.0}
_NVLS_TREE_HOP_US = {LinkClass.NVLINK: 23.0, LinkClass.NET: 14.0}
"""NVLS-Tree row of ``hwLat`` (Simple), µs, and its ``baseLat`` 0, from the 2.20-era ``tuning.cc`` that
the published NVLSTree measurements ran under (NCCL 2.20.5 / 2.21.5) [src: nccl-tuning-2.20]."""
_BW_FACTOR = (0.5, 0.92, 1.0)
NCCL_STEPS = 8
"""FIFO steps per peer buffer (``src/include/device.h``) [src: nccl-chunks]."""
_BUFF_BYTES = (8 * 512 * NCCL_STEPS * 16, 120 * 640 * NCCL_STEPS * 8, 4 * 1024 * 1024)
"""Default per-peer buffer per protocol (LL, LL128, Simple), ``src/init.cc`` DEFAULT_*BUFFSIZE [src: nccl-chunks]."""
_PAYLOAD = (0.5, 120 / 128, 1.0)
"""Payload fraction of a buffer line (LL: 4 data + 4 flag bytes per 8; LL128: 120 of 128 bytes)."""
STEP_BYTES = tuple(int(buff // NCCL_STEPS * payload) for buff, payload in zip(_BUFF_BYTES, _PAYLOAD))
"""Payload bytes of one FIFO step, the largest pipeline chunk: LL 32 768, LL128 576 000, Simple 524 288."""
_TREE_EFFICIENCY = (0.92 / 3.8, 0.92 * 120 / 128, 0.92)
"""Tree all-reduce's fraction of the bus bandwidth per protocol (LL, LL128, Simple), replacing the
generic factors above: ``ncclTopoTuneModel`` takes ``busBw × .92`` for the tree, then ``× 1/3.8`` under
LL (capped at ``llMaxBw``) and ``× 120/128`` under LL128 across nodes [src: nccl-tree-bw]. Not modelled:
LL128's ``7/9`` on one node, and the per-channel caps ``perChMaxTreeBws`` / ``perChMaxTreeLL128Bws`` /
``perChMaxRingLL128Bws`` (× NCCL's channel count, which ``Group.channels`` does not reproduce)."""
_ALGO_BW_RATIO = {"tree": 0.5}
"""tuning.cc converts bus to algorithm bandwidth with ``ratio = .5`` for the tree (ring: nRanks/nSteps,
which our ring's 2(p−1)/p steps already give). Measured 2-node all-reduce follows it: 86–91 GB/s with
4x HDR [src: nccl-tests-175, nccl-tests-100], where a tree at full link rate would reach ~170."""


LL_MAX_BW = BusBwCap(
    one_node_GBps=((0.0, 39.0), (8.0, 87.7), (9.0, 141.0), (10.0, 2 * 141.0)),
    two_nodes_GBps={CpuVendor.AMD: 22.5, CpuVendor.OTHER: 39.0},
    more_nodes_GBps={CpuVendor.AMD: 19.0, CpuVendor.OTHER: 20.4},
)
"""``llMaxBws`` of ``tuning.cc`` and the way ``ncclTopoTuneModel`` indexes it (module docstring)
[src: nccl-llmaxbw]: rows Volta (capability < 8; across nodes: any non-AMD host), Ampere (≥ 8; across
nodes: AMD), Hopper (≥ 9), Blackwell (≥ 10, ``2*141.0``); columns 1 node / 2 nodes / more, GB/s."""


NET_OVERHEAD_US = {CpuVendor.INTEL: 1.0, CpuVendor.AMD: 2.0, CpuVendor.OTHER: 1.0}
"""Host time per network post, µs (``tuning.cc`` ``getNetOverhead``: "Network post overhead", 1.0 on x86
Intel, 2.0 on x86 AMD, 1.0 otherwise; ``NCCL_NET_OVERHEAD`` overrides it) [src: nccl-net-overhead]."""
NET_OVERHEAD_SIMPLE_FACTOR = 3
"""``tuning.cc`` charges Simple three posts' worth per step (``if (p == NCCL_PROTO_SIMPLE) netOverhead *= 3``)."""


def nccl_protocols() -> tuple[Protocol, ...]:
    """LL, LL128 and Simple with NCCL's latencies and bandwidth factors (a fresh copy each call)."""
    protocols = []
    for i, name in enumerate(PROTOCOL_NAMES):
        base = {algo: row[i] for algo, row in _BASE_US.items()}
        hop = {cls: row[i] for cls, row in _HOP_US["ring"].items()}
        overrides = {"tree": {cls: row[i] for cls, row in _HOP_US["tree"].items()}}
        if name == "Simple":
            base["nvls"] = base["nvls_tree"] = _NVLS_BASE_US
            overrides["nvls"] = dict(_NVLS_HOP_US)
            overrides["nvls_tree"] = dict(_NVLS_TREE_HOP_US)
        protocols.append(Protocol(name=name, base_latency_us=base, hop_latency_us=hop,
                                  bw_factor=_BW_FACTOR[i], algo_hop_latency_us=overrides,
                                  algo_bw_factor=dict(_ALGO_BW_RATIO),
                                  algo_efficiency={"tree": _TREE_EFFICIENCY[i]}, step_bytes=STEP_BYTES[i],
                                  fifo_steps=NCCL_STEPS, bus_bw_cap=LL_MAX_BW if name == "LL" else None,
                                  net_post_overhead_us={v: us * (NET_OVERHEAD_SIMPLE_FACTOR if name == "Simple" else 1)
                                                        for v, us in NET_OVERHEAD_US.items()}))
    return tuple(protocols)
