"""Flow-level network on SimPy: concurrent transfers share link bandwidth max-min fairly.

Model (the flow-level model of SimGrid, Velho & Legrand et al., "On the validity of flow-level TCP
network models for grid and cloud simulations", ACM TOMACS 2013; /work/shared/reference/network.md
"How contention is modelled elsewhere"):

- A transfer (a *flow*) of ``b`` bytes over a :class:`~simulator.cluster.topology.Path` first waits
  its latency ``α`` using no bandwidth, then becomes *active*.
- Active flows share every resource they cross (``hop.resource``, one directional link instance of
  capacity ``hop.link.bw_Bps``) by max-min fairness, computed by progressive filling: the resource
  with the smallest fair share ``capacity_left / unfixed_flows`` fixes its unfixed flows at that
  share, their rates are taken off the other resources they cross, and so on until every flow is
  fixed (Bertsekas & Gallager, "Data Networks", §6.5.2).
- Rates are recomputed whenever a flow starts or ends; between two such instants every rate is
  constant, so a flow alone on its path finishes at ``α + b / bottleneck`` (cut-through).

Implementation:
- Only the flows *connected* to a change (sharing a resource, transitively) are re-rated, so
  independent transfers (a ring step's disjoint links) cost O(their own path length).
- All starts and ends at one instant are settled together by one *settle* event scheduled at a
  priority below SimPy's NORMAL, so it runs after every ordinary event of that instant: a step's
  1024 transfers that start together are rated once, not 1024 times.
- The next completion comes from a heap of predicted finish times with a version per flow (a
  re-rated flow's old entry is stale and skipped), and one pending wake-up at the earliest.
- A flow completes when its remaining bytes are within ``REL_BYTES_TOL`` of its size, or within
  what its rate moves in a few ulps of the clock (the clock cannot resolve finer); it is never
  left with negative bytes. Ties are broken by flow creation order: deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from typing import Iterable

import simpy

from simulator.cluster.topology import Path
from simulator.errors import SpecError

SETTLE_PRIORITY = 2
"""SimPy event priority of a settle: after URGENT (0) and NORMAL (1), so one settle sees every flow
start and end of its instant, including transfers that processes start in reaction to them."""
REL_BYTES_TOL = 1e-12
"""A flow with at most this fraction of its bytes left is complete (rounding of the rate integral)."""
CLOCK_ULPS = 16
"""A flow due within this many ulps of the current time is complete: the clock's float resolution."""


class Flow:
    """One transfer and its progress; the value of its completion event. Read-only for callers."""

    __slots__ = ("fid", "path", "nbytes", "res", "remaining", "rate", "t_last", "version", "group",
                 "start_s", "active_s", "finish_s", "delivered_bytes", "active", "mark")

    def __init__(self, fid: int, path: Path, nbytes: float, res: tuple[int, ...], start_s: float, group):
        self.fid = fid
        """Creation order (ties are broken by it)."""
        self.path = path
        self.nbytes = nbytes
        self.res = res
        self.remaining = nbytes
        self.rate = 0.0
        """Current rate, bytes/s (0 while waiting its latency)."""
        self.t_last = start_s
        self.version = 0
        self.group = group
        self.start_s = start_s
        """When :meth:`FlowNetwork.transfer` was called, s."""
        self.active_s = math.nan
        """When its latency ended and it began to use bandwidth, s."""
        self.finish_s = math.nan
        """When its last byte arrived, s."""
        self.delivered_bytes = 0.0
        """Integral of its rate over time: equals ``nbytes`` within ``REL_BYTES_TOL`` at the end."""
        self.active = False
        self.mark = 0


class _Group:
    """Flows whose joint completion one event reports."""

    __slots__ = ("event", "left", "flows", "single")

    def __init__(self, event: simpy.Event, flows: list[Flow], single: bool):
        self.event, self.left, self.flows, self.single = event, len(flows), flows, single


class _Settle(simpy.Event):
    """A triggered event at SETTLE_PRIORITY (as SimPy's own Timeout/Initialize set ``_ok``/``_value``)."""

    def __init__(self, env: simpy.Environment, callback, delay: float):
        super().__init__(env)
        self._ok = True
        self._value = None
        self.callbacks.append(callback)
        env.schedule(self, SETTLE_PRIORITY, delay)


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


