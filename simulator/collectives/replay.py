"""Time a schedule on the topology, step by step, with the closed forms' extras.

    T = calls·call_overhead + Σ_steps max over the step's transfers t of
            max over the links r of t's path of (bytes of the whole step through r) / bw_r
        + L + γ(schedule.reduce_bytes_per_rank)   (exposed part, Algorithm.gamma_s)

``L`` is the longest latency chain through the schedule (:mod:`simulator.collectives.chain`:
``A'[dst] = max(A'[dst], A[src] + α_t)`` step by step, the largest arrival at the end); for a chunk
pipeline (ring broadcast/reduce, tree) one chunk's chain plus ``α_max`` per further chunk
(``Algorithm.schedule_latency_s``).

α, bandwidths and the per-call overhead follow cost.py (the protocol's table, or the links' own).
On an uncontended placement with slice sizes that divide evenly this equals the algorithm's closed
form exactly (tests/test_collectives_replay.py). Where they legitimately differ:

- sizes that do not divide into ``p × channels × chunks`` equal slices: the schedule moves whole
  elements (the largest slice sets a step's time) while the closed form uses ``n/p`` exactly, and
  a tiny buffer leaves some slices empty (no transfer, no latency in that step);
- ``nvls``: its schedule is the data-equivalent two-shot exchange; the switch's reduction is not
  a point-to-point transfer, so the replay times the two-shot exchange instead;
- contended placements (several GPUs on one NIC, oversubscribed uplinks): both share bandwidth
  the same way, so they still agree whenever the closed form's steps hold the same transfers.
"""

from __future__ import annotations

from simulator.cluster.spec import Cluster, Protocol
from simulator.collectives.base import Schedule
from simulator.collectives.algorithm import flows_by_step
from simulator.collectives.cost import Env, Group
from simulator.collectives.registry import get_algorithm
from simulator.errors import SpecError


def schedule_time_s(cluster: Cluster, schedule: Schedule, protocol: Protocol | None = None) -> float:
    """Time of ``schedule`` (step bandwidth terms + latency chain) on ``cluster`` under ``protocol`` (None: links' own numbers)."""
    if protocol is not None and protocol not in cluster.comm.protocols:
        raise SpecError("protocol", f"protocol {protocol.name} is not one of the cluster's comm.protocols")
    algorithm = get_algorithm(schedule.algorithm)
    env = Env(cluster, protocol, family=algorithm.family, group=Group(cluster, schedule.ranks))
    return (env.overhead_s(algorithm.family, algorithm.calls, schedule.op) + env.steps_bw_s(flows_by_step(schedule))
            + algorithm.schedule_latency_s(env, schedule) + algorithm.gamma_s(env, schedule.reduce_bytes_per_rank))
