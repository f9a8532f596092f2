"""A plan step played alone with its roundings watched, so that one play serves starts of both parities of a binade.

Shortcut 10's step memos (:mod:`simulator.engine.callfold_shapes`) rest on a shift argument: a step played alone
from ``t`` is a chain of clock additions (arrivals ``now + α``, filed finishes ``now + b/r``, wake-ups
``now + (due − now)``) and shift-free terms (rates, ``rate·(now − t_last)``, ``b/r``, the slack
``CLOCK_ULPS·ulp(now)``, comparisons); inside one binade ``[2^(k−1), 2^k)`` of spacing ``u`` the differences
of clock values are exact (Sterbenz) and ``now + (due − now) = due``. So a start ``t' = t + m·u`` gives every
clock value shifted by ``m·u`` exactly, provided each rounded addition ``round(x)`` satisfies
``round(x + m·u) = round(x) + m·u``. Round to nearest does for every ``m`` unless ``x`` is a *tie* (the exact
sum halfway between two floats: ties go to the even one, and an odd ``m`` swaps which that is), which is why
the memos are kept per binade *and parity* (``m`` even).

:class:`_Watched` is a scratch network that checks the other case as it plays: every clock value it files (an
arrival, a finish) lies in the binade (``< 2^k``: one spacing ``u`` throughout) and is not a tie — its rounding
error, exact by TwoSum (Knuth, TAOCP vol. 2 §4.2.2: ``s = a + b``, ``b' = s − a``, ``a' = s − b'``,
``e = (a − a') + (b − b')`` with no condition on the operands), is not ``±u/2``. Then the play's end holds for
every start of the binade, either parity, whose latest filed value (``t' + reach``) stays below ``2^k``
(:func:`played_alone`). A play that meets a tie, or files a value past the binade, serves its own parity only.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from simulator.engine.callfold_replay import _Player, _Scratch
from simulator.engine.network import FlowNetwork
from simulator.engine.step_kinds import Weighted, step_kinds


def _binade(t: float) -> tuple[int, int] | None:
    """``(k, parity)``: the binade ``[2^(k−1), 2^k)`` holding ``t > 0`` and the parity of ``t`` as a multiple of
    the binade's spacing; None for 0. A replay's memo is valid for starts of one key: shifting by an *even*
    multiple of the spacing commutes with rounding to nearest, ties to even (IEEE 754 §4.3.1); an odd one can
    turn a tie the other way (a step from 0.009 and one from 0.012 s, one binade, differ by an ulp). A play that
    met no tie serves both parities (:func:`played_alone`)."""
    return (math.frexp(t)[1], int(t / math.ulp(t)) & 1) if t > 0 else None


def _binade_end(k: tuple[int, int]) -> float:
    """``2^k``, the end of the binade of key ``k``."""
    return math.ldexp(1.0, k[0])


class _Watched(_Scratch):
    """A scratch network that watches the clock values it files (see the module docstring): ``clean`` while all
    are below ``end_s`` and none is a rounding tie on the grid of spacing ``spacing_s``; ``last_s`` the latest."""

    def __init__(self, env: simpy.Environment, main: FlowNetwork, end_s: float, spacing_s: float):
        super().__init__(env, main)
        self.end_s, self.half_s = end_s, spacing_s / 2
        self.clean = True
        self.last_s = env.now

    def _launch(self, checked: tuple[list, list, list], single: bool) -> simpy.Event:
        if self.clean:
            self._watch(self.env.now, np.array(sorted(set(checked[2])), dtype=float))  # arrivals: now + α
        return super()._launch(checked, single)

    def _rate(self, now: float, flows: list) -> None:
        super()._rate(now, flows)
        if self.clean and flows:  # finishes now + remaining/rate (every re-rated flow: a superset of those filed)
            rem = np.fromiter([f.remaining for f in flows], dtype=float, count=len(flows))
            rate = np.fromiter([f.rate for f in flows], dtype=float, count=len(flows))
            self._watch(now, rem / rate)  # IEEE division, as the network's own

    def _watch(self, now: float, added: np.ndarray) -> None:
        """Check the sums ``now + added`` (as the network rounds them): below ``end_s``, and no tie."""
        s = now + added
        back = s - now
        err = (now - (s - back)) + (added - back)  # TwoSum: the exact rounding error of each sum
        top = float(s.max())
        if top >= self.end_s or bool((np.abs(err) == self.half_s).any()):
            self.clean = False
        self.last_s = max(self.last_s, top)


class _WeightedScratch(Weighted, _Scratch):
    """A scratch network playing one component of each kind of a step (:mod:`simulator.engine.step_kinds`)."""


class _WeightedWatched(Weighted, _Watched):
    """:class:`_Watched` playing one component of each kind of a step (:mod:`simulator.engine.step_kinds`)."""


FIND = object()
"""``played_alone``'s default ``kinds``: found from the step (:func:`kinds_of`)."""


def played_alone(main: FlowNetwork, step: list, start_s: float, kinds=FIND) -> tuple[float | None, float | None]:
    """``(end, reach)``: the end of ``step`` played alone from ``start_s`` on a fresh scratch network (None if it
    leaves an event behind it: a settle the network runs after the step's end), and, where the play met no
    rounding tie and filed nothing past its binade, ``reach = last filed value − start_s``: the play's
    duration then holds for every start ``t`` of the binade, either parity, with ``t + reach < 2^k``
    (else None: its own parity only). Where the step repeats a kind of component, one component of each kind is
    played for all (:mod:`simulator.engine.step_kinds`, the same bits): ``kinds`` is :func:`kinds_of` the step (or of
    a step of the same signature: the same indices), found when not given; None: every flow played (the reference)."""
    env = simpy.Environment(initial_time=start_s)
    kinds = kinds_of(main, step) if kinds is FIND else kinds
    watch = (_binade_end(_binade(start_s)), math.ulp(start_s)) if start_s > 0 else None
    if kinds is None:
        net = _Scratch(env, main) if watch is None else _Watched(env, main, *watch)
    else:
        net = _WeightedScratch(env, main) if watch is None else _WeightedWatched(env, main, *watch)
        kept, net.copies = kinds
        checked = tuple(tuple(map(items.__getitem__, kept)) for items in main.checked_step(step))
        step = [step[i] for i in kept]
        net._steps = {id(step): (step, checked)}  # its own: the kept items' routes, not filed on the main network
    done = simpy.Event(env)
    settles = []
    done.callbacks.append(lambda _: settles.append(net.stats.settles))
    player = _Player(env, net, _OneStep(step), done)
    env.run()
    if settles != [net.stats.settles]:
        return None, None
    end = player.end_s
    reach = max(end, net.last_s) - start_s if isinstance(net, _Watched) and net.clean else None
    return end, reach


def kinds_of(main: FlowNetwork, step: list) -> tuple[list[int], list[int]] | None:
    """:func:`~simulator.engine.step_kinds.step_kinds` of ``step`` on ``main``'s resources: the indices of one
    component of each kind and each one's copies; None where no kind repeats. A function of the step's
    :func:`~simulator.engine.callfold_shapes._step_signature` (resources numbered by first appearance)."""
    routes, nbytes, latencies = main.checked_step(step)
    return step_kinds(main._cap, [r.res for r in routes], nbytes, latencies)


class _OneStep:
    """A plan of one step, no delay, no γ (what :class:`_Player` reads of a plan)."""

    __slots__ = ("pre_s", "steps", "gamma_s")

    def __init__(self, step: list):
        self.pre_s, self.steps, self.gamma_s = 0.0, [step], 0.0