class FlowNetwork:
    """Transfers over topology paths sharing link bandwidth max-min fairly, on a SimPy environment."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.stats = NetworkStats()
        self._res_index: dict[tuple, int] = {}
        self._cap: list[float] = []
        self._res_flows: list[dict[int, Flow]] = []
        self._routes: dict[int, tuple[Path, tuple[int, ...]]] = {}
        self._arrivals: dict[float, list[Flow]] = {}
        self._arrival_times: list[float] = []
        self._due: list[tuple[float, int, int, Flow]] = []
        self._wake_at: float | None = None
        self._stamp = 0
        self._active = 0

    # ---- public API -------------------------------------------------------------------------

    def transfer(self, path: Path, nbytes: float, latency_s: float | None = None) -> simpy.Event:
        """Send ``nbytes`` over ``path``; the event fires (value: the :class:`Flow`) on the last byte.

        ``latency_s`` replaces ``path.latency_s`` (a protocol's per-hop latency).
        """
        return self._start([(path, nbytes, latency_s)], single=True)

    def transfer_all(self, items: Iterable[tuple[Path, float, float | None]]) -> simpy.Event:
        """Start several transfers ``(path, nbytes, latency_s or None)`` at once.

        The event fires when the last of them is done; its value is their :class:`Flow` list, in order.
        Cheaper than one event per transfer when a caller waits for all of them anyway.
        """
        return self._start(items, single=False)

    @property
    def active_flows(self) -> int:
        """Flows using bandwidth now."""
        return self._active

    # ---- flow lifecycle -----------------------------------------------------------------------

    def _start(self, items: Iterable[tuple[Path, float, float | None]], single: bool) -> simpy.Event:
        now = self.env.now
        checked = []
        for path, nbytes, latency_s in items:
            latency = path.latency_s if latency_s is None else latency_s
            _check(nbytes, latency)
            checked.append((path, float(nbytes), float(latency), self._route(path)))
        event = simpy.Event(self.env)
        flows: list[Flow] = []
        group = _Group(event, flows, single)
        for path, nbytes, latency, route in checked:
            flow = Flow(self.stats.flows, path, nbytes, route, now, group)
            self.stats.flows += 1
            flows.append(flow)
            self._arrive_at(now + latency, latency, flow)
        group.left = len(flows)
        if not flows:
            event.succeed(flows)
        return event

    def _route(self, path: Path) -> tuple[int, ...]:
        cached = self._routes.get(id(path))
        if cached is not None and cached[0] is path:
            return cached[1]
        res: list[int] = []
        for hop in path.hops:
            idx = self._res_index.get(hop.resource)
            bw = hop.link.bw_Bps
            if idx is None:
                idx = self._res_index[hop.resource] = len(self._cap)
                self._cap.append(bw)
                self._res_flows.append({})
            elif not math.isclose(self._cap[idx], bw, rel_tol=1e-12):
                raise SpecError("path", f"resource {hop.resource} has bandwidth {bw} B/s here and "
                                f"{self._cap[idx]} B/s elsewhere; one link instance has one bandwidth")
            if idx not in res:
                res.append(idx)
        if not res:
            raise SpecError("path", "a path needs at least one hop")
        route = tuple(res)
        self._routes[id(path)] = (path, route)  # keeps the path alive, so its id stays unique
        return route

    def _arrive_at(self, t: float, delay: float, flow: Flow) -> None:
        batch = self._arrivals.get(t)
        if batch is not None:
            batch.append(flow)
            return
        self._arrivals[t] = [flow]
        heappush(self._arrival_times, t)
        self._schedule_settle(delay)

    def _schedule_settle(self, delay: float) -> None:
        _Settle(self.env, self._settle, delay)

    def _settle(self, _event=None) -> None:
        """Apply every start and end due now, re-rate the flows they touch, and plan the next wake."""
        now = self.env.now
        self.stats.settles += 1
        if self._wake_at is not None and self._wake_at <= now:
            self._wake_at = None
        arrivals: list[Flow] = []
        while self._arrival_times and self._arrival_times[0] <= now:
            arrivals.extend(self._arrivals.pop(heappop(self._arrival_times)))
        slack = CLOCK_ULPS * math.ulp(now)
        due: list[Flow] = []
        heap = self._due
        while heap and heap[0][0] <= now + slack:
            _, _, version, flow = heappop(heap)
            if flow.active and flow.version == version:
                due.append(flow)
        if arrivals or due:
            self._apply(now, slack, arrivals, due)
        self._plan_wake(now)

    def _apply(self, now: float, slack: float, arrivals: list[Flow], due: list[Flow]) -> None:
        seeds = {r: None for f in due for r in f.res}
        seeds.update((r, None) for f in arrivals for r in f.res)
        self._stamp += 1
        due_stamp = self._stamp
        for f in due:
            f.mark = due_stamp
        finished: list[Flow] = []
        rerate: list[Flow] = []
        for f in self._component(seeds):
            moved = f.rate * (now - f.t_last)
            rem = f.remaining - moved
            f.delivered_bytes += moved
            if f.mark == due_stamp or rem <= REL_BYTES_TOL * f.nbytes or rem <= f.rate * slack:
                finished.append(f)
            else:
                f.remaining, f.t_last = rem, now
                rerate.append(f)
        res_flows = self._res_flows
        self._active -= len(finished)
        for f in finished:
            f.active = False
            for r in f.res:
                del res_flows[r][f.fid]
        for f in arrivals:
            f.active_s = f.t_last = now
            if f.nbytes <= 0:
                finished.append(f)
                continue
            f.active = True
            for r in f.res:
                res_flows[r][f.fid] = f
            rerate.append(f)
            self._active += 1
        self.stats.max_active = max(self.stats.max_active, self._active)
        self._rate(now, rerate)
        finished.sort(key=_fid)
        for f in finished:
            self._complete(now, f)

    def _component(self, seeds: dict[int, None]) -> list[Flow]:
        """Active flows reachable from the seed resources through shared resources (BFS)."""
        self._stamp += 1
        stamp = self._stamp
        seen = dict(seeds)
        stack = list(seeds)
        found: list[Flow] = []
        res_flows = self._res_flows
        while stack:
            for f in res_flows[stack.pop()].values():
                if f.mark != stamp:
                    f.mark = stamp
                    found.append(f)
                    for q in f.res:
                        if q not in seen:
                            seen[q] = None
                            stack.append(q)
        return found

    def _rate(self, now: float, flows: list[Flow]) -> None:
        """Set max-min fair rates of ``flows`` (a union of components) and push their finish times."""
        if not flows:
            return
        self.stats.rerated_flows += len(flows)
        old = [f.rate for f in flows]
        self._stamp += 1
        _max_min(flows, self._cap, self._stamp)
        heap = self._due
        for f, before in zip(flows, old):
            if f.rate != before:  # an unchanged rate keeps its (still exact) heap entry
                f.version += 1
                heappush(heap, (now + f.remaining / f.rate, f.fid, f.version, f))

    def _complete(self, now: float, flow: Flow) -> None:
        flow.remaining, flow.rate, flow.finish_s = 0.0, 0.0, now
        group = flow.group
        group.left -= 1
        if group.left == 0:
            group.event.succeed(group.flows[0] if group.single else group.flows)

    def _plan_wake(self, now: float) -> None:
        heap = self._due
        while heap and not (heap[0][3].active and heap[0][3].version == heap[0][2]):
            heappop(heap)
        if not heap:
            return
        t = heap[0][0]
        if self._wake_at is not None and self._wake_at <= t:
            return
        self._wake_at = t
        self._schedule_settle(max(t - now, 0.0))


def _max_min(flows: list[Flow], cap: list[float], stamp: int) -> None:
    """Progressive filling: fix flows at the most constrained resource's share, repeat.

    Sets ``f.rate`` of every flow; uses ``f.mark = stamp`` to tell fixed flows. O(H log H) for H hops.
    """
    members: dict[int, list[Flow]] = {}
    hops = 0
    for f in flows:
        hops += len(f.res)
        for r in f.res:
            m = members.get(r)
            if m is None:
                members[r] = [f]
            else:
                m.append(f)
    if hops == len(members):  # no resource shared: each flow runs at its bottleneck
        for f in flows:
            f.rate = min(cap[r] for r in f.res)
        return
    left = {r: cap[r] for r in members}
    count = {r: len(m) for r, m in members.items()}
    version = dict.fromkeys(members, 0)
    heap = [(left[r] / n, r, 0) for r, n in count.items()]
    heapify(heap)
    while heap:
        share, r, v = heappop(heap)
        if v != version[r] or count[r] == 0:
            continue
        count[r] = 0
        share = max(share, cap[r] * 1e-15)  # float guard: a share is positive in exact arithmetic
        for f in members[r]:
            if f.mark == stamp:
                continue
            f.mark = stamp
            f.rate = share
            for q in f.res:
                if q != r:
                    left[q] -= share
                    count[q] -= 1
                    version[q] += 1
                    if count[q]:
                        heappush(heap, (max(left[q], 0.0) / count[q], q, version[q]))


def _check(nbytes: float, latency: float) -> None:
    if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 0):
        raise SpecError("nbytes", f"a transfer needs a finite, non-negative byte count, got {nbytes!r}")
    if not (math.isfinite(latency) and latency >= 0):
        raise SpecError("latency_s", f"must be finite and non-negative, got {latency!r}")


def _fid(flow: Flow) -> int:
    return flow.fid
