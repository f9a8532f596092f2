"""A collective replayed by a host loop as its schedule's point-to-point steps, and what that costs.

The executor runs a plan that names an all-reduce algorithm (``ring``, ``tree``, … rather than ``auto``) by
replaying the simulator's own schedule for it with ``isend``/``irecv`` (``executor/strategies/ddp_sync.py``'s
``ReplayHook`` → ``executor/p2p.py``): per step, a Python loop posts the step's sends and receives, waits for
them, then adds or copies the received bytes. Each step is therefore a round of host work and of small library
calls that the library's own call of the same algorithm does inside one call. The price:

    T_replayed = T_algorithm + S · replay_step_us · share                 (every step with all processes busy)

and in general, on a node whose processes time-share its cores, each step ``s`` at the share of the processes
busy in it (:func:`step_weights`, since 2026-11-26):

    T_replayed = call + k̄·W + Σ_s k_s·bw_s + k̄·L + γ + Σ_s k_s · replay_step_us · share,   k_s = share_s / share

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

Busy processes per step (2026-11-26, issue 11). A replayed step is host work only on the ranks that send or
receive in it; a rank with nothing to do in a step goes on to its next one and blocks in that step's receive,
without a core (``executor/p2p.py``: each rank waits only for its own transfers). A ring step keeps every rank
busy, so ``share`` is right there; a tree's steps do not: the 4-rank tree dgx-h100 builds for ddp-tree's bucket
(a chain 3→2→1→0 and back, 2 chunks) has 2, 3, 3, 2, 3, 3, 2 ranks busy in its 7 steps. So each step is charged
the rule :mod:`simulator.collectives.gloo` already applies to gloo's binomial broadcast (``share_s = max(1,
(N − idle_s) / cores)``, :func:`simulator.collectives.gloo.step_share`): its bandwidth term, its replay step and
(as ``k̄``, the steps' mean ``k_s``; both replays put one hop of their latency chain in each step) its latency.
The call and the reduction keep the node's share (done by every process). The call's wait for a core
(``comm.op_wait_us``, measured per process count on calls of all the node's processes: :mod:`.cost`, "Waits")
follows the steps too (since 2026-11-26, tree19): ``W_r = k̄ · W(N)``, the node's wait spread over the steps as
the latency is, each step's part at its busy weight (:func:`replay_wait_s`). On 4 processes and 2 cores the tree's
``Σ k_s`` is 4.5 against its 7 steps, ``k̄ = 9/14`` and ``W_r = 9/14 · W(4)``; a ring's 6 of 6 and W(4)
(unchanged). Measured [src: own-replay-busy-share-2026-11-26]: the tree replay of that bucket took 0.56-0.69
(median 0.66) of the ring replay's mean time in the same launches (seven, heavily loaded), where the uniform
share priced it at 1.13 of it; the four ranks' CPU per call summed to 0.61-0.69 of the ring's, the tree's end
ranks using a third of a ring rank's (waiting ranks do not spin) (docs/validation.md, "ddp-tree").

Why not the wait at each step's busy processes (tree17's ``W̄ = (3·W(2) + 4·W(3)) / 7``, 2026-11-26 until tree19):
each step of a replay is a blocking exchange, and its stamped time (``benchmarks/replay_step_wait_probe.py``,
[src: own-replay-step-wait-2026-11-26]) says how a step's wait scales with its busy processes: in eight launches a
tree step with 2 of 4 ranks busy waited (mean − 10th percentile) 0.57-0.90 of a ring step's, one with 3 busy
0.67-0.91, where ``W(2) / W(4)`` was 0.19-0.26 and ``W(3) / W(4)`` 0.45 in calibrations of the same hour, and the
busy share prices 0.5 / 0.75; the steps' whole times were 0.43-0.73 and 0.55-0.69 of a ring step's
(docs/validation.md, "tree19"). ``W(k)`` is measured on nodes of ``k`` processes in all; in a replay the node's
other processes sleep in a receive for a step and wake for the next, and a step's wait follows its share of the
steps, not a smaller node's table.

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
from simulator.collectives.base import Op, Schedule
from simulator.collectives.cost import Env
from simulator.collectives.registry import build_schedule


def replayed_time_s(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int, algorithm: str,
                    built_on: Cluster) -> float:
    """:func:`schedule_replay_time_s` of the schedule built on ``built_on`` (the plan's cluster, where the executor
    builds it), timed on ``cluster``."""
    return schedule_replay_time_s(cluster, build_schedule(built_on, list(ranks), op, nbytes, algorithm))


def step_weights(cluster: Cluster, schedule: Schedule) -> list[float]:
    """``k_s = share_s / share`` of each step of ``schedule`` replayed on ``cluster`` (module docstring): the
    time-sharing of the processes busy in the step over the node's (:func:`simulator.collectives.gloo.step_share`);
    all 1 where the node does not time-share its cores or every rank works in every step (a ring)."""
    from simulator.collectives.algorithm import flows_by_step
    from simulator.collectives.gloo import step_share

    env = Env(cluster, None)
    if env.time_share <= 1.0:  # no time-sharing: every step at 1, without building the flows
        return [1.0] * schedule.num_steps
    return [step_share(env, flows, len(schedule.ranks)) for flows in flows_by_step(schedule)]


def weighted_steps(cluster: Cluster, schedule: Schedule) -> float:
    """``Σ_s k_s``: the replayed steps counted at their busy processes' share (``S`` for a ring)."""
    return sum(step_weights(cluster, schedule))


