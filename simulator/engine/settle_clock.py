"""The flow network's instants on the SimPy clock (:mod:`simulator.engine.network`): the settle event that applies
an instant's flow starts and ends after every ordinary event of it, scheduling at an absolute time, and when
flows alone on their links complete (the wake-ups a settle plans and its completion rule)."""

from __future__ import annotations

import math
from heapq import heappush

import simpy

SETTLE_PRIORITY = 2
"""SimPy event priority of a settle: after URGENT (0) and NORMAL (1), so one settle sees every flow
start and end of its instant, including transfers that processes start in reaction to them."""
CLOCK_ULPS = 16
"""A flow due within this many ulps of the current time is complete: the clock's float resolution."""


class _Settle(simpy.Event):
    """A triggered event at SETTLE_PRIORITY (as SimPy's own Timeout/Initialize set ``_ok``/``_value``);
    ``at`` (absolute time) instead of ``delay``: see :func:`schedule_at`."""

    def __init__(self, env: simpy.Environment, callback, delay: float, at: float | None = None):
        super().__init__(env)
        self._ok = True
        self._value = None
        self.callbacks.append(callback)
        if at is None:
            env.schedule(self, SETTLE_PRIORITY, delay)
        else:
            schedule_at(env, self, SETTLE_PRIORITY, at)


def schedule_at(env: simpy.Environment, event: simpy.Event, priority: int, at: float) -> None:
    """Schedule ``event`` at the absolute time ``at`` (not ``now + (at − now)``, which can round an ulp off).

    SimPy's queue entry is ``(time, priority, event id, event)`` (``Environment.schedule`` in simpy/core.py,
    SimPy 4.1); this pushes one with ``at`` as its time. Used to replay a time the engine computed ahead
    (:mod:`simulator.engine.fold`) at exactly the float the step-by-step simulation would reach.
    """
    if at < env.now:
        raise ValueError(f"cannot schedule at {at!r} before now ({env.now!r})")
    heappush(env._queue, (at, priority, next(env._eid), event))


def alone_finishes(t1: float, dues: list[float]) -> list[float]:
    """When each of flows that became active at ``t1`` with predicted finishes ``dues`` (``t1 + bytes/rate``)
    completes, if nothing else shares their resources and none shares one with another: the wake-ups
    :meth:`~simulator.engine.network.FlowNetwork._plan_wake` schedules (``now + (due − now)`` from the previous settle) and the
    settles' rule that a flow due within ``CLOCK_ULPS`` ulps of the settle's time completes there.
    """
    order = sorted(set(dues))
    at: dict[float, float] = {}
    now, i = t1, 0
    while i < len(order):
        wake = now + max(order[i] - now, 0.0)
        limit = wake + CLOCK_ULPS * math.ulp(wake)
        while i < len(order) and order[i] <= limit:
            at[order[i]] = wake
            i += 1
        now = wake
    return [at[d] for d in dues]
