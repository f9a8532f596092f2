"""A folded run of shortcut 9 (:mod:`simulator.engine.fold`) as one event, and its unfold.

- :class:`_Call` is how a foldable call ends if started at ``t`` (a delay, one plan's lone flows, or a call
  shortcut 10 plays as a delay), with the same float additions as the step-by-step play;
- :class:`Fold` is a run of an action's items played as one event at its predicted end, its calls' resources
  reserved; when a flow arrives on them, :meth:`Fold.unfold` puts back the item in progress at that instant
  (a call with replicas through :func:`~simulator.engine.fold_calls.resume`) and the rank goes on step by step.

:class:`~simulator.engine.fold.Folder` predicts the runs and builds them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from heapq import heappush
from typing import TYPE_CHECKING

import simpy

from simulator.cluster.topology import Path
from simulator.engine.flows import Flow, _Group
from simulator.engine.fold_calls import resume
from simulator.engine.network import FlowNetwork
from simulator.engine.settle_clock import _Settle, alone_finishes, schedule_at

if TYPE_CHECKING:
    from simulator.engine.fold import Folder


@dataclass(frozen=True)
class _Call:
    """How a foldable call runs: a delay (``delay_s``), or one plan's flows."""

    delay_s: float | None
    pre_s: float = 0.0
    gamma_s: float = 0.0
    items: tuple = ()
    """(path, wire bytes, latency 0.0) of its one step, as :meth:`FlowNetwork.transfer_all` takes them."""
    rates: tuple[float, ...] = ()
    """Each flow's bottleneck, B/s: its rate alone."""
    res: tuple[int, ...] = ()
    """Every resource its flows cross (no repeats: the flows share none)."""
    alone_s: float | None = None
    """``bytes / rate``, the same for every flow (a ring's), else None."""
    shape: object = None
    """A call shortcut 10 plays as a delay (replicas, several steps, shared resources): its
    :class:`~simulator.engine.callfold_shapes._Shape` (:mod:`simulator.engine.fold_calls`); ``res`` are its
    resources."""

    def t1(self, start_s: float) -> float:
        """When its flows become active (:func:`~simulator.engine.replay_work._replay`'s delay first)."""
        return start_s + self.pre_s if self.pre_s > 0 else start_s

    def finishes(self, t1: float) -> list[float]:
        """When each flow completes, alone (:func:`alone_finishes`)."""
        if self.alone_s is not None:
            due = t1 + self.alone_s
            return [t1 + max(due - t1, 0.0)] * len(self.items)
        return alone_finishes(t1, [t1 + b / rate for (_, b, _), rate in zip(self.items, self.rates)])

    def end_s(self, start_s: float) -> float:
        """When it ends if started at ``start_s``: the same float additions as the step-by-step play."""
        if self.delay_s is not None:
            return start_s + self.delay_s
        t1 = start_s + self.pre_s if self.pre_s > 0 else start_s
        if not self.items:
            end = t1
        elif self.alone_s is not None:  # one due for every flow: one wake-up
            due = t1 + self.alone_s
            end = t1 + max(due - t1, 0.0)
        else:
            end = max(self.finishes(t1))
        return end + self.gamma_s if self.gamma_s > 0 else end

    def ends_in_settle(self) -> bool:
        """Its end is the settle that completes its flows (no γ after them); a shape's, its settle-priority
        timer."""
        if self.shape is not None:
            return self.shape.rep_in_settle
        return self.delay_s is None and bool(self.items) and not self.gamma_s > 0


