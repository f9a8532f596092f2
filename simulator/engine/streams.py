"""Bookkeeping of the step DES: an event-counting environment, the timeline, per-rank time accounts.

Every simulated rank runs one *main* process (its compute stream, which also waits on whatever
blocks compute); side streams (pp, dp, host, cpu, zero, data) run as processes of their own. The
main process's time is accounted to exactly one :class:`~simulator.results.Category` at every
instant (compute, exposed communication, bubble, straggler wait), so a rank's account adds up to
its step time by construction.
"""

from __future__ import annotations

from collections import defaultdict, deque

import pandas as pd
import simpy

from simulator.results import Category
from simulator.trace import TIMELINE_COLUMNS
from simulator.work import CommKind

KIND_CATEGORY = {CommKind.TP: Category.TP, CommKind.EP: Category.EP, CommKind.PP: Category.PP, CommKind.DP: Category.DP,
                 CommKind.ZERO: Category.ZERO, CommKind.PS: Category.PS, CommKind.OFFLOAD: Category.OFFLOAD,
                 CommKind.DATA: Category.DATA, CommKind.CP: Category.TP}
"""Where exposed time of each communication kind is booked."""

KIND_STREAM = {CommKind.TP: "tp", CommKind.EP: "tp", CommKind.PP: "pp", CommKind.DP: "dp", CommKind.ZERO: "dp",
               CommKind.PS: "dp", CommKind.OFFLOAD: "host", CommKind.DATA: "data", CommKind.CP: "tp"}
"""Stream a call runs on: TP, EP and CP block compute (the "tp" track), p2p on "pp", DP/ZeRO/PS on "dp"
(overlapping backward), host copies on "host"."""


class CountingEnv(simpy.Environment):
    """A SimPy environment that counts the events it processes (for the benchmark's events/s)."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


class Recorder:
    """Timeline rows and per-rank category accounts."""

    def __init__(self, trace: bool):
        self.trace = trace
        self.rows: list[tuple] = []
        self.accounts: dict[tuple, dict[Category, float]] = defaultdict(lambda: defaultdict(float))
        """(pipe key, stage) → seconds per category, summed over steps."""

    def row(self, rank: int, stream: str, name: str, category: Category, start_s: float, end_s: float,
            microbatch: int = -1, stage: int = -1) -> None:
        if self.trace and end_s > start_s:
            self.rows.append((rank, stream, name, category.value, start_s, end_s, microbatch, stage))

    def spend(self, who: tuple, category: Category, seconds: float) -> None:
        if seconds > 0:
            self.accounts[who][category] += seconds

    def wait(self, who: tuple, t0: float, t1: float, blocked_until: float, first: Category,
             rest: Category) -> None:
        """Book a wait ``[t0, t1]``: until ``blocked_until`` as ``first``, the remainder as ``rest``."""
        split = min(max(blocked_until, t0), t1)
        self.spend(who, first, split - t0)
        self.spend(who, rest, t1 - split)

    def timeline(self) -> pd.DataFrame:
        df = pd.DataFrame(self.rows, columns=list(TIMELINE_COLUMNS))
        return df.sort_values(["start_s", "rank", "stream"], kind="stable").reset_index(drop=True)


class Barrier:
    """A synchronisation point of ``needed`` parties; ``released`` fires when the last arrives."""

    __slots__ = ("needed", "arrived", "released", "arrive_s")

    def __init__(self, env: simpy.Environment, needed: int):
        self.needed, self.arrived = needed, 0
        self.released = simpy.Event(env)
        self.arrive_s: list[float] = []

    def arrive(self, now: float) -> bool:
        """Register one party; True for the last one (it triggers what follows)."""
        self.arrived += 1
        self.arrive_s.append(now)
        return self.arrived == self.needed


class SendStream:
    """A rank's pp stream: sends one at a time in the order they were asked for (FIFO), each starting the
    instant the previous one ends (:func:`simulator.engine.rank._p2p`)."""

    __slots__ = ("busy", "waiting")

    def __init__(self) -> None:
        self.busy = False
        self.waiting: deque = deque()
