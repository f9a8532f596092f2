"""Call shapes of folded calls (shortcut 10, :mod:`simulator.engine.callfold`) and what their replays are memoised by.

- :class:`_Shape` is one call shape's plans and resources, with its durations alone per binade (and parity) of the
  start time (:meth:`_Shape.durations`), memoised per :func:`_signature` — what a replay computes with (resources
  numbered by first appearance: progressive filling breaks ties by first appearance,
  :mod:`simulator.engine.fairshare`, so calls equal up to a renaming share it);
- a single plan's durations are chained from its steps' (:func:`_chained`), each step played alone once per
  :func:`_step_signature`, binade and parity (one play for both parities where it meets no rounding tie:
  :mod:`simulator.engine.step_ties`), and an unfold's state is replayed from the step in flight only
  (:meth:`_Shape.scratch_at`).

The replay itself (players, scratch network) is :mod:`simulator.engine.callfold_replay`.
"""

from __future__ import annotations

from itertools import chain
from math import frexp as _frexp, ldexp as _ldexp, ulp as _ulp

import numpy as np
import simpy

from simulator.engine.callfold_replay import _Player, _Scratch, _scratch_play
from simulator.engine.network import FlowNetwork
from simulator.engine.settle_clock import SETTLE_PRIORITY
from simulator.engine.step_ties import FIND, _OneStep, _binade, _binade_end, kinds_of, played_alone


class _Shape:
    """One call shape's plans and resources, and its durations alone per binade of the start time."""

    __slots__ = ("plans", "res", "rep_in_settle", "_durations", "_steps")

    def __init__(self, main: FlowNetwork, plans, timings: dict):
        self.plans = plans
        paths = {id(path): path for plan in plans for path in plan.paths}  # first appearance, plan by plan
        res_of = {k: main.resources(path) for k, path in paths.items()}
        self.res = tuple({r: None for res in res_of.values() for r in res})
        last = plans[0]
        self.rep_in_settle = bool(last.steps) and not last.gamma_s > 0
        """The representative ends inside the settle that completes its last flows (no γ after them)."""
        self._steps: list[dict] | None = None
        """One plan alone (a dp tree, a rest): each step's durations per binade (:func:`_chained`), shared by
        every shape whose step has the same :func:`_step_signature`; None: several plans (played together)."""
        if len(plans) == 1:
            self._steps = _step_memos(main, plans[0], timings, res_of)
            key = ("chain", last.pre_s, last.gamma_s, tuple(map(id, self._steps)))  # the dicts are kept: ids stay
        else:
            key = _signature(main, plans)
        self._durations: dict[tuple[int, int] | None, tuple[float, float]] = timings.setdefault(key, {})
        """Shared by shapes of one signature: their replays are the same float operations."""

    def durations(self, main: FlowNetwork, start_s: float) -> tuple[float, float]:
        """``(rep_s, all_s)``: when the representative and the last replica end after ``start_s``, exactly
        as a replay from ``start_s`` gives them. A replay is a chain of additions and subtractions of times
        and durations; rounding to the grid of one binade ``[2^(k−1), 2^k)`` commutes with a shift by an
        even multiple of its spacing (ties go to even: an odd shift can turn one), and any two starts in it
        of one parity on its grid differ by such a multiple (and their difference is exact, Sterbenz's lemma);
        so a replay whose times stay in the binade gives the same durations, to the bit, from every start in
        it of the same parity whose end stays in it too. One replay per binade and parity (:func:`_binade`); a
        single plan's replay is chained from its steps' (:func:`_chained`) where it can be."""
        if start_s > 0:  # _binade and _binade_end inlined: a folded run asks this once per call it predicts
            e = _frexp(start_s)[1]
            k = (e, int(start_s / _ulp(start_s)) & 1)
            cached = self._durations.get(k)
            if cached is not None and start_s + cached[1] < _ldexp(1.0, e):
                return cached
        else:
            k = None
            cached = self._durations.get(k)
            if cached is not None:
                return cached
        end = None if self._steps is None else _chained(main, self.plans[0], self._steps, start_s)
        if end is not None:
            rep_end = all_end = end
        else:
            env, _, players = _scratch_play(main, self.plans, start_s)
            env.run()
            rep_end, all_end = players[0].end_s, max(p.end_s for p in players)
        found = (rep_end - start_s, all_end - start_s)
        if k is None or all_end < _binade_end(k):
            self._durations[k] = found
        return found

    def scratch_at(self, main: FlowNetwork, start_s: float, now: float):
        """The call started at ``start_s`` replayed on a scratch network up to the events a main play has
        processed at ``now`` (every event before it, and the non-settle events at it): ``(env, scratch,
        players)``. A single plan whose steps before ``now`` each hand on a fresh network (:func:`_in_step`)
        is replayed from the start of the step in flight only: the same state, that step's flows being the
        only ones (flow ids compare relatively)."""
        found = None if self._steps is None else _in_step(main, self.plans[0], self._steps, start_s, now)
        if found is None:
            env, scratch, players = _scratch_play(main, self.plans, start_s)
        else:
            j, t = found
            env = simpy.Environment(initial_time=t)
            scratch = _Scratch(env, main)
            player = _Player(env, scratch, _OneStep(self.plans[0].steps[j]), simpy.Event(env))
            player.plan, player.i = self.plans[0], j  # step j of the whole plan; it cannot end before now
            players = [player]
        queue = env._queue
        while queue and (queue[0][0] < now or (queue[0][0] == now and queue[0][1] < SETTLE_PRIORITY)):
            env.step()
        return env, scratch, players


