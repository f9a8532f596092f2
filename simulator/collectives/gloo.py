"""What torch's ProcessGroupGloo runs for each collective on dense CPU tensors, the home of the rules that price it.

- :data:`GLOO_NATIVE`: the registered algorithm gloo runs for an op (what ``auto`` means on a gloo cluster).
- :data:`WHOLE_ALL_REDUCE`: ops ProcessGroupGloo runs as an all-reduce of the WHOLE input, then a copy of the
  rank's share out (:func:`whole_all_reduce_copy_s`): reduce-scatter.
- :data:`OUTPUT_COPY`: ops ProcessGroupGloo gathers into a buffer of its own and then copies into the caller's output
  (:func:`output_copy_s`): all-gather.
- :data:`ACTIVE_SHARE`: ops whose native steps leave some processes idle, each step charged the time-sharing of
  the processes active in it (:func:`active_share_time_s`): broadcast.

Active processes (2026-11-25, issue 11). Over loopback every term of a call is CPU work, and ``share =
max(1, processes / cores)`` (:attr:`simulator.collectives.cost.Env.time_share`) charges every step as if all
the node's processes worked in it. In a ring step they do; in a round of gloo's binomial broadcast only the
group's ranks that send or receive do, the others wait blocked in their receive (no CPU). So each step ``s`` of
such a schedule is charged the share of the processes busy in it, ``share_s = max(1, (N − i_s) / cores)``, with
``N`` the node's processes and ``i_s`` the group's ranks idle in the step (neither sending nor receiving; the
node's processes outside the group are taken as busy, as the node-wide share does: another group's collective
or compute may run there), the rule of :func:`simulator.host_overhead.core_share` per step:

    T = share·call_latency + Σ_s share_s·step_bw_s + L(α_t·share_s) + γ·share

(the call overhead and the reduction, done by every process, keep the node's share; ``L`` is the latency chain
of :mod:`simulator.collectives.chain` with each transfer's α at its step's share). A ring's steps have every
process active, so it is the ordinary estimate there. Measured [src: own-gloo-active-share-2026-11-25]: the
native broadcast took 0.28-0.69 (3 processes) and 0.32-0.45 (4) of the all-gather of the same bytes in the same
launch, where at small sizes the node-wide share prices it at about ``(c + α)/(c + 2α)`` ≈ 0.5-0.6 and
``(c + 2α)/(c + 3α)`` ≈ 0.7 of it (c ≲ α/2 as fitted) and this rule at ``(1.5c + α)/(1.5c + 3α)`` ≈ 0.33-0.47 and
``(2c + 3α)/(2c + 6α)`` ≈ 0.5-0.57; the 2-process broadcast (one one-way message, against the all-gather's
two-way exchange) stays over-priced (a one-way round costs about 0.6 of an exchange step; not modelled).

Reduce-scatter. torch 2.13's ``ProcessGroupGloo::_reduce_scatter_base`` calls
``reduce_scatter_tensor_coalesced``, which copies each input into one buffer, all-reduces the whole buffer
(``gloo::allreduce``: the ring of :data:`GLOO_NATIVE`) and copies the rank's ``chunk(worldSize)[rank]`` out
[src: gloo-native-algorithms] (both symbols are in the installed ``torch/lib/libtorch_cpu.so``, whose wheel
ships no C++ sources), and a timing probe agrees: a native 16 MiB reduce-scatter took as long as the all-reduce
of the same input or longer, never near the all-gather's half [src: own-gloo-reduce-scatter-probe]. So on a gloo
cluster a reduce-scatter of ``n`` bytes costs

    T_rs(n) = T_ring_all_reduce(n) + 2·(n + n/p) / hbm_bw · share

the all-reduce gloo runs on the whole ``n`` (call overhead, hops, bytes, reduction: :mod:`.ring`) plus the
copies in and out (each byte read and written once: ``2·(n + n/p)`` bytes of device memory, at the node's
time-sharing ``share``, :attr:`simulator.collectives.cost.Env.time_share`): on localhost-cpu's preset numbers at
4 processes, 1.9× the ring reduce-scatter's closed form at 1 MiB and 1.6× at 4 KiB.
"""

