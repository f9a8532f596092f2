"""The expected wait for a core of one blocking library call: which measured table a call reads, and how.

One home for the rule that both engines charge (through :meth:`simulator.cluster.comm.CommProfile.blocking_wait_s`,
read by :meth:`simulator.collectives.cost.Env.blocking_wait_s`). A call of ``op`` by a group of ``g`` ranks on a node
of ``p`` processes waits

    W(op, p)            the whole node's group (g >= p, or g unknown): ``comm.op_wait_us[op]`` where that op was
                        measured on its own, else ``comm.blocking_wait_us``, read at p;
    W_g(p)              a smaller group (g < p) whose size was measured (``comm.group_wait_us[g]``): the straight
                        line through the points ``(g, W(op, g))`` (at g processes the group *is* the node's whole
                        group) and the measured ``(p_i, µs)``, read at p (nearest point outside them);
    W(op, p)            a smaller group whose size was not measured: the whole node's wait, an upper bound (in
                        every probe so far a smaller group waited less than the node's whole group).

Why by group size: on the 2-core VM at 4 processes, two pairs calling at once waited about what a pair waits at 2
processes (a pair's one-way hop 0.54-1.71 ms mean against 0.53-1.75 ms at 2 processes; back-to-back 8 KiB
all-reduces of two pairs 0.53-0.83 ms per call against 7.8 ms for one 4-rank group), where the whole-node table
charged them W(4) = 3.1-4.0 ms [src: own-gloo-pair-wait-2026-11-25] [src: own-tp-group-probe]: a blocking exchange
waits on its partners' scheduling, and a pair has one partner however many processes share the cores.

Per-process-count tables (``((processes, µs), ...)`` in increasing count) are read by :func:`at_processes_s`: the
measured figure at a count, the straight line between two measured counts, the nearest measured count's outside
them (not extrapolated), 0 for an empty table.
"""

from __future__ import annotations

from simulator.checks import non_negative_number, positive_int
from simulator.errors import SpecError

PerProcesses = tuple[tuple[int, float], ...]
"""A per-process-count table of µs: ``((processes, µs), ...)`` in increasing process count."""


def check_per_processes(name: str, table: PerProcesses) -> None:
    """A per-process-count table: each count once, increasing, a whole number >= 1, its µs >= 0."""
    counts = [p for p, _ in table]
    if counts != sorted(set(counts)):
        raise SpecError(name, "give each process count once, in increasing order")
    for processes, us in table:
        positive_int(name, processes)
        non_negative_number(f"{name}.{processes}", us)


def check_per_group(name: str, tables: tuple[tuple[int, PerProcesses], ...]) -> None:
    """``comm.group_wait_us``: each group size once, increasing, >= 2; each its per-process-count table, whose counts
    exceed the group size (a group as large as the node is the node's whole group: ``blocking_wait_us``)."""
    sizes = [g for g, _ in tables]
    if sizes != sorted(set(sizes)):
        raise SpecError(name, "give each group size once, in increasing order")
    for size, table in tables:
        if not isinstance(size, int) or isinstance(size, bool) or size < 2:
            raise SpecError(name, f"keys are group sizes (whole numbers >= 2), got {size!r}")
        check_per_processes(f"{name}.{size}", table)
        if any(p <= size for p, _ in table):
            raise SpecError(f"{name}.{size}", f"give process counts above the group size {size} (a group of all the "
                                              "node's processes waits as comm.blocking_wait_us says)")


def at_processes_s(table: PerProcesses, processes: int) -> float:
    """``table`` (µs) read at ``processes``, seconds (module docstring)."""
    if not table:
        return 0.0
    if processes <= table[0][0]:
        return table[0][1] * 1e-6
    for (p0, w0), (p1, w1) in zip(table, table[1:]):
        if processes <= p1:
            return (w0 + (w1 - w0) * (processes - p0) / (p1 - p0)) * 1e-6
    return table[-1][1] * 1e-6


def call_wait_s(whole: PerProcesses, groups: tuple[tuple[int, PerProcesses], ...], processes: int,
                group_size: int | None = None) -> float:
    """Expected wait of one blocking call of a ``group_size``-rank group on a node of ``processes`` processes, seconds
    (module docstring): ``whole`` is the op's whole-node table (its own or the default), ``groups`` the measured
    group sizes' tables. E.g. whole ``((2, 1000), (4, 3000))``, groups ``((2, ((4, 800),)),)``: a pair waits 800 µs
    at 4 processes, 900 at 3, 1000 at 2; a group of 3 on 4 processes (not measured) 3000."""
    table = dict(groups).get(group_size) if group_size is not None and group_size < processes else None
    if table is None:
        return at_processes_s(whole, processes)
    anchor_us = at_processes_s(whole, group_size) * 1e6
    return at_processes_s(((group_size, anchor_us),) + table, processes)