class Fold:
    """A folded run of items ``first .. first + len(ends) − 1`` of an action (see :mod:`simulator.engine.fold`);
    ``done`` fires with the number of items played as predicted, the item after them (if any) having
    ended at the firing time. Item ``first + k`` starts at ``ends[k − 1]`` (``start_s`` for k = 0)."""

    __slots__ = ("folder", "calls", "first", "start_s", "ends", "done", "res", "alive", "seg_s")

    def __init__(self, folder: "Folder", calls: list, first: int, start_s: float, ends: list[float],
                 res: tuple[int, ...], seg_s: float, mask: int | None = None):
        self.folder, self.calls, self.first, self.start_s, self.ends, self.res, self.seg_s = \
            folder, calls, first, start_s, ends, res, seg_s
        env = folder.env
        self.done = simpy.Event(env)
        self.alive = True
        timer = simpy.Event(env)
        timer._ok, timer._value = True, None
        timer.callbacks.append(self._end)
        schedule_at(env, timer, 1, ends[-1])  # NORMAL, as a timeout's
        folder.net.reserve(self, res, mask)  # mask: the bit mask of res, when the folder has it

    def _end(self, _event) -> None:
        if self.alive:
            self.alive = False
            self.folder.net.release(self, self.res)
            self.done.succeed(len(self.ends))

    def start_of(self, k: int) -> float:
        return self.ends[k - 1] if k else self.start_s

    def next_item(self, played: int) -> int:
        """The action's item to go on with after ``played`` items (and the one in progress, if any)."""
        return self.first + min(played + 1, len(self.ends))

    def _call(self, k: int) -> _Call | None:
        item = self.first + k
        return self.calls[item // 2] if item % 2 else None

    def unfold(self, arrivals: list) -> None:
        """Called by the network's settle at ``now`` when a flow arrives on a reserved resource: the item in
        progress in the step-by-step play (every non-settle event up to ``now`` processed; a call without γ
        ends inside the settle that completes its flows, so it is in progress at its own end) goes on."""
        folder, env = self.folder, self.folder.env
        now = env.now
        self.alive = False
        folder.net.release(self, self.res)
        folder.unfolds += 1
        k = 0
        while True:
            call, end = self._call(k), self.ends[k]
            if end > now or (end == now and call is not None and call.ends_in_settle()):
                break
            k += 1
        if call is not None and call.shape is not None:
            resume(folder.runner.callfolder, call.shape, self.start_of(k), arrivals).callbacks.append(
                lambda _e: self.done.succeed(k))
            return
        if call is None or call.delay_s is not None or not call.items:
            self._until(end, k)
            return
        t1 = call.t1(self.start_of(k))
        finishes = call.finishes(t1)
        if now < t1:  # its flows start at t1, as _replay starts them
            self._at(t1).callbacks.append(lambda _e: self._after(folder.net.transfer_all(call.items), call, k))
        elif max(finishes) >= now:
            self._after(adopt(folder.net, list(call.items), t1, finishes, arrivals), call, k)
        else:
            self._until(end, k)

    def _at(self, at: float) -> simpy.Event:
        event = simpy.Event(self.folder.env)
        event._ok, event._value = True, None
        schedule_at(self.folder.env, event, 1, at)
        return event

    def _until(self, end_s: float, k: int) -> None:
        """Item ``k`` ends at ``end_s`` (a segment, a delay, a call's γ)."""
        self._at(end_s).callbacks.append(lambda _e: self.done.succeed(k))

    def _after(self, flows: simpy.Event, call: _Call, k: int) -> None:
        """Item ``k`` ends when ``flows`` are done, then its γ."""
        def then(_e) -> None:
            if call.gamma_s > 0:
                self.folder.env.timeout(call.gamma_s).callbacks.append(lambda _g: self.done.succeed(k))
            else:
                self.done.succeed(k)

        flows.callbacks.append(then)


def adopt(net: FlowNetwork, items: list[tuple[Path, float, float]], t1: float, finishes: list[float],
          arrivals: list[Flow]) -> simpy.Event:
    """Put back on ``net`` flows that a run played off the network: ``items`` started at ``t1`` (latency 0), alone
    on resources no other flow shares, completing at ``finishes`` (:func:`alone_finishes`). Called from
    the settle at ``now`` (before its due flows are collected): the state the network would hold had it
    played them — flows done before now are gone, flows active since ``t1 < now`` run at their
    bottleneck with their predicted finish filed and the wake-up due, flows arriving now (``t1 == now``)
    join ``arrivals``. The event fires when the last is done, as :meth:`FlowNetwork.transfer_all`'s."""
    now = net.env.now
    event = simpy.Event(net.env)
    flows: list[Flow] = []
    group = _Group(event, flows, False)
    fid = net.stats.flows
    res_flows, buckets, times = net._res_flows, net._due, net._due_times
    wake = math.inf
    for (path, nbytes, _), done_s in zip(items, finishes):
        if done_s < now:
            continue
        route = net._route(path)
        flow = net._new_flow(fid, route, nbytes, t1, group)
        fid += 1
        flows.append(flow)
        if t1 == now:
            arrivals.append(flow)
            continue
        flow.active, flow.active_s, flow.t_last = True, t1, t1
        flow.rate, flow.version = route.bottleneck_Bps, 1
        for r in route.res:
            res_flows[r][flow.fid] = flow
        net._active += 1
        t = t1 + flow.remaining / flow.rate
        bucket = buckets.get(t)
        if bucket is None:
            buckets[t] = [(flow, 1)]
            heappush(times, t)
        else:
            bucket.append((flow, 1))
        if done_s > now:
            wake = min(wake, done_s)
    net.stats.flows = fid
    net._activated([f for f in flows if f.active])
    group.left = len(flows)
    if not flows:
        raise ValueError("adopt: every flow is already done")
    if wake < math.inf and (net._wake_at is None or wake < net._wake_at):
        net._wake_at = wake
        net._wake = _Settle(net.env, net._settle, 0.0, at=wake)
    return event
