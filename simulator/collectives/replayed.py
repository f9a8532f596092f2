"""A collective replayed by a host loop as its schedule's point-to-point steps, and what that costs.

The executor runs a plan that names an all-reduce algorithm (``ring``, ``tree``, … rather than ``auto``) by
replaying the simulator's own schedule for it with ``isend``/``irecv`` (``executor/strategies/ddp_sync.py``'s
``ReplayHook`` → ``executor/p2p.py``): per step, a Python loop posts the step's sends and receives, waits for
them, then adds or copies the received bytes. Each step is therefore a round of host work and of small library
calls that the library's own call of the same algorithm does inside one call. The price:

    T_replayed = T_algorithm + S · replay_step_us · share

- ``T_algorithm``: the registry's estimate of the named algorithm for the call (call overhead, hop latencies,
  bytes, reduction: the α-β terms the library's own call of that algorithm pays);
- ``S``: the steps of the algorithm's schedule for the call (:func:`replay_steps`; a ring all-reduce 2(p−1));
- ``replay_step_us``: :attr:`simulator.cluster.comm.CommProfile.replay_step_us`, the host time of one replayed
  step, measured by ``trainplan calibrate`` from ring all-reduce replays timed beside the native calls
  (``executor.calibrate_replay``); 0 on every preset (not measured there): no extra cost;
- ``share``: the node's time-sharing of its cores (:attr:`simulator.collectives.cost.Env.time_share`), as every
  loopback term.

E.g. a 4-process ring all-reduce replay on the 2-core VM with ``replay_step_us`` = 1000: 6 steps × 1 ms × 2 =
12 ms more than the native ring's estimate.

Which schedule (since 2026-11-25, issue 11): the executor builds the replayed schedule on the *plan's* cluster
(``ReplayHook``: ``build_schedule(plan.cluster, …)``), and a pipelined algorithm's chunk count is chosen there;
a run validated on another cluster (``trainplan validate --cluster localhost-cpu`` or a calibrated file) ran
that schedule, not the one the validation cluster would choose. :func:`replayed_time_s` therefore takes the
cluster the schedule is built on and times *that* schedule on the cluster being estimated
(:func:`simulator.collectives.replay.schedule_time_s`, equal to the closed form for the same schedule), its
``S`` the steps it has. E.g. ddp-tree's 4-rank bucket on dgx-h100 is a tree of 7 steps; the same bucket
estimated on a calibrated localhost file with a hop latency of 0 would cut it into 1,024 chunks (1,029 steps)
and charge 1,029 replayed steps. Which calls are replayed is the step compiler's question
(:func:`simulator.compile.grad_sync.replays_grad_sync`); this module is the one place that prices one.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulator.cluster.spec import Cluster
from simulator.collectives.base import Op
from simulator.collectives.cost import Env
from simulator.collectives.registry import build_schedule


def replayed_time_s(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int, algorithm: str,
                    built_on: Cluster) -> float:
    """``T_algorithm + S · replay_step_us · share`` seconds (module docstring) of the schedule built on ``built_on``
    (the plan's cluster, where the executor builds it), timed on ``cluster``."""
    from simulator.collectives.replay import schedule_time_s

    schedule = build_schedule(built_on, list(ranks), op, nbytes, algorithm)
    return schedule_time_s(cluster, schedule) + steps_extra_s(cluster, schedule.num_steps)


def replay_steps(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int, algorithm: str) -> int:
    """Steps of ``algorithm``'s schedule for the call: the rounds a replay runs one after another."""
    return build_schedule(cluster, list(ranks), op, nbytes, algorithm).num_steps


def replay_extra_s(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int, algorithm: str) -> float:
    """``S · replay_step_us · share`` seconds (module docstring) for the call; 0 where ``comm.replay_step_us``
    is 0 (the schedule is not even built)."""
    if cluster.comm.replay_step_us <= 0:
        return 0.0
    return steps_extra_s(cluster, replay_steps(cluster, ranks, op, nbytes, algorithm))


def steps_extra_s(cluster: Cluster, steps: int) -> float:
    """``steps · replay_step_us · share`` seconds: what replaying ``steps`` steps on ``cluster`` adds."""
    return steps * cluster.comm.replay_step_us * 1e-6 * Env(cluster, None).time_share