from __future__ import annotations

from simulator.cluster.spec import Cluster, LinkKind
from simulator.collectives.algorithm import Algorithm, flows_by_step
from simulator.collectives.base import Op, Schedule
from simulator.collectives.chain import chain_latency_s
from simulator.collectives.cost import Env, Flow, Group
from simulator.collectives.gloo_ops import WHOLE_ALL_REDUCE  # noqa: F401 (re-exported: its home is gloo_ops)
from simulator.host_overhead import core_share

GLOO_NATIVE: dict[Op, str] = {
    Op.ALL_REDUCE: "ring",
    Op.ALL_GATHER: "ring",
    Op.BROADCAST: "recursive_doubling",
    Op.ALL_TO_ALL: "direct",
}
"""The registered algorithm torch's ProcessGroupGloo runs for each op on dense CPU tensors (what ``auto`` means
on a gloo cluster):

- all-reduce: ``AsyncAllreduceWork`` calls ``gloo::allreduce`` without choosing an algorithm, and gloo's
  ``allreduce.cc`` runs a ring reduce-scatter then a ring all-gather, each chunk cut into >= 2 segments so one
  is in flight while the other is reduced [src: gloo-native-algorithms] (``ring``);
- all-gather (``all_gather_single``, to which torch 2.13's deprecated ``all_gather_into_tensor`` forwards,
  → ``allgather``): ``gloo::allgather``, a ring of
  ``p − 1`` steps, each rank's block sent in two halves [src: gloo-native-algorithms] (``ring``);
- broadcast: ``gloo::broadcast``, a binomial tree of ``⌈lg p⌉`` rounds from the root
  [src: gloo-native-algorithms] (``recursive_doubling``'s broadcast is that tree);
- all-to-all: ``gloo::alltoall`` posts every rank's ``p − 1`` sends and receives at once, then waits
  [src: gloo-native-algorithms] (``direct``).

Reduce-scatter is :data:`WHOLE_ALL_REDUCE` (module docstring); reduce and send-recv are not read, so ``auto``
keeps choosing the fastest registered algorithm for them."""

ACTIVE_SHARE: frozenset[Op] = frozenset({Op.BROADCAST})
"""Native ops whose steps are charged the share of their active processes (module docstring,
:func:`active_share_time_s`): the binomial broadcast, whose rounds leave ranks idle."""


COPY_PASSES = 2
"""Bytes of device memory per byte copied: read once, written once."""


def runs_own(op: Op) -> bool:
    """Whether ``auto`` on a gloo cluster prices ``op`` as what gloo runs (:data:`GLOO_NATIVE` or
    :data:`WHOLE_ALL_REDUCE`) rather than the fastest registered algorithm."""
    return op in GLOO_NATIVE or op in WHOLE_ALL_REDUCE


def step_share(env: Env, flows: list[Flow], group_size: int) -> float:
    """``share_s / share`` of one step of a ``group_size``-rank schedule (module docstring): the time-sharing of
    the node's processes less the group's idle ranks, over the node's; 1 where the node does not time-share."""
    if env.time_share <= 1.0:
        return 1.0
    return core_share(env.cluster, busy_processes(env, flows, group_size)) / env.time_share


def busy_processes(env: Env, flows: list[Flow], group_size: int) -> int:
    """``N − i_s``: the node's processes less the ``group_size``-rank group's ranks idle in the step (neither sending
    nor receiving one of ``flows``' bytes; module docstring)."""
    active = {f.src for f in flows if f.nbytes > 0} | {f.dst for f in flows if f.nbytes > 0}
    return env.cluster.node.gpus_per_node - (group_size - len(active))


def active_share_time_s(cluster: Cluster, schedule: Schedule, algorithm: Algorithm) -> float:
    """``schedule`` (of ``algorithm``)'s time on ``cluster`` with each step at the share of its busy processes
    (module docstring): :func:`simulator.collectives.replay.schedule_time_s` with every step's bandwidth term and
    every transfer's α scaled by :func:`step_share`. Not for chunk-pipelined schedules (their latency is one
    chunk's chain)."""
    env = Env(cluster, None, family=algorithm.family, group=Group(cluster, schedule.ranks))
    steps = flows_by_step(schedule)
    scales = [step_share(env, flows, len(schedule.ranks)) for flows in steps]
    bw_s = sum(env.step_bw_s(flows) * k for flows, k in zip(steps, scales))
    latency_s = chain_latency_s([(src, dst, alpha * k) for src, dst, alpha in env.edges(flows)]
                                for flows, k in zip(steps, scales))
    return (env.overhead_s(algorithm.family, algorithm.calls, schedule.op) + bw_s + latency_s
            + algorithm.gamma_s(env, schedule.reduce_bytes_per_rank))