def _chained(main: FlowNetwork, plan, memos: list[dict], start_s: float) -> float | None:
    """When ``plan``, alone, ends after starting at ``start_s`` (the float a replay of it gives), from its
    steps' durations; None where a step leaves an event behind it (then only a replay of the whole plan says).

    A plan alone is a chain: its fixed delay (a timeout: ``start + pre``), then step ``i + 1`` starts in the
    callback of the event that ends step ``i``, then γ (``end + γ``). A step that leaves the network with no
    pending event when it ends (no later wake-up or arrival settle filed: the network then holds no flow, no
    filed finish and no wake-up) hands the next step the state of a fresh network, whose only memory of
    earlier steps is the counters (flow ids and marks compare relatively; no resource is read across
    steps). So each step's end is that of the step played alone from its start, and by the binade argument
    of :meth:`_Shape.durations` it is ``start + d`` for the ``d`` one play from any start in its binade and of
    its parity gave (and whose end stayed in it): steps of equal content share it, within a plan and across plans."""
    t = _first_step_s(plan, start_s)
    for step, memo in zip(plan.steps, memos):
        t = _step_end(main, step, memo, t)
        if t is None:
            return None
    return t + plan.gamma_s if plan.gamma_s > 0 else t


def _in_step(main: FlowNetwork, plan, memos: list[dict], start_s: float, now: float) -> tuple[int, float] | None:
    """``(j, t_j)``: the step of ``plan`` (started at ``start_s``) in flight at ``now`` in a replay stopped
    before the settles at ``now`` (started before ``now``, its last settle at or after it), and its start, when
    every step before it hands on a fresh network (:func:`_chained`); else None (a fixed delay, a step that
    starts exactly at ``now``, γ, or a step that leaves an event behind: a replay from ``start_s`` says)."""
    t = _first_step_s(plan, start_s)
    for j, (step, memo) in enumerate(zip(plan.steps, memos)):
        if now <= t:
            return None
        end = _step_end(main, step, memo, t)
        if end is None:
            return None
        if now <= end:
            return j, t
        t = end
    return None


def _first_step_s(plan, start_s: float) -> float:
    return start_s + plan.pre_s if plan.pre_s > 0 else start_s  # the timeout's float: SimPy's now + delay


