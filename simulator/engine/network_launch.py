"""Starting transfers on the flow network (:class:`~simulator.engine.network.FlowNetwork` mixes :class:`Launching`
in): the public ``transfer`` calls, a plan step's items checked and routed once per step list, the flows made and
filed to arrive after their latency, and a settle scheduled at each new arrival instant. What happens once they
arrive (activation, max-min re-rating, completion) stays in :mod:`simulator.engine.network`."""

from __future__ import annotations

import math
from heapq import heappush
from typing import Iterable

import simpy

from simulator.cluster.topology import Path
from simulator.engine.flows import Flow, _Group, _Route
from simulator.engine.settle_clock import _Settle


class Launching:
    """Transfer-starting part of :class:`~simulator.engine.network.FlowNetwork` (on its ``env``, ``stats``,
    ``_steps``, ``_arrivals``, ``_arrival_times`` and ``_settle``; items checked by
    :meth:`~simulator.engine.network_holding.Holding._checked`)."""


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

    def transfer_step(self, step: list[tuple[Path, float, float | None]]) -> simpy.Event:
        """:meth:`transfer_all` of a plan's step, a list its plan keeps and never changes: its items are checked
        and routed once per network (and the scratch networks that share its routes), then each start only
        makes the flows (a tree step's ~2k flows are started on the main network and in replays)."""
        return self._launch(self.checked_step(step), single=False)

    def checked_step(self, step: list[tuple[Path, float, float | None]]) -> tuple[tuple, tuple, tuple]:
        """A plan step's routes, bytes and latencies (:meth:`_checked`), kept per step list (:meth:`transfer_step`)."""
        entry = self._steps.get(id(step))
        if entry is None or entry[0] is not step:
            routes, nbytes, latencies = self._checked(step)
            entry = self._steps[id(step)] = (step, (tuple(routes), tuple(nbytes), tuple(latencies)))  # step kept
        return entry[1]

    def _start(self, items: Iterable[tuple[Path, float, float | None]], single: bool) -> simpy.Event:
        return self._launch(self._checked(items), single)

    def _launch(self, checked: tuple[list, list, list], single: bool) -> simpy.Event:
        """Start the flows of checked items (:meth:`_checked`) now."""
        now = self.env.now
        event = simpy.Event(self.env)
        group = _Group(event, [], single)
        flows = group.flows = self._new_flows(self.stats.flows, checked[0], checked[1], now, group)
        latencies = checked[2]
        if flows and min(latencies) == max(latencies):  # one latency (a plan step's 0.0): the loop's one batch
            self._arrival_batch(now + latencies[0], latencies[0]).extend(flows)
        else:
            last_t, batch = math.nan, None  # a run of flows with one latency: one lookup for the run of them
            for flow, latency in zip(flows, latencies):
                t = now + latency
                if t != last_t:
                    last_t, batch = t, self._arrival_batch(t, latency)
                batch.append(flow)
        self.stats.flows += len(flows)
        group.left = len(flows)
        if not flows:
            event.succeed(flows)
        return event

    def _arrival_batch(self, t: float, latency: float) -> list[Flow]:
        """The flows arriving at ``t`` (``latency`` from now), a settle scheduled there when it is a new instant."""
        batch = self._arrivals.get(t)
        if batch is None:
            batch = self._arrivals[t] = []
            heappush(self._arrival_times, t)
            _Settle(self.env, self._settle, latency)
        return batch

    def _new_flow(self, fid: int, route: _Route, nbytes: float, start_s: float, group: _Group | None) -> Flow:
        """A flow of this network (:class:`~simulator.engine.network_store.StoredNetwork` keeps its state in arrays)."""
        return Flow(fid, route, nbytes, start_s, group)

    def _new_flows(self, fid: int, routes: list, nbytes: list, start_s: float, group: _Group) -> list[Flow]:
        """Flows numbered from ``fid`` on ``routes`` with ``nbytes``, started at ``start_s`` (:meth:`_new_flow`'s)."""
        return [Flow(fid + k, route, b, start_s, group) for k, (route, b) in enumerate(zip(routes, nbytes))]
