"""The scratch replay behind folded calls (shortcut 10, :mod:`simulator.engine.callfold`): a call's plans played
with their phase kept, on a network of their own clock that numbers resources as the main one does.

- :class:`_Player` plays one plan as :func:`~simulator.engine.replay_work._play` plays it, keeping its phase
  (:data:`PRE`, :data:`STEP`, :data:`GAMMA`, :data:`DONE`) so a play begun on a scratch network can go on on
  the main one (:meth:`~simulator.engine.callfold._Folded.unfold`);
- :class:`_Scratch` and :func:`_scratch_play` are that scratch network and a play of a call's plans on it.

What the replays are memoised by (call shapes, signatures, steps chained) is :mod:`simulator.engine.callfold_shapes`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

import simpy

from simulator.engine.network import FlowNetwork

if TYPE_CHECKING:
    from simulator.engine.callfold import CallFolder

PRE, STEP, GAMMA, DONE = range(4)
"""A plan's phase: its fixed delay, a step's flows on the wire, its γ, finished."""


class _Player:
    """One plan played as :func:`~simulator.engine.replay_work._play` plays it (the same delays, the same
    transfers at the same instants), with its phase kept so a play begun on a scratch network can go on
    on the main one."""

    __slots__ = ("plan", "env", "net", "done", "start_s", "phase", "i", "until", "flows", "end_s", "refold")

    def __init__(self, env: simpy.Environment, net: FlowNetwork, plan, done: simpy.Event | None,
                 refold: "CallFolder | None" = None):
        self.plan, self.env, self.net, self.done = plan, env, net, done
        self.refold = refold
        """On the main network: the folder that may fold the plan's rest at a step's end (:meth:`CallFolder.rest`)."""
        self.start_s = env.now
        self.phase, self.i, self.until, self.flows, self.end_s = PRE, 0, math.nan, None, math.nan
        if plan.pre_s > 0:
            self._wait(plan.pre_s, PRE)
        else:
            self._run(0)

    def _wait(self, delay_s: float, phase: int) -> None:
        self.phase = phase
        self.until = self.env.now + delay_s  # the float Environment.schedule files the timeout at
        self.env.timeout(delay_s).callbacks.append(self._timer)

    def _timer(self, _event) -> None:
        if self.phase == PRE:
            self._run(0)
        else:
            self._finish()

    def _run(self, i: int) -> None:
        steps = self.plan.steps
        if i < len(steps):
            self.phase, self.i = STEP, i
            self.flows = self.net.transfer_step(steps[i])
            self.flows.callbacks.append(self._stepped)
        elif self.plan.gamma_s > 0:
            self._wait(self.plan.gamma_s, GAMMA)
        else:
            self._finish()

    def _stepped(self, _event) -> None:
        if self.refold is not None and self.i + 1 < len(self.plan.steps) and self.refold.rest(self):
            return
        self._run(self.i + 1)

    def _finish(self) -> None:
        self.phase, self.end_s = DONE, self.env.now
        if self.done is not None and not self.done.triggered:
            self.done.succeed(self.env.now - self.start_s)


class _Scratch(FlowNetwork):
    """A flow network on its own clock that numbers resources as ``main`` does (same indices, capacities and
    routes: the routes are the main network's, read without a copy)."""

    def __init__(self, env: simpy.Environment, main: FlowNetwork):
        super().__init__(env)
        self.main = main
        self._cap = main._cap
        self._routes = main._routes  # the main network's routes (what _route answers), read directly by _start
        self._steps = main._steps  # and its checked steps (routes in its numbering)
        self._res_flows = defaultdict(dict)

    def _route(self, path):
        return self.main._route(path)


def _scratch_play(main: FlowNetwork, plans, start_s: float):
    env = simpy.Environment(initial_time=start_s)
    net = _Scratch(env, main)
    rep_done = simpy.Event(env)
    players = [_Player(env, net, plan, rep_done if i == 0 else None) for i, plan in enumerate(plans)]
    return env, net, players