def _step_end(main: FlowNetwork, step: list, memo: dict, t: float) -> float | None:
    """The end of ``step`` started at ``t`` on a fresh network: ``t + d`` from ``memo`` (per binade and parity, as
    :meth:`_Shape.durations`), else played (:func:`~simulator.engine.step_ties.played_alone`) and kept; None if it
    leaves an event. A memo entry is ``(d, reach)``: valid from ``t`` when ``t + reach`` stays in the binade. A play
    that met no rounding tie also fills the other parity's entry, with ``reach`` its latest filed clock value."""
    k = _binade(t)
    entry = memo.get(k)
    if entry is not None and (k is None or t + entry[1] < _binade_end(k)):
        return t + entry[0]
    if memo.kinds is FIND:
        memo.kinds = kinds_of(main, step)  # one grouping per signature, whatever the binade
    end, reach = played_alone(main, step, t, memo.kinds)
    if end is not None and (k is None or end < _binade_end(k)):
        d = end - t
        memo[k] = (d, d)
        if reach is not None:
            other = (k[0], 1 - k[1])
            if other not in memo:
                memo[other] = (d, reach)
    return end


def _step_alone(main: FlowNetwork, step: list, start_s: float) -> float | None:
    """The end of ``step`` played alone from ``start_s`` on a fresh scratch network, or None if it leaves an
    event behind it (a settle the network runs after the step's end)."""
    return played_alone(main, step, start_s)[0]


def _step_memos(main: FlowNetwork, plan, timings: dict, res_of: dict) -> list[dict]:
    """Per step of ``plan``, the durations dict shared by steps of one :func:`_step_signature` (per step list
    object, so a rest's steps, the same lists, are not signed again)."""
    by_sig = timings.setdefault(_STEP_SIGNATURES, {})
    by_id = timings.setdefault(_STEP_LISTS, {})
    out = []
    for step in plan.steps:
        entry = by_id.get(id(step))
        if entry is None or entry[0] is not step:
            entry = by_id[id(step)] = (step, by_sig.setdefault(_step_signature(main, step, res_of), _StepMemo()))
        out.append(entry[1])
    return out


class _StepMemo(dict):
    """A step signature's durations by binade and parity (:func:`_step_end`), and its kinds of component
    (:func:`~simulator.engine.step_ties.kinds_of`, found at its first play)."""

    __slots__ = ("kinds",)

    def __init__(self):
        super().__init__()
        self.kinds = FIND


_STEP_SIGNATURES, _STEP_LISTS = ("step signatures",), ("step lists",)
"""Keys of ``timings`` (a shape's cache) for the step memos; a call's own keys are longer tuples."""


def _step_signature(main: FlowNetwork, step: list, res_of: dict) -> tuple:
    """What one step played alone computes with, as :func:`_signature` of a plan of that one step gives it:
    each flow's resources numbered by first appearance in the step, their capacities in that order, each
    flow's bytes and latency; as bytes of arrays (equal bytes, equal floats; one pass per array, not a tuple
    per flow: a dp tree step at 1,024 nodes has ~2k flows)."""
    routes = [res_of[id(path)] for path, _, _ in step]  # res_of: id(path) → main.resources(path)
    lengths = np.fromiter(map(len, routes), dtype=np.int64, count=len(routes))
    flat = np.fromiter(chain.from_iterable(routes), dtype=np.int64, count=int(lengths.sum()))
    used, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    order = np.argsort(first)  # used resources by first appearance (first indices are distinct)
    number = np.empty(len(used), dtype=np.int64)
    number[order] = np.arange(len(used))
    cap = main._cap
    caps = np.array([cap[r] for r in used[order].tolist()], dtype=float)
    nbytes = np.array([b for _, b, _ in step], dtype=float)
    latency = np.array([p.latency_s if lat is None else lat for p, _, lat in step], dtype=float)
    return (caps.tobytes(), number[inverse].tobytes(), lengths.tobytes(), nbytes.tobytes(), latency.tobytes())


def _signature(main: FlowNetwork, plans) -> tuple:
    """What a replay of ``plans`` computes with: each plan's delays and steps, each flow's bytes, latency and
    resources, the resources numbered by first appearance (flow order, path order), with their capacities.
    Equal signatures replay as the same float operations: the network reads a resource's index only as a
    name (route, per-resource flows, component search in path order) and progressive filling breaks ties by
    first appearance in the rating, not by index (:mod:`simulator.engine.fairshare`), so calls on other groups
    whose flows are renamed copies of one another (the dp trees of other pipeline stages) share a replay."""
    paths = {id(path): path for plan in plans for path in plan.paths}  # first appearance, plan by plan
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
