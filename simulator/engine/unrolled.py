"""Unrolled pipelines: every dp replica simulated as its own pipeline, every group on the network.

The step engine's symmetry (one pipeline per distinct straggler group, the other replicas' flows
riding along; :mod:`simulator.engine.replay_work` shortcuts 2 and 3) holds when every replica sees
the same links. A second job on the network breaks it: its traffic may cross one replica's links and
not another's, and the job's step waits for its slowest replica. Unrolled, each dp replica ``d`` runs
its own rank processes, and a call is started per replica:

- a call whose group does not span dp (tensor-parallel collectives, pipeline sends) runs on the
  representative group moved to dp index ``d``, together with its copies at the other tp indices;
  the pipeline waits for all of them (the tp ranks of a stage run in lockstep, so the stage goes on
  when the last of them is done);
- a call whose group spans dp (ZeRO gathers, gradient sync, the parameter all-gather after the step)
  is one collective of all replicas: each replica's n-th start of it arrives at a barrier, the last
  one starts it (with its copies at the other tp indices) and every replica waits for it.

No replica is dropped and no class is isolated, so nothing assumes that two groups see the same links.
On a symmetric job it gives the representative engine's step time (tested equal).
"""

from __future__ import annotations

import simpy

from simulator.strategy import ParallelLayout


def spans_dp(layout: ParallelLayout, group: tuple[int, ...]) -> bool:
    """Whether ``group`` holds ranks of more than one dp replica."""
    return len({layout.coords(r).dp for r in group}) > 1


def shift_dp(layout: ParallelLayout, group: tuple[int, ...], dp: int) -> tuple[int, ...]:
    """``group`` (within one dp replica) moved to dp index ``dp``."""
    coords = [layout.coords(r) for r in group]
    return tuple(layout.rank_of(dp=dp, pp=c.pp, tp=c.tp) for c in coords)


def tp_copies(layout: ParallelLayout, group: tuple[int, ...]) -> list[tuple[int, ...]]:
    """``group`` moved to every other tp index, when it does not span tp itself (else none)."""
    coords = [layout.coords(r) for r in group]
    own = {c.tp for c in coords}
    if len(own) > 1:
        return []
    return [tuple(layout.rank_of(dp=c.dp, pp=c.pp, tp=t) for c in coords) for t in range(layout.tp) if t not in own]


def start_unrolled(ctx, call, klass, pipe) -> simpy.Event:
    """Start ``call`` for unrolled pipeline ``pipe`` (see the module docstring); the event fires when
    the pipeline may go on."""
    layout = ctx.layout
    if layout.dp == 1 or not spans_dp(layout, call.group):
        return ctx.runner.start_groups(call, klass, shift_dp(layout, call.group, pipe.dp))
    key = (pipe.key, klass, id(call))
    n = ctx.rendezvous.get(key, 0)
    ctx.rendezvous[key] = n + 1
    bar = ctx.barrier(("call", klass, id(call), n), layout.dp)
    if bar.arrive(ctx.env.now):
        ctx.env.process(_release(ctx, bar, call, klass))
    return bar.released


def _release(ctx, bar, call, klass):
    yield ctx.runner.start_groups(call, klass, call.group)
    bar.released.succeed()
