"""The cost machinery every collective model shares: a group's layout, the α-β link model, a schedule's time.

Model (Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 2005, §2): a message of ``b`` bytes over a connection costs ``α + b·β``. We
evaluate α and β on the group's real placement (:func:`simulator.cluster.topology.path`) and
run the transfers of one algorithm step concurrently. Bandwidth is step-synchronous, latency is
a chain (:mod:`simulator.collectives.chain`):

    step_bw   = max over the step's transfers f of max over the links r that f crosses of B_r / bw_r
    T         = Σ_steps step_bw  +  L,   L = the longest chain of α along the transfers (chain.py)

where ``B_r`` is the bytes *all* the step's transfers push through link ``r`` (a GPU port, a NIC,
a PCIe uplink). A pipelined ring's throughput is bounded by its slowest link on every step, but
latencies add along the path a chunk travels, as NCCL's tuner adds a ring's hop latencies
(tuning.cc: ``(nsteps − nInter)·intraLat + nInter·interLat``). When every step's transfers share one
α and every rank receives in every step, ``L = steps·α`` and T is Thakur's sum of ``α + b·β`` steps,
e.g. ring all-reduce on one switched node of ``p`` GPUs: ``2(p−1)·(α + (n/p)/bw)``.

Protocols: with a protocol (an NCCL profile) α of a connection is ``protocol.hop_latency_us`` of its
link class instead of the links' own ``latency_us``, every bandwidth is scaled by
``protocol.bw_factor`` and each library call costs ``protocol.base_latency_us[family]``. Without
one (IDEAL, GLOO, MPI, a user's own file) α and bandwidth are the links' own and a call costs
``comm.call_latency_us``.

Reduction (the γ term of Thakur et al.): reducing ``n`` bytes reads two operands and writes one
result, ``3n`` bytes of device memory, so it takes ``3n / hbm_bw``. Assumption: the reduction is
memory-bound and, for libraries that reduce after receiving (gloo, MPI, the IDEAL profile), not
overlapped with the transfers (Thakur et al. add it the same way). NCCL fuses it into its copy
kernels, and a pipelined algorithm (ring, tree, chain) reduces one chunk while the next is on the
link, so there only the part slower than the link shows (:meth:`Env.gamma_s`).

Time-sharing (:attr:`Env.time_share`): over a loopback link (processes of one machine, no protocol) a
message is CPU work — the library's call, the sender's and the receiver's kernel copies, the reduction — so
when the node runs more processes than it has cores (``share = max(1, processes / Host.cpu_cores)``, the
rule :func:`simulator.host_overhead.core_share` applies to compute) every term of a call takes ``share``
times as long: call overhead, α and γ × share, bandwidth ÷ share. The node's processes are its
``gpus_per_node`` (a one-machine cluster holds exactly the run's processes: :func:`simulator.validate.run_cluster`).
Measured on the 2-core VM, 2026-11-25 [src: own-gloo-share-probe].

Waits (:meth:`Env.blocking_wait_s`, since 2026-11-25): there a blocking call may first wait for a core (a ~4 ms
scheduler tick on the 2-core VM), so each call also pays ``W(processes)``, the expected wait measured at the node's
process count (``comm.blocking_wait_us``; not × share; expectations add, so k calls pay k·W). An op measured on its
own (``comm.op_wait_us``: gloo's all-reduce, all-gather and broadcast, since 2026-11-25) pays its own W(op,
processes) [src: own-gloo-op-waits-2026-11-25]; a group smaller than the node's processes pays its size's own wait
where measured (``comm.group_wait_us``, :mod:`simulator.cluster.core_wait`) [src: own-gloo-pair-wait-2026-11-25].
0 on every preset: their estimates stay the α-β closed forms
[src: own-gloo-blocking-wait-2026-11-25].
"""

from __future__ import annotations

from collections import Counter
from functools import cached_property

