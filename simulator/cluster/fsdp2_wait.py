"""The wait for a core of FSDP2's blocking collectives on gloo: the one rule that replaces an FSDP2 call's sweep wait
with the wait measured inside the FSDP2 model.

FSDP2 issues each parameter all-gather and gradient reduce-scatter as c10d's blocking call, on the rank's one
thread, before (all-gather) or after (reduce-scatter) each ``fully_shard`` module's compute
(:func:`simulator.compile.grad_sync.fsdp2_blocking_prefetch`). A blocking gloo call costs its fast time plus an
expected wait ``W(op, g, p)`` (:mod:`simulator.cluster.core_wait`), measured by the calibration's sweep on calls issued
back to back: there both ranks leave one call together and enter the next together. In the model each call follows
a module's forward or backward and FSDP2's own host work, which each rank runs apart, so the call also waits for the
slower rank, and a rank whose thread lost its core during that compute arrives late. On the loaded 2-core VM
(2026-11-26, 2 processes, the executor's ZeRO-3 wrapping of the suite's tiny model, load 11) the 18 calls of a step
took 4.5 ms each inside the model against 2.3 ms for the same calls issued back to back right after it
[src: own-fsdp2-wait-2026-11-26]. On a quiet machine the two read the same (1,077 against 1,081 µs per call, the
suite's calibrations of 2026-11-26 08:55–09:07, docs/validation.md "Quiet, after the seventeenth session's merges"),
so the rule moves an estimate only where the machine is busy.

So where ``comm.fsdp2_wait_us`` is measured (:mod:`executor.calibrate_fsdp2`: the executor's own FSDP2 models,
ZeRO-3 and ZeRO-2, their micro-batches back to back as a step runs them, the seconds inside FSDP2's collectives less
the calls' fast estimates, per call), an FSDP2 call of a pair on a gloo loopback node without a protocol pays

    T = T_call − W(op, g, p) + W_fsdp2(p)

``T_call`` the call's estimate with its ordinary wait (:meth:`CommProfile.blocking_wait_s`; a reduce-scatter waits
as the all-reduce gloo runs for it, :func:`simulator.collectives.gloo_ops.waits_as`), ``W_fsdp2(p)`` the measured
table read at the node's ``p`` processes between and below its counts as
:func:`simulator.cluster.core_wait.at_processes_s` reads them; above the largest measured count, for groups of other
sizes, under a protocol, or with nothing measured the call keeps its ordinary wait.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.cluster.core_wait import at_processes_s
from simulator.cluster.kinds import LinkKind
from simulator.collectives.base import Op
from simulator.collectives.gloo_ops import waits_as

GROUP_SIZE = 2
"""The FSDP2 group size ``comm.fsdp2_wait_us`` is measured for (the suite's ZeRO cases' dp; the probe's pair)."""


def fsdp2_wait_s(cluster, group_size: int) -> float | None:
    """``W_fsdp2(p)`` in seconds for an FSDP2 call of a ``group_size``-rank group on ``cluster``'s node (module
    docstring), or None where the call keeps its ordinary wait."""
    comm, node = cluster.comm, cluster.node
    table, processes = comm.fsdp2_wait_us, node.gpus_per_node
    if (not table or comm.protocols or node.intra_link.kind is not LinkKind.LOOPBACK or group_size != GROUP_SIZE
            or processes > table[-1][0]):
        return None
    return at_processes_s(table, processes)


def fsdp2_call_s(cluster, op: Op, group_size: int, time_s: float) -> float:
    """An FSDP2 call's seconds given its ordinary estimate ``time_s`` (module docstring): its ordinary wait swapped
    for ``W_fsdp2(p)`` where that applies, else ``time_s``. E.g. an all-gather estimated at 1,441 µs with an ordinary
    wait of 1,148 µs and ``W_fsdp2(2)`` = 2,000 µs costs 2,293 µs."""
    measured = fsdp2_wait_s(cluster, group_size)
    if measured is None:
        return time_s
    ordinary = cluster.comm.blocking_wait_s(cluster.node.gpus_per_node, waits_as(cluster.comm, op), group_size)
    return max(0.0, time_s - ordinary) + measured


def with_fsdp2_waits(cluster, calls: tuple) -> tuple:
    """``calls`` (a chunk's FSDP2 gathers and reduce-scatters) each priced by :func:`fsdp2_call_s`; the same tuple
    where nothing changes (nothing measured, another node)."""
    from simulator.work import Transport

    if not calls or fsdp2_wait_s(cluster, GROUP_SIZE) is None:
        return calls
    return tuple(c if c.transport is not Transport.COLLECTIVE else
                 replace(c, time_s=fsdp2_call_s(cluster, c.op, len(c.group), c.time_s)) for c in calls)
