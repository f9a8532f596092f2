"""CPU seconds this process and everything it started have used: the measure the suite's and the calibration's
"other work" check subtracts from the machine's busy time (:func:`executor.suite_run.foreign_fraction`).

``getrusage`` counts this process and the children it has waited for. Ranks forked from the launcher's forkserver
(:class:`executor.launch.StartMethod`) are the *server's* children: the server waits for them, so their time sits in
the server's waited-children counters, which ``getrusage`` never sees while the server lives. So the live direct
children's own and waited-children times (``/proc/PID/stat`` fields 14-17, utime, stime, cutime, cstime, in clock
ticks: proc(5)) are added. A child is counted once at any moment: alive, through ``/proc``; once waited for, through
``RUSAGE_CHILDREN``.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path


def _children_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid``'s live direct children and of the children they waited for (0 without /proc)."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while listed
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3
        if int(fields[1]) == pid:
            ticks += sum(int(f) for f in fields[11:15])  # fields 14-17: utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU seconds of everything this process started: waited-for children (``RUSAGE_CHILDREN``) and live children's
    process trees as their parents waited for them (module docstring)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + _children_cpu_s(os.getpid())


def own_cpu_s() -> float:
    """CPU seconds of this process and of everything it started (:func:`children_cpu_s`)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime + children_cpu_s()
