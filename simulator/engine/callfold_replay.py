"""The scratch replay behind folded calls (shortcut 10, :mod:`simulator.engine.callfold`): a call's plans played
with their phase kept, on a network of their own clock that numbers resources as the main one does.

- :class:`_Player` plays one plan as :func:`~simulator.engine.replay_work._play` plays it, keeping its phase
  (:data:`PRE`, :data:`STEP`, :data:`GAMMA`, :data:`DONE`) so a play begun on a scratch network can go on on
  the main one (:meth:`~simulator.engine.callfold._Folded.unfold`);
- :class:`_Scratch` and :func:`_scratch_play` are that scratch network and a play of a call's plans on it;
- :class:`_Shape` is one call shape's plans and resources, with its durations alone per binade of the start time
  (:meth:`_Shape.durations`), memoised per :func:`_signature` — what a replay computes with.
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
            self.flows = self.net.transfer_all(steps[i])
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
        self._res_flows = defaultdict(dict)

    def _route(self, path):
        return self.main._route(path)


def _scratch_play(main: FlowNetwork, plans, start_s: float):
    env = simpy.Environment(initial_time=start_s)
    net = _Scratch(env, main)
    rep_done = simpy.Event(env)
    players = [_Player(env, net, plan, rep_done if i == 0 else None) for i, plan in enumerate(plans)]
    return env, net, players


class _Shape:
    """One call shape's plans and resources, and its durations alone per binade of the start time."""

    __slots__ = ("plans", "res", "rep_in_settle", "_durations")

    def __init__(self, main: FlowNetwork, plans, timings: dict):
        self.plans = plans
        paths = {id(path): path for plan in plans for step in plan.steps for path, _, _ in step}
        self.res = tuple({r: None for path in paths.values() for r in main.resources(path)})
        last = plans[0]
        self.rep_in_settle = bool(last.steps) and not last.gamma_s > 0
        """The representative ends inside the settle that completes its last flows (no γ after them)."""
        self._durations: dict[int | None, tuple[float, float]] = timings.setdefault(_signature(main, plans), {})
        """Shared by shapes of one signature: their replays are the same float operations."""

    def durations(self, main: FlowNetwork, start_s: float) -> tuple[float, float]:
        """``(rep_s, all_s)``: when the representative and the last replica end after ``start_s``, exactly
        as a replay from ``start_s`` gives them. A replay is a chain of additions and subtractions of times
        and durations; rounding to the grid of one binade ``[2^(k−1), 2^k)`` commutes with a shift by a
        multiple of its spacing, and any two starts in it differ by such a multiple (and their difference
        is exact, Sterbenz's lemma); so a replay whose times stay in the binade gives the same durations,
        to the bit, from every start in it whose end stays in it too. One replay per binade, then."""
        k = math.frexp(start_s)[1] if start_s > 0 else None
        cached = self._durations.get(k)
        if cached is not None and (k is None or start_s + cached[1] < math.ldexp(1.0, k)):
            return cached
        env, _, players = _scratch_play(main, self.plans, start_s)
        env.run()
        rep_end, all_end = players[0].end_s, max(p.end_s for p in players)
        found = (rep_end - start_s, all_end - start_s)
        if k is None or all_end < math.ldexp(1.0, k):
            self._durations[k] = found
        return found


def _signature(main: FlowNetwork, plans) -> tuple:
    """What a replay of ``plans`` computes with: each plan's delays and steps, each flow's bytes, latency and
    resources, the resources numbered by first appearance (flow order, path order), with their capacities.
    Equal signatures replay as the same float operations: the network reads a resource's index only as a
    name (route, per-resource flows, component search in path order) and progressive filling breaks ties by
    first appearance in the rating, not by index (:mod:`simulator.engine.fairshare`), so calls on other groups
    whose flows are renamed copies of one another (the dp trees of other pipeline stages) share a replay."""
    paths = {id(path): path for plan in plans for step in plan.steps for path, _, _ in step}  # a path: many flows
    local: dict[int, int] = {}
    for path in paths.values():
        for r in main.resources(path):
            local.setdefault(r, len(local))
    named = {k: tuple(local[r] for r in main.resources(path)) for k, path in paths.items()}
    flows = tuple((p.pre_s, p.gamma_s, tuple(tuple((named[id(path)], nbytes,
                                                     path.latency_s if latency is None else latency)
                                                    for path, nbytes, latency in step) for step in p.steps))
                  for p in plans)
    return tuple(main._cap[r] for r in local), flows