def whole_all_reduce_copy_s(env: Env, nbytes: int, p: int) -> float:
    """The copies around a :data:`WHOLE_ALL_REDUCE` op: ``2·(n + n/p) / hbm_bw · share`` seconds (the input
    into the all-reduce's buffer, the rank's share out; module docstring)."""
    copied = nbytes + nbytes / p
    return COPY_PASSES * copied / (env.cluster.device.hbm_bw_GBps * 1e9) * env.time_share


OUTPUT_COPY: frozenset[Op] = frozenset({Op.ALL_GATHER})
"""Ops ProcessGroupGloo runs into a fresh flat buffer and then copies into the caller's output: torch's
``ProcessGroupGloo::_allgather_base`` (``all_gather_into_tensor``) chunks the output and calls ``allgather``, whose
``AsyncAllgatherWork`` gathers into ``newLikeFlat(outputs[0])`` and then ``copy_``s each chunk out
[src: torch-gloo-allgather-copy] (:func:`output_copy_s`)."""


def output_copy_s(env: Env, op: Op, nbytes: int) -> float:
    """The copy out of an :data:`OUTPUT_COPY` op's flat buffer: ``2·n / hbm_bw · share`` seconds (the whole gathered
    output ``n`` read once and written once, at the node's time-sharing); 0 for other ops. E.g. 4 MiB on
    localhost-cpu (9.7 GB/s) at 2 processes on 2 cores: 2 × 4,194,304 / 9.7e9 = 0.865 ms, which the 2-process
    native all-gather's fastest calls showed above the ring's α-β estimate (+0.7-1.2 ms at 4 MiB, +0.2-0.3 ms at
    1 MiB, six quiet sets) [src: own-gloo-op-waits-2026-11-25]."""
    if op not in OUTPUT_COPY:
        return 0.0
    return COPY_PASSES * nbytes / (env.cluster.device.hbm_bw_GBps * 1e9) * env.time_share


def async_broadcast_time_s(cluster: Cluster, group_size: int, nbytes: int) -> float | None:
    """One broadcast of a batch issued with ``async_op=True`` and then waited (torch ``ZeroRedundancyOptimizer``'s
    parameter sync [src: torch-zero1-broadcasts]), on a loopback node without a protocol whose
    ``comm.async_broadcast_us`` is measured; None elsewhere (the call then costs its blocking estimate):

        T = A(N) + ⌈log2 p⌉ · n / (bw · efficiency) · share

    ``A(N)`` the measured fixed cost per call of such a batch at the node's N processes (library call, hops and
    waits for a core together, :meth:`simulator.cluster.comm.CommProfile.async_broadcast_s`;
    [src: own-gloo-async-broadcast-2026-11-25]), then the bytes of gloo's binomial tree (:data:`GLOO_NATIVE`):
    ⌈log2 p⌉ rounds of the whole ``n`` at the loopback link's bandwidth, time-shared (``share``,
    :attr:`simulator.collectives.cost.Env.time_share`). E.g. A = 400 µs, p = 2, n = 16 KiB, 4 GB/s, share 1:
    400 + 4.1 = 404.1 µs."""
    fixed_s = cluster.comm.async_broadcast_s(cluster.node.gpus_per_node)
    link = cluster.node.intra_link
    if fixed_s is None or cluster.comm.protocols or link.kind is not LinkKind.LOOPBACK:
        return None
    env = Env(cluster, None)
    rounds = (group_size - 1).bit_length()  # ⌈log2 p⌉ for p >= 2
    return fixed_s + rounds * nbytes / (link.bw_GBps * link.efficiency * 1e9) * env.time_share
