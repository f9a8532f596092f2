"""The wait for a core of a collective that torch tensor parallelism's DTensor issues: the one rule that replaces a
DTensor call's sweep wait with the wait measured inside the tp model.

A blocking gloo call on a time-shared CPU node costs its fast time plus an expected wait for a core
(:mod:`simulator.cluster.core_wait`, ``W(op, p)`` from the calibration's sweep: the mean excess of the calls up to
256 KiB). The sweep times its sizes in rounds from 4 KiB to 4 MiB, so every small call follows 1-4 MiB calls, and
after those a small call waits longer: on the loaded 2-core VM (2026-11-25 21:29-21:30 UTC, 2 processes, native
all-reduce, 80 calls per point, four pairs of launches in the same minutes) the mean excess of the calls up to
256 KiB was 172-667 µs with rounds of 4-256 KiB only and 451-1414 µs with the 1 and 4 MiB calls in the rounds; the
4 KiB call right after the 4 MiB one waited most (1.0-2.1 ms mean) [src: own-dtensor-wait-2026-11-25]. A tp
step's calls are all small (``b·s·h`` activations, the logits) and follow the model's compute, not large calls,
so the sweep's wait over-prices them: the suite's tp case spent 1.02-1.07 ms per call in its collectives in both
quiet runs of 20:42-20:47 UTC against 1.39-1.57 ms charged.

So where ``comm.dtensor_wait_us`` is measured (:mod:`executor.calibrate_dtensor`: the executor's own tp model, its
micro-batches back to back as a step runs them, the seconds its ``TpClock`` counts inside the collectives less the
calls' fast estimates, per call), a DTensor call of a pair on a loopback node without a protocol pays

    T = T_call − W(op, g, p) + W_dt(p)

``T_call`` the call's estimate with its ordinary wait ``W(op, g, p)`` (:meth:`CommProfile.blocking_wait_s`), ``W_dt(p)``
the measured table (``comm.dtensor_sp_wait_us`` for the forward and backward calls of a model with sequence
parallelism where given: they wait less, 0.78-0.88 of the other model's time per call in the same launches) read at
the node's ``p`` processes between and below its counts as
:func:`simulator.cluster.core_wait.at_processes_s` reads them; above the largest measured count, for groups of
other sizes, under a protocol, or with nothing measured the call keeps its ordinary wait.
"""

from __future__ import annotations

from simulator.cluster.core_wait import at_processes_s
from simulator.cluster.kinds import LinkKind
from simulator.collectives.base import Op
from simulator.collectives.gloo_ops import waits_as

GROUP_SIZE = 2
"""The tp group size ``comm.dtensor_wait_us`` is measured for (the suite's tp degree; the probe's pairs)."""


def dtensor_wait_s(cluster, group_size: int, sp: bool = False) -> float | None:
    """``W_dt(p)`` in seconds for a DTensor call of a ``group_size``-rank group on ``cluster``'s node (module
    docstring; ``sp``: a forward or backward call of the model with sequence parallelism, which reads
    ``comm.dtensor_sp_wait_us`` where given), or None where the call keeps its ordinary wait."""
    comm, node = cluster.comm, cluster.node
    table = comm.dtensor_sp_wait_us if sp and comm.dtensor_sp_wait_us else comm.dtensor_wait_us
    processes = node.gpus_per_node
    if (not table or comm.protocols or node.intra_link.kind is not LinkKind.LOOPBACK or group_size != GROUP_SIZE
            or processes > table[-1][0]):
        return None
    return at_processes_s(table, processes)


def dtensor_call_s(cluster, op: Op, group_size: int, time_s: float, sp: bool = False) -> float:
    """A DTensor call's seconds given its ordinary estimate ``time_s`` (module docstring): its ordinary wait
    swapped for ``W_dt(p)`` (``sp``: as :func:`dtensor_wait_s`) where that applies, else ``time_s``. E.g. an
    all-reduce estimated at 1,569 µs with an ordinary wait of 1,312 µs and ``W_dt(2)`` = 800 µs costs 1,057 µs."""
    measured = dtensor_wait_s(cluster, group_size, sp)
    if measured is None:
        return time_s
    ordinary = cluster.comm.blocking_wait_s(cluster.node.gpus_per_node, waits_as(cluster.comm, op), group_size)
    return max(0.0, time_s - ordinary) + measured
