"""Calls that shortcut 10 (:mod:`simulator.engine.callfold`) plays as delays, inside a folded run of shortcut 9
(:mod:`simulator.engine.fold`).

Shortcut 9 folds only calls it can predict itself (a delay, one plan of one step of flows that share nothing);
a call with replicas on the network (a tp ring whose dp replicas' rings are kept because they meet links the
representatives use) ended every run, so each such call went through :meth:`CallFolder.start` one at a time:
a step of the 64-GPU Llama-2-70B plan of issue 8 was 84k folded calls and 256k events. Step by step, such a
call started at ``t`` on idle resources is a :class:`~simulator.engine.callfold._Folded`: its representative
ends at ``t + rep_s`` (``rep_s`` from :meth:`~simulator.engine.callfold_shapes._Shape.durations`, the same bits
for every start in one binade), and its resources are reserved until ``t + all_s``. A fold predicts the same
float, ``t + rep_s``, where the replicas end no later than the representative (``all_s ≤ rep_s``: no tail holds
the links after it; a call with a tail ends the run, and the rank starts it step by step as before).

When a flow arrives on a resource of the run while such a call is in progress (the settle's unfold,
:meth:`~simulator.engine.fold_run.Fold.unfold`), :func:`resume` puts back what the step-by-step play would hold at
that instant: a ``_Folded`` started at ``t`` — replayed up to now and moved onto the network
(:meth:`_Folded.unfold`) if an arriving flow crosses its resources, else still folded: its end timer at
``t + rep_s`` (the same priority) and its resources reserved, so that a later arrival on them unfolds it as it
would have.
"""

from __future__ import annotations

import math

import simpy

from simulator.engine.callfold import CallFolder, _Folded, _Shape
from simulator.engine.network import FlowNetwork
from simulator.engine.settle_clock import SETTLE_PRIORITY


def shape_of(callfolder: CallFolder | None, net: FlowNetwork, plans, timings: dict) -> _Shape | None:
    """The call shape of ``plans`` (representative's first), or None where shortcut 10 would not fold them
    (off, or no flows: :meth:`CallFolder.start` plays those on the network). ``timings`` caches durations
    per signature, as the call folder's own cache does."""
    if callfolder is None or not callfolder.enabled:
        return None
    shape = _Shape(net, plans, timings)
    return shape if shape.res else None


def resume(callfolder: CallFolder, shape: _Shape, start_s: float, arrivals: list) -> simpy.Event:
    """The call of ``shape`` started at ``start_s`` (≤ now) as :meth:`CallFolder.start` would have played it,
    in the state the settle at now finds it (module docstring); the event fires when its representative ends."""
    net = callfolder.net
    folded = _Folded.__new__(_Folded)  # the state _Folded.__init__ set at start_s, without its timers
    folded.folder, folded.shape, folded.start_s, folded.origin_s = callfolder, shape, start_s, start_s
    folded.done, folded.alive, folded.tail = simpy.Event(callfolder.env), True, False
    folded.end_s = math.inf  # until its end is known below (an unfolded call releases its resources)
    res = set(shape.res)
    if any(r in res for f in arrivals for r in f.res):
        folded.unfold(arrivals)
    else:
        rep_s = shape.durations(net, start_s)[0]
        folded.end_s = start_s + rep_s  # no tail: a call with one ends the run (fold.py)
        folded._timer(start_s + rep_s, SETTLE_PRIORITY if shape.rep_in_settle else 1, folded._rep_end)
        net.reserve(folded, shape.res)
    return folded.done
