"""Collective schedules replayed on the flow-level network, step by step.

A :class:`~simulator.collectives.base.Schedule` runs as base.py says: steps in order, a step's
transfers concurrently, a step over when its last transfer is. The costs are those of the
analytical replay (:func:`simulator.collectives.replay.schedule_time_s`, through the same
:class:`simulator.collectives.cost.Env`, so the two cannot drift apart):

- the library's per-call overhead (``calls × base_latency_us[family]`` under a protocol, else
  ``comm.call_latency_us``) before the first step;
- the schedule's latency chain ``L`` (:meth:`simulator.collectives.cost.Env.chain_latency_s`: the
  longest sum of per-hop α along the transfers a message follows, α = the protocol's per-hop
  latency of the path's link class, else the links' own ``path.latency_s``) as one delay after the
  overhead; the transfers themselves carry no latency;
- per step, every transfer's bytes over its path's links, shared max-min fairly with every other
  flow in the network (:mod:`simulator.engine.network`);
- a protocol's ``bw_factor`` ``f`` (LL: half of each line is flags) as wire bytes: a transfer of ``b``
  bytes puts ``b / f`` bytes on its links at their full rate, so alone it takes ``b / (f·bw)``, the
  replay's time, and flows of different protocols sharing a link each pay their own overhead;
- the exposed reduction (γ) term of ``reduce_bytes_per_rank`` (``Algorithm.gamma_s``) after the last
  step, as the replay adds it.

Where nothing else shares the links, a flow alone on its resources runs at its bottleneck and the
step time is the replay's bandwidth term ``max(bytes/bw)``, so the whole call is the replay's
``overhead + L + Σ step_bw + γ``; the DES differs only where flows contend: within a step (partly
shared paths) or with other traffic in the network. Latency is not contended (a delay, not a flow).
"""

from __future__ import annotations

from typing import Sequence

import simpy

from simulator.cluster.spec import Cluster, Protocol
from simulator.collectives.base import Op, Schedule
from simulator.collectives.cost import Env, Group
from simulator.collectives.registry import build_schedule, get_algorithm
from simulator.engine.network import FlowNetwork
from simulator.errors import SpecError


def run_schedule(env: simpy.Environment, net: FlowNetwork, cluster: Cluster, schedule: Schedule,
                 protocol: Protocol | None = None, paths: dict | None = None) -> simpy.Process:
    """Start replaying ``schedule`` now; the process's value is its duration in seconds.

    ``paths`` is an optional path cache (``{(src, dst, nic): Path}``) to share between calls on
    one cluster, so repeated collectives reuse the network's per-path routes.
    """
    if protocol is not None and protocol not in cluster.comm.protocols:
        raise SpecError("protocol", f"protocol {protocol.name} is not one of the cluster's comm.protocols")
    algorithm = get_algorithm(schedule.algorithm)
    costs = Env(cluster, protocol, paths, family=algorithm.family, group=Group(cluster, schedule.ranks))
    overhead_s = costs.overhead_s(algorithm.family, algorithm.calls, schedule.op)
    gamma_s = algorithm.gamma_s(costs, schedule.reduce_bytes_per_rank)
    chain_s = algorithm.schedule_latency_s(costs, schedule)
    wire = 1.0 / costs.bw_ratio
    return env.process(_replay(env, net, costs, schedule, overhead_s + chain_s, gamma_s, wire))


def _replay(env: simpy.Environment, net: FlowNetwork, costs: Env, schedule: Schedule,
            pre_s: float, gamma_s: float, wire: float):
    start = env.now
    if pre_s > 0:  # per-call overhead + the latency chain
        yield env.timeout(pre_s)
    ranks = schedule.ranks
    for step in schedule.steps():
        items = [(costs.path(ranks[t.src], ranks[t.dst], t.nic), t.nbytes * wire, 0.0)
                 for t in step if t.nbytes > 0]  # the replay skips empty transfers
        if items:
            yield net.transfer_all(items)
    if gamma_s > 0:
        yield env.timeout(gamma_s)
    return env.now - start


def simulate_collective(cluster: Cluster, ranks: Sequence[int], op: Op | str, nbytes: int, algorithm: str,
                        protocol: Protocol | None = None, root: int = 0) -> float:
    """Seconds one collective call takes on an otherwise idle network (discrete-event replay)."""
    op = Op.parse(op) if isinstance(op, str) else op
    schedule = build_schedule(cluster, ranks, op, nbytes, algorithm, root)
    env = simpy.Environment()
    net = FlowNetwork(env)
    process = run_schedule(env, net, cluster, schedule, protocol)
    env.run()
    return process.value