from simulator.cluster.spec import Cluster, LinkClass, LinkKind, Protocol
from simulator.cluster.topology import Hop, Path, path
from simulator.collectives.base import Op
from simulator.collectives.chain import Edge, chain_latency_steps_s
from simulator.collectives.gloo_ops import waits_as
from simulator.collectives.group import Flow, Group, ring_flows, ring_nic  # noqa: F401 (re-exported)
from simulator.collectives.pipeline_choice import Pipelining
from simulator.errors import SpecError
from simulator.host_overhead import core_share

REDUCE_MEMORY_PASSES = 3
"""Bytes of device memory touched per byte reduced: read two operands, write one result."""


class Env(Pipelining):
    """Evaluates α-β costs on one cluster under one protocol (None: the links' own numbers)."""

    def __init__(self, cluster: Cluster, protocol: Protocol | None, paths: dict | None = None,
                 family: str | None = None, group: Group | None = None):
        self.cluster = cluster
        self.protocol = protocol
        self.group = group
        """The group the costs are for: the protocol's bus-bandwidth cap depends on its node count and
        ring bandwidth (:attr:`bw_ratio`); None: no cap applies."""
        self.family = family
        """Algorithm family (``ring``, ``tree``, ``nvls``): selects the protocol's per-algorithm hop
        latencies and bandwidth ratio (NCCL's ``tuning.cc`` tables differ by algorithm)."""
        self._paths: dict[tuple, Path] = {} if paths is None else paths
        """Path cache; pass :attr:`Group.paths` to share it between protocols of one group."""

    def path(self, src: int, dst: int, nic: int | None = None) -> Path:
        key = (src, dst, nic)
        if key not in self._paths:
            self._paths[key] = path(self.cluster, src, dst, nic)
        return self._paths[key]

    def latency_s(self, p: Path) -> float:
        """α of a connection: the protocol's per-hop latency of its class, or the links' own."""
        if self.protocol is None:
            return p.latency_s * self.time_share
        table = self.protocol.hop_latency_us
        if p.link_class not in table:
            raise SpecError("comm.protocols", f"protocol {self.protocol.name} has no hop latency for "
                            f"{p.link_class.value} links; add it to hop_latency_us")
        if self.family is None:
            return table[p.link_class] * 1e-6
        return self.protocol.hop_latency(self.family, p.link_class) * 1e-6

    def bw_Bps(self, hop: Hop) -> float:
        """Bandwidth of one link under the protocol: achievable bw × the protocol's ratio for the family."""
        return hop.link.bw_Bps * self.bw_ratio

    @cached_property
    def bw_ratio(self) -> float:
        """Fraction of link bandwidth achieved: ``protocol.bw_factor × cap_share ×`` its per-algorithm
        ratio (1 without a protocol).

        ``cap_share = min(1, cap / (bw_factor · B_ring))`` where the protocol caps its bus bandwidth
        (``Protocol.bus_bw_cap``, NCCL's ``llMaxBws`` for LL [src: nccl-llmaxbw]) and ``B_ring`` is the
        group's ring bus bandwidth on the links (:attr:`Group.ring_bus_bw_Bps`, NCCL's ``busBw``): NCCL
        sets LL's bus bandwidth to ``min(llMaxBw, busBw × factor)``, so the protocol reaches
        ``min(bw_factor, cap / B_ring)`` of every link. E.g. ring all-reduce on 4 DGX A100 nodes
        (AMD hosts: 19.0 GB/s; ``B_ring`` = 8 NICs × 24 GB/s = 192 GB/s): LL reaches 19/192 of
        each link, not 1/2, and its bus bandwidth is 19 GB/s instead of 96.
        """
        if self.protocol is None:
            return 1.0 / self.time_share
        return self.protocol.bw_ratio(self.family) * self.cap_share

    @cached_property
    def time_share(self) -> float:
        """Processes per core whose time-sharing stretches a call (module docstring): ``core_share`` of the
        node's ``gpus_per_node`` processes over a loopback link without a protocol, else 1."""
        if self.protocol is not None or self.cluster.node.intra_link.kind is not LinkKind.LOOPBACK:
            return 1.0
        return core_share(self.cluster, self.cluster.node.gpus_per_node)

    @cached_property
    def cap_share(self) -> float:
        """``min(1, cap / (e · B_ring))`` (:attr:`bw_ratio`), ``e`` the protocol's efficiency for the family
        (``Protocol.efficiency``: NCCL's tree LL ``min(busBw·.92/3.8, llMaxBw)``); 1 without a cap or a group."""
        protocol, group = self.protocol, self.group
        if protocol is None or protocol.bus_bw_cap is None or group is None:
            return 1.0
        host = self.cluster.node.host
        cap = protocol.bus_bw_cap.cap_GBps(len(group.nodes), self.cluster.device.compute_capability,
                                           None if host is None else host.cpu_vendor)
        if cap is None:
            return 1.0
        return min(1.0, cap * 1e9 / (protocol.efficiency(self.family) * group.ring_bus_bw_Bps))

    def blocking_wait_s(self, op: Op | None = None, group_size: int | None = None) -> float:
        """Expected wait for a core of one blocking call of ``op`` by a ``group_size``-rank group (None: :attr:`group`'s
        size, else the whole node's) (module docstring, "Waits"): ``comm.blocking_wait_s`` at the node's
        ``gpus_per_node`` processes (the op's own table where measured, on gloo a reduce-scatter's the all-reduce's,
        :func:`simulator.collectives.gloo_ops.waits_as`; a smaller group's own where its size was measured,
        :mod:`simulator.cluster.core_wait`) over a loopback link without a protocol, else 0."""
        if self.protocol is not None or self.cluster.node.intra_link.kind is not LinkKind.LOOPBACK:
            return 0.0
        comm = self.cluster.comm
        if group_size is None and self.group is not None:
            group_size = self.group.p
        return comm.blocking_wait_s(self.cluster.node.gpus_per_node, waits_as(comm, op), group_size)

    def overhead_s(self, family: str, calls: int = 1, op: Op | None = None, group_size: int | None = None) -> float:
        """Fixed cost of ``calls`` library calls of ``op`` by an algorithm family on a ``group_size``-rank group (None:
        :attr:`group`'s): without a protocol ``calls · (call_latency · share + blocking wait of op and group)``."""
        if self.protocol is None:
            return calls * (self.cluster.comm.call_latency_us * 1e-6 * self.time_share
                            + self.blocking_wait_s(op, group_size))
        base = self.protocol.base_latency_us
        if family not in base:
            raise SpecError("comm.protocols", f"protocol {self.protocol.name} has no base latency for "
                            f"the {family!r} family; known: {', '.join(base)}")
        return calls * base[family] * 1e-6

    def gamma_s(self, reduce_bytes: float, pipelined: bool = False) -> float:
        """γ term: ``3·bytes / hbm_bw`` (read two operands, write one; see the module docstring).

        Where the reduction overlaps the transfer (:meth:`CommLibrary.overlaps_reduction`: NCCL's
        fused reduce-copy kernels; a pipelined algorithm on the IDEAL profile) the operands stream
        through device memory while the same bytes cross the link, so only the excess over the
        fastest link's time is exposed: ``bytes · max(0, 3/hbm_bw − 1/bw_intra)`` — zero on every
        GPU preset (H100: 3350/3 = 1117 GB/s of reduction against 450 GB/s of NVLink) and on a
        user's file whose device reduces faster than its links move bytes, where the closed forms
        are then the α-β ones exactly.
        """
        reduce_s = REDUCE_MEMORY_PASSES * reduce_bytes / (self.cluster.device.hbm_bw_GBps * 1e9) * self.time_share
        if not self.cluster.comm.library.overlaps_reduction(pipelined):
            return reduce_s
        return max(0.0, reduce_s - reduce_bytes * self.time_share / self.cluster.node.intra_link.bw_Bps)

    def step_bw_s(self, flows: list[Flow]) -> float:
        """One step's bandwidth term: max over flows of max over its links of (step's bytes through the link / bw)."""
        flows = [f for f in flows if f.nbytes > 0]
        if not flows:
            return 0.0
        paths = [self.path(f.src, f.dst, f.nic) for f in flows]
        load: dict[tuple, float] = {}
        links: dict[tuple, Hop] = {}  # one hop per (resource, link bandwidth): the max reads each value once
        for f, p in zip(flows, paths):
            for hop in p.hops:
                load[hop.resource] = load.get(hop.resource, 0.0) + f.nbytes
                links.setdefault((hop.resource, hop.link.bw_Bps), hop)
        return max(load[r] / self.bw_Bps(h) for (r, _), h in links.items())

    def edges(self, flows: list[Flow]) -> list[Edge]:
        """``(src, dst, α)`` of each non-empty flow of one step (chain.py's input).

        A network flow also waits for the host to post the step's messages to its ends' other network
        peers: ``α + (k − 1)·o`` with ``k`` the most distinct network peers its sender sends to or its
        receiver receives from in the step, and ``o`` the protocol's per-post overhead
        (:attr:`post_overhead_s`; NCCL's proxy posts them one by one [src: nccl-net-overhead]). A ring,
        tree or pairwise step (one network peer, however many channels) pays nothing more; a direct
        all-to-all over ``N`` nodes of ``g`` GPUs pays ``(g·(N−1) − 1)·o``.
        """
        flows = [f for f in flows if f.nbytes > 0]
        paths = [self.path(f.src, f.dst, f.nic) for f in flows]
        alphas = [self.latency_s(p) for p in paths]
        net = [p.link_class is LinkClass.NET for p in paths]
        o = self.post_overhead_s
        if o > 0 and any(net):
            pairs = {(f.src, f.dst) for f, n in zip(flows, net) if n}
            sends, recvs = Counter(s for s, _ in pairs), Counter(d for _, d in pairs)
            alphas = [a + (max(sends[f.src], recvs[f.dst]) - 1) * o if n else a
                      for f, a, n in zip(flows, alphas, net)]
        return [(f.src, f.dst, a) for f, a in zip(flows, alphas)]

    @cached_property
    def post_overhead_s(self) -> float:
        """Host time to post one network message under the protocol (``Protocol.net_post_overhead_us``
        for the cluster's host CPU); 0 without a protocol (the links' own α-β, exactly)."""
        if self.protocol is None:
            return 0.0
        host = self.cluster.node.host
        return self.protocol.net_post_overhead_s(None if host is None else host.cpu_vendor)

    def chain_latency_s(self, steps_of_flows: list[list[Flow]]) -> float:
        """Longest latency chain through the steps (:func:`simulator.collectives.chain.chain_latency_s`)."""
        memo: dict[int, int] = {}  # id(step) → its index in distinct: a step given twice as one list is read once
        distinct: list[list[Edge]] = []
        order = []
        for s in steps_of_flows:
            if id(s) not in memo:
                memo[id(s)] = len(distinct)
                distinct.append(self.edges(s))
            order.append(memo[id(s)])
        return chain_latency_steps_s(distinct, order)

    def steps_bw_s(self, steps_of_flows: list[list[Flow]]) -> float:
        """``Σ step_bw_s`` over the steps (a step given twice as the same list is costed once)."""
        memo: dict[int, float] = {}
        for s in steps_of_flows:
            if id(s) not in memo:
                memo[id(s)] = self.step_bw_s(s)
        return sum(memo[id(s)] for s in steps_of_flows)

    def steps_time_s(self, steps_of_flows: list[list[Flow]]) -> float:
        """A schedule's communication time: ``Σ step_bw_s + chain_latency_s`` (module docstring)."""
        return self.steps_bw_s(steps_of_flows) + self.chain_latency_s(steps_of_flows)