def replay_wait_s(cluster: Cluster, schedule: Schedule) -> float:
    """``W_r = k̄ · W``: the replayed call's expected wait for a core, the op's measured wait for the schedule's group
    on ``cluster`` (:meth:`Env.blocking_wait_s`) times the mean of its steps' busy weights (:func:`step_weights`;
    module docstring); the node's ``W`` where every rank works in every step (a ring); 0 off loopback or unmeasured."""
    from simulator.collectives.cost import Group
    from simulator.collectives.registry import get_algorithm

    env = Env(cluster, None, family=get_algorithm(schedule.algorithm).family, group=Group(cluster, schedule.ranks))
    wait_s = env.blocking_wait_s(schedule.op)
    if wait_s <= 0 or not schedule.num_steps:
        return wait_s
    weights = step_weights(cluster, schedule)
    return wait_s * sum(weights) / len(weights)


def schedule_replay_time_s(cluster: Cluster, schedule: Schedule) -> float:
    """``call + k̄·W + Σ_s k_s·bw_s + k̄·L + γ + Σ_s k_s·replay_step_us·share`` seconds (module docstring): the
    executor's replay of ``schedule`` on ``cluster``; with every ``k_s`` = 1,
    :func:`simulator.collectives.replay.schedule_time_s` plus :func:`steps_extra_s` of its steps."""
    from simulator.collectives.algorithm import flows_by_step
    from simulator.collectives.cost import Group
    from simulator.collectives.registry import get_algorithm

    algorithm = get_algorithm(schedule.algorithm)
    env = Env(cluster, None, family=algorithm.family, group=Group(cluster, schedule.ranks))
    steps = flows_by_step(schedule)
    weights = step_weights(cluster, schedule)
    mean = sum(weights) / len(weights) if weights else 1.0
    node_wait_s = env.blocking_wait_s(schedule.op)
    return (env.overhead_s(algorithm.family, algorithm.calls, schedule.op)
            + algorithm.calls * (replay_wait_s(cluster, schedule) - node_wait_s)  # W_r in place of the node's W
            + sum(env.step_bw_s(flows) * k for flows, k in zip(steps, weights))
            + mean * algorithm.schedule_latency_s(env, schedule)
            + algorithm.gamma_s(env, schedule.reduce_bytes_per_rank) + steps_extra_s(cluster, sum(weights)))


def replay_steps(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int, algorithm: str) -> int:
    """Steps of ``algorithm``'s schedule for the call: the rounds a replay runs one after another."""
    return build_schedule(cluster, list(ranks), op, nbytes, algorithm).num_steps


def replay_extra_s(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int, algorithm: str) -> float:
    """``Σ_s k_s · replay_step_us · share`` seconds (module docstring) for the call; 0 where
    ``comm.replay_step_us`` is 0 (the schedule is not even built)."""
    if cluster.comm.replay_step_us <= 0:
        return 0.0
    return steps_extra_s(cluster, weighted_steps(cluster, build_schedule(cluster, list(ranks), op, nbytes, algorithm)))


def steps_extra_s(cluster: Cluster, steps: float) -> float:
    """``steps · replay_step_us · share`` seconds: what replaying ``steps`` steps on ``cluster`` adds."""
    return steps * cluster.comm.replay_step_us * 1e-6 * Env(cluster, None).time_share
