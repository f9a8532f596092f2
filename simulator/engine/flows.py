"""A flow on the flow network (:mod:`simulator.engine.network`) and what it is filed under: its route (a path as
resource indices), the group whose joint completion one event reports, and the network's work counters."""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from simulator.cluster.topology import Path


class Flow:
    """One transfer and its progress; the value of its completion event. Read-only for callers."""

    __slots__ = ("fid", "path", "nbytes", "res", "bottleneck_Bps", "remaining", "rate", "t_last", "version",
                 "group", "start_s", "active_s", "finish_s", "delivered_bytes", "active", "mark", "due")

    def __init__(self, fid: int, route: "_Route", nbytes: float, start_s: float, group: "_Group"):
        self.fid = fid
        """Creation order (ties are broken by it)."""
        self.path = route.path
        self.res = route.res
        self.bottleneck_Bps = route.bottleneck_Bps
        self.nbytes = self.remaining = nbytes
        self.rate = 0.0
        """Current rate, bytes/s (0 while waiting its latency, and once done)."""
        self.t_last = self.start_s = start_s
        """``start_s``: when the transfer was asked for, s."""
        self.version = self.mark = self.due = 0
        self.group = group
        """The group whose event reports its completion; None once it is done (the flow then lets go of it, so
        finished flows and their groups leave no reference cycle for the collector)."""
        self.active_s = self.finish_s = math.nan
        """``active_s``: when its latency ended and it began to use bandwidth; ``finish_s``: its last byte, s."""
        self.delivered_bytes = 0.0
        """Integral of its rate over time: ``nbytes`` at the end, within ``REL_BYTES_TOL`` or what its rate
        moves in a few ulps of the clock (the float resolution of the intervals it is measured over)."""
        self.active = False


class _Route:
    """A path as resource indices, with its bottleneck capacity (cached per Path object)."""

    __slots__ = ("path", "res", "bottleneck_Bps")

    def __init__(self, path: Path, res: tuple[int, ...], bottleneck_Bps: float):
        self.path, self.res, self.bottleneck_Bps = path, res, bottleneck_Bps


class _Group:
    """Flows whose joint completion one event reports."""

    __slots__ = ("event", "left", "flows", "single")

    def __init__(self, event: simpy.Event, flows: list[Flow], single: bool):
        self.event, self.left, self.flows, self.single = event, len(flows), flows, single


@dataclass
class NetworkStats:
    """Counters for benchmarks: how much work the engine did."""

    flows: int = 0
    """Flows created."""
    settles: int = 0
    """Settle events processed (flow starts/ends batched per instant, and wake-ups)."""
    rerated_flows: int = 0
    """Sum over settles of flows whose rate was recomputed."""
    max_active: int = 0
    """Most flows active at once."""
