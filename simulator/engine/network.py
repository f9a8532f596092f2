"""Flow-level network on SimPy: concurrent transfers share link bandwidth max-min fairly.

Model (the flow-level model of SimGrid, Velho & Legrand et al., "On the validity of flow-level TCP
network models for grid and cloud simulations", ACM TOMACS 2013 [src: velho-2013]):

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
  re-rated flow's old entry is stale and skipped), and one pending wake-up at the earliest. The
  wake-up's own settle ends it, whatever the clock shows: SimPy lands it at ``now + (t − now)``,
  which can round an ulp below the predicted ``t``.
- A flow completes when its remaining bytes are within ``REL_BYTES_TOL`` of its size, or within
  what its rate moves in a few ulps of the clock (the clock cannot resolve finer); it is never
  left with negative bytes. Ties are broken by flow creation order: deterministic. A settle takes its due flows
  in that order too, not as filed: the walk (and the heap filler's ties) never depend on how finishes were filed.

A flow and its route and group are :mod:`simulator.engine.flows`; starting transfers (the public ``transfer`` calls)
:mod:`simulator.engine.network_launch`; what folding asks of the network (resources, idleness,
reservations) :mod:`simulator.engine.network_holding`; the settle event and scheduling at an absolute
instant :mod:`simulator.engine.settle_clock`; progressive filling :mod:`simulator.engine.fairshare`.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush
from itertools import chain
from operator import attrgetter

import simpy

from simulator.engine.fairshare import max_min
from simulator.engine.flows import Flow, NetworkStats, _Route
from simulator.engine.network_holding import Holding
from simulator.engine.network_launch import Launching
from simulator.engine.reservations import Reservations
from simulator.engine.settle_clock import CLOCK_ULPS, _Settle

REL_BYTES_TOL = 1e-12
"""A flow with at most this fraction of its bytes left is complete (rounding of the rate integral)."""


class FlowNetwork(Launching, Holding):
    """Transfers over topology paths sharing link bandwidth max-min fairly, on a SimPy environment."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.stats = NetworkStats()
        self._res_index: dict[tuple, int] = {}
        self._cap: list[float] = []
        self._res_flows: list[dict[int, Flow]] = []
        self._routes: dict[int, _Route] = {}
        self._arrivals: dict[float, list[Flow]] = {}
        self._arrival_times: list[float] = []
        self._due: dict[float, list[tuple[Flow, int]]] = {}
        self._due_times: list[float] = []
        self._wake_at: float | None = None
        """Predicted finish time the pending wake-up settle (``_wake``) was scheduled for."""
        self._wake: _Settle | None = None
        self._stamp = 0
        self._active = 0
        self._steps: dict[int, tuple[list, tuple]] = {}
        """id(plan step) → (the step, its checked routes, bytes and latencies): :meth:`transfer_step`."""
        self._reservations = Reservations()
        """Which holder (:class:`simulator.engine.fold_run.Fold`, a folded call) plays flows on which resources off
        the network; a flow arriving on one makes its holder put its state back first (``unfold``)."""

    @property
    def active_flows(self) -> int:
        """Flows using bandwidth now."""
        return self._active

    # ---- flow lifecycle -----------------------------------------------------------------------

    def _settle(self, event: simpy.Event) -> None:
        """Apply every start and end due now, re-rate the flows they touch, and plan the next wake."""
        now = self.env.now
        self.stats.settles += 1
        if event is self._wake or (self._wake_at is not None and self._wake_at <= now):
            # The wake-up is spent once its settle runs, even when the clock shows its time rounded
            # down (now < _wake_at); kept, it would stop _plan_wake from waking for later finishes.
            self._wake = self._wake_at = None
        arrivals: list[Flow] = []
        times = self._arrival_times
        while times and times[0] <= now:
            arrivals.extend(self._arrivals.pop(heappop(times)))
        if self._reservations.reserved and arrivals:
            self._unfold(arrivals)
        slack = CLOCK_ULPS * math.ulp(now)
        due = self._due_flows(now + slack)
        if arrivals or due:
            self._apply(now, slack, arrivals, due)
        self._plan_wake(now)

    def _activated(self, flows: list[Flow]) -> None:
        """Those of ``flows`` now active were just put in ``_res_flows`` (a store keeps their (flow, resource) pairs)."""

    def _due_flows(self, limit: float) -> list[Flow]:
        """The flows filed to finish by ``limit``, their buckets taken off (stale entries dropped)."""
        due: list[Flow] = []
        times, buckets = self._due_times, self._due
        while times and times[0] <= limit:
            for f, version in buckets.pop(heappop(times)):
                if f.version == version and f.active:
                    due.append(f)
        return due

    def _live(self, bucket: list) -> bool:
        """Whether a due bucket still holds an entry of an active flow filed at its current version."""
        return any(f.version == v and f.active for f, v in bucket)

    def _apply(self, now: float, slack: float, arrivals: list[Flow], due: list[Flow]) -> None:
        if len(due) > 1:
            due.sort(key=_fid)  # creation order, whatever order they were filed in (module docstring)
        # the due flows' resources, then the arrivals', each once in first-appearance order (C-speed)
        seeds = dict.fromkeys(chain(chain.from_iterable([f.res for f in due]),
                                    chain.from_iterable([f.res for f in arrivals])))
        self._stamp += 1
        due_stamp = self._stamp
        for f in due:
            f.due = due_stamp
        finished: list[Flow] = []
        rerate: list[Flow] = []
        finish, keep, tol = finished.append, rerate.append, REL_BYTES_TOL
        # Active flows reachable from the seeds through shared resources (depth-first over resources, each flow
        # in the order it is first met), each brought to now as it is met: its progress, and done or re-rated.
        self._stamp += 1
        stamp = self._stamp
        seen = set(seeds)
        stack = list(seeds)
        res_flows = self._res_flows
        pop, push, see = stack.pop, stack.append, seen.add  # bound once: the loop is per flow
        while stack:
            for f in res_flows[pop()].values():
                if f.mark != stamp:
                    f.mark = stamp
                    for q in f.res:
                        if q not in seen:
                            see(q)
                            push(q)
                    rate = f.rate
                    moved = rate * (now - f.t_last)
                    rem = f.remaining - moved
                    f.delivered_bytes += moved
                    if f.due == due_stamp or rem <= tol * f.nbytes or rem <= rate * slack:
                        finish(f)
                    else:
                        f.remaining, f.t_last = rem, now
                        keep(f)
        self._active -= len(finished)
        for f in finished:
            f.active = False
            fid = f.fid
            for r in f.res:
                del res_flows[r][fid]
        for f in arrivals:
            f.active_s = f.t_last = now
            if f.nbytes <= 0:
                finished.append(f)
                continue
            f.active = True
            fid = f.fid
            for r in f.res:
                res_flows[r][fid] = f
            rerate.append(f)
            self._active += 1
        if arrivals:
            self._activated(arrivals)
        if self._active > self.stats.max_active:
            self.stats.max_active = self._active
        self._rate(now, rerate)
        if len(finished) > 1:
            finished.sort(key=_fid)
        for f in finished:
            f.remaining, f.rate, f.finish_s = 0.0, 0.0, now
            group = f.group
            f.group = None  # no flow <-> group cycle left: the flows and their group go by reference count
            group.left -= 1
            if group.left == 0:
                group.event.succeed(group.flows[0] if group.single else group.flows)
        self._finished(finished)

    def _finished(self, flows: list[Flow]) -> None:
        """``flows`` just completed (a store lets go of them)."""

    def _rate(self, now: float, flows: list[Flow]) -> None:
        """Set max-min fair rates of ``flows`` (a union of components) and file their finish times.

        Finish times go into buckets by value, so a step's flows that end together cost one heap entry.
        """
        if not flows:
            return
        self.stats.rerated_flows += len(flows)
        old = [f.rate for f in flows]
        self._max_min(flows, self._cap)
        buckets, times = self._due, self._due_times
        get = buckets.get
        for f, before in zip(flows, old):
            rate = f.rate
            if rate != before:  # an unchanged rate keeps its (still exact) entry
                version = f.version = f.version + 1
                t = now + f.remaining / rate
                bucket = get(t)
                if bucket is None:
                    buckets[t] = [(f, version)]
                    heappush(times, t)
                else:
                    bucket.append((f, version))

    _max_min = staticmethod(max_min)  # progressive filling (a step_kinds.Weighted network chooses by a weighted count)

    def _plan_wake(self, now: float) -> None:
        """Make sure a settle is scheduled at the earliest predicted finish (dropping stale buckets)."""
        times, buckets = self._due_times, self._due
        while times and not self._live(buckets[times[0]]):
            del buckets[heappop(times)]
        if not times:
            return
        t = times[0]
        if self._wake_at is not None and self._wake_at <= t:
            return
        self._wake_at = t
        self._wake = _Settle(self.env, self._settle, max(t - now, 0.0))


_fid = attrgetter("fid")  # a flow's creation order, as a sort key

