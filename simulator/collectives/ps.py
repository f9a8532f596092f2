"""Synchronous parameter-server exchange (Li et al., OSDI'14; BytePS, Jiang et al., OSDI'20 §2–4).

Each of ``p`` workers pushes its gradient, cut into ``k`` shards of ``n/k`` bytes, to the ``k`` server
shards; each server adds what it receives; then every worker pulls every shard back. The data
result is an all-reduce. Two layouts (:func:`ps_time_s`):

- colocated: shard ``s`` lives on a worker (workers spread over the nodes); a worker does not send
  its own shard. Push is one step, pull is one step:
  ``T = 2·call + bw(push) + bw(pull) + L + γ·(p−1)·n/k``, ``L`` the latency chain of the two steps
  (the longest worker → host → worker pair of hops: ``2α_net`` as before as soon as a host has a
  worker on another node). With ``k = p`` every port carries
  ``(p−1)/p·n`` each way per phase, BytePS's colocated ``2(p−1)n/(pB)`` [src: jiang-2020] plus 2α.
- separate servers: ``k`` server machines, each with one NIC like the cluster's; a worker NIC
  shared by ``s`` of the group's GPUs sends ``s·n``, a server receives ``p·n/k``:
  ``T = 2·call + 2·(α_net + max(s·n, p·n/k)/B_nic)``. BytePS's ``max(n/B, pn/(kB))`` assumes push
  and pull overlap in a pipeline; here the phases are synchronous (push all, then pull), so this
  is up to 2× BytePS's figure. Server-side summation is assumed hidden (no γ; BytePS §4 runs it on
  the servers' CPUs concurrently with the network).

Synchronous only: asynchronous pushes and staleness bounds belong to the discrete-event engine.
The registered ``ps`` algorithm is colocated with one shard per worker (``k = p``); its schedule
is the push step (``reduce``) and the pull step.
"""

from __future__ import annotations

from simulator.checks import positive_int
from simulator.cluster.spec import Cluster, LinkClass, Protocol
from simulator.collectives.algorithm import Algorithm
from simulator.collectives.base import Op, Transfer, split
from simulator.collectives.cost import Env, Flow, Group
from simulator.errors import SpecError


def shard_hosts(group: Group, servers: int) -> list[int]:
    """Group index hosting each colocated shard, spread evenly along the node-by-node order."""
    return [group.order[(s * group.p) // servers] for s in range(servers)]


def _push_pull(group: Group, servers: int, nbytes: float) -> tuple[list[Flow], list[Flow]]:
    hosts, ranks = shard_hosts(group, servers), group.ranks
    push = [Flow(ranks[w], ranks[h], nbytes / servers) for h in hosts for w in range(group.p) if w != h]
    return push, [Flow(f.dst, f.src, f.nbytes) for f in push]


def _check(group: Group, servers: int, colocated: bool) -> None:
    positive_int("servers", servers)
    if colocated and servers > group.p:
        raise SpecError("servers", f"{servers} colocated shards need at least as many workers; the group has "
                        f"{group.p}; use at most {group.p} or separate servers")


def ps_time_s(cluster: Cluster, ranks, nbytes: int, servers: int, colocated: bool,
              protocol: Protocol | None = None) -> float:
    """Time of one synchronous push + pull of ``nbytes`` per worker with ``servers`` shards (see module)."""
    group = Group(cluster, tuple(ranks))
    _check(group, servers, colocated)
    env = Env(cluster, protocol, family=ParameterServer.family, group=group)
    overhead = env.overhead_s(ParameterServer.family, ParameterServer.calls)
    if colocated:
        push, pull = _push_pull(group, servers, nbytes)
        gamma = env.gamma_s((group.p - 1) * nbytes / servers)
        return overhead + env.steps_time_s([push, pull]) + gamma
    if cluster.network is None:
        raise SpecError("inter_node", "separate parameter servers sit on the network; the cluster has no "
                        "inter_node section (add one, or use colocated servers)")
    link = cluster.network.link
    factor = env.bw_ratio
    alpha = link.latency_s if protocol is None else protocol.hop_latency_us[LinkClass.NET] * 1e-6
    per_nic: dict[tuple[int, int], int] = {}
    for r in group.ranks:
        node, local = cluster.place(r)
        key = (node, cluster.node.nic_of(local))
        per_nic[key] = per_nic.get(key, 0) + 1
    busiest = max(max(per_nic.values()) * nbytes, group.p * nbytes / servers)
    return overhead + 2 * (alpha + busiest / (link.bw_Bps * factor))


class ParameterServer(Algorithm):
    """Colocated parameter server, one shard per worker: push (reduce) then pull."""

    name = "ps"
    family = "ring"
    calls = 2
    ops = frozenset({Op.ALL_REDUCE})
    max_ranks = 256
    """One shard per worker makes p² flows, costed per size: 256 ranks took 3.7 s CPU per size, 1,024
    ranks 38 s for an 11-size table and 8,192 ranks 25 s and 3.5 GB for one (measured 2026-11-24, 2-core VM
    shared with other jobs, ``trainplan collective --cluster dgx-h100 --algorithm ps``). A bound on work;
    a training plan's parameter server is costed by :func:`ps_time_s` with its own shard count."""

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        push, pull = _push_pull(group, group.p, nbytes)
        return env.steps_time_s([push, pull])

    def reduce_bytes(self, group: Group, op: Op, nbytes: int) -> float:
        return (group.p - 1) * nbytes / group.p

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        hosts, shards = shard_hosts(group, group.p), split(nbytes, group.p)
        out = []
        for s, h in enumerate(hosts):
            off, length = shards[s]
            for w in range(group.p):
                if w != h:
                    out.append(Transfer(step=0, src=w, dst=h, offset=off, nbytes=length, reduce=True))
                    out.append(Transfer(step=1, src=h, dst=w, offset=off, nbytes=length))
        return out
