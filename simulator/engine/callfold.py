"""Folded collective calls (shortcut 10): a whole call played as a delay while no other flow touches its links,
and put back on the flow network, in the state it would hold, the instant another flow arrives on them.

A call that :meth:`~simulator.engine.replay_work.CommRunner.start` plays on the network (the representative's
plan and its kept replicas': a dp tree all-reduce at 512 nodes is 36,792 flows in ~35 steps, a pipeline send
with its replicas one flow per replica) depends on nothing but its own flows as long as no other flow shares a
resource with them: max-min rates couple flows only through shared resources (Bertsekas & Gallager §6.5.2),
and its steps start when its own flows end. So when the union of the resources its flows ever cross carries
no active flow and no other holder's reservation at its start, :meth:`CallFolder.start`

- takes its durations from a scratch replay of that call (memoised per signature — delays, bytes, latencies,
  capacities and resources of its flows numbered by first appearance,
  :func:`~simulator.engine.callfold_shapes._signature`, shared by calls on other groups whose flows are renamed
  copies of these — and per binade of the start time, which makes them the same bits as
  a replay from this start: :meth:`~simulator.engine.callfold_shapes._Shape.durations`): the representative's
  ``rep_s`` and the last replica's ``all_s``;
- fires the representative's event at ``t + rep_s`` and *reserves* the resources until ``t + all_s`` (the
  replicas' flows ride on after the representative is done, as on the network);
- if a flow arrives on a reserved resource before then (every such flow arrives through a settle of the
  network), :meth:`_Folded.unfold` replays the call on a scratch network that starts at ``t`` and shares the
  main network's resource indices and routes up to the events the
  main play has processed at that instant (every event before it, and the non-settle events at it), then
  moves its state onto the main network: active flows with their bytes left, rates, last update and filed
  finish times (per resource in the same order), flows still in their latency as pending arrivals, the
  wake-up, and each plan's phase (its fixed delay or γ as a timer at the same instant, a step in flight as a
  group whose completion starts the next step). The call then goes on step by step on the main network.
- a call on the main network (put back, or started while a resource of its was busy) folds its *rest* again at
  a step's end once those resources are its own again (:meth:`CallFolder.rest`: the tail of a dp tree that a
  pipeline send interrupted is alone after the send): the remaining steps are a plan started at that instant,
  so the same argument and the same replay (per signature and binade) hold.

What can differ from playing the call on the main network (``CallFolder.enabled = False``): a wake-up that
another flow's settle plans for the call's flows lands at ``now' + (due − now')`` from that settle, an ulp from
the call's own, and events of one instant may run in another order (the representative's end is a
settle-priority timer, not a settle). The issue-8 and issue-12 benchmarks give the same floats; tests
(``tests/test_engine_callfold.py``) compare folded and unfolded steps to 1e-12 relative.

Off under ``shortcuts=False`` and in unrolled pipelines (several co-simulated jobs, clusters whose nodes
differ by default), and by ``CallFolder.enabled = False``. Stragglers and degraded links need no switch: the
test is per call at run time on the call's own resources, and the durations are per group (a degraded NIC on a
group's path is in its replay).

This module holds the folder and a folded call (:class:`CallFolder`, :class:`_Folded`, and the moves of an
unfold onto the main network); the scratch replay they rest on (plans played with their phase kept, the
scratch network) is :mod:`simulator.engine.callfold_replay`, call shapes and their durations
:mod:`simulator.engine.callfold_shapes`.
"""

from __future__ import annotations

from heapq import heappush

import simpy

from simulator.engine.call_plan import CallPlan
from simulator.engine.callfold_replay import DONE, GAMMA, PRE, STEP, _Player, _Scratch
from simulator.engine.callfold_shapes import _Shape
from simulator.engine.flows import Flow, _Group
from simulator.engine.network import FlowNetwork
from simulator.engine.settle_clock import SETTLE_PRIORITY, _Settle, schedule_at


class CallFolder:
    """Plays calls whose resources are idle as delays (see the module docstring)."""

    enabled = True
    """False: every call on the network (the reference folding is tested against)."""

    def __init__(self, env: simpy.Environment, net: FlowNetwork):
        self.env, self.net = env, net
        self._shapes: dict[tuple, _Shape] = {}
        self._timings: dict[tuple, dict] = {}
        self._suffixes: dict[int, list] = {}
        self.folds = self.unfolds = self.refolds = 0

    def start(self, key: tuple, plans) -> simpy.Event | None:
        """The representative's completion event of ``plans`` started now as a folded call, or None where a
        resource of theirs is busy or reserved (the caller plays them on the network). ``key`` names the
        call's shape: equal keys, equal plans."""
        if not self.enabled:
            return None
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = _Shape(self.net, plans, self._timings)
        if not shape.res or not (self.net.idle(shape.res) or self._ending_now(shape.res)):
            return None
        self.folds += 1
        return _Folded(self, shape, *shape.durations(self.net, self.env.now), simpy.Event(self.env), self.env.now).done

    def _ending_now(self, res) -> bool:
        """No active flow on ``res``, and every holder of theirs a folded call whose last flow ends now (its
        release is due at this instant, after the event that starts the new call: a replica's rest that ends
        with the representative whose end started it). Their flows are gone at ``now`` as on the network, where
        flows ending at an instant leave before those starting at it are rated; the new call's reservation
        replaces theirs (:meth:`FlowNetwork.release` leaves another holder's resources)."""
        net, now = self.net, self.env.now
        if any(map(net._res_flows.__getitem__, res)):
            return False
        return all(type(h) is _Folded and h.alive and h.end_s <= now for h in net.holders(res))

    def play(self, plans) -> simpy.Event:
        """Play ``plans`` on the network now, as :func:`~simulator.engine.replay_work._play` does (the same
        delays and transfers at the same instants), each able to fold its rest at a step's end; the event
        fires when the representative (``plans[0]``) is done."""
        done = simpy.Event(self.env)
        for k, plan in enumerate(plans):
            _Player(self.env, self.net, plan, done if k == 0 else None, self)
        return done

    def rest(self, player: _Player) -> bool:
        """At the end of ``player``'s step ``i`` on the main network (the instant it would start step
        ``i + 1``): fold the rest of its plan (steps ``i + 1``… and γ) as a call started now, when no
        active flow or other holder's reservation is on the resources the rest crosses — the flow that
        made it play on the network (a pipeline send on its NIC) has left. The rest is a plan with no fixed
        delay that starts now, so what :meth:`start` rests on holds for it: alone, its flows evolve as on an
        idle network, and its durations are those of a replay from now (memoised per signature and binade).
        The player's done event fires at its end with the duration from the player's own start."""
        if not self.enabled:
            return False
        plan, i = player.plan, player.i + 1
        key = ("rest", id(plan), i)
        shape = self._shapes.get(key)
        if shape is None:
            if not self.net.idle(self._suffix(plan)[i]):
                return False
            shape = self._shapes[key] = _Shape(self.net, [CallPlan(0.0, plan.steps[i:], plan.gamma_s)],
                                               self._timings)
        elif not self.net.idle(shape.res):
            return False
        self.refolds += 1
        _Folded(self, shape, *shape.durations(self.net, self.env.now), player.done, player.start_s)
        return True

    def _suffix(self, plan) -> list[frozenset]:
        """Per step ``i`` of ``plan``, the resources its steps from ``i`` on cross (memoised per plan)."""
        out = self._suffixes.get(id(plan))
        if out is None or out[0] is not plan:
            res = self.net.resources
            acc: frozenset = frozenset()
            suffix = [acc]
            for step in reversed(plan.steps):
                acc = acc | {r for path in {id(p): p for p, _, _ in step}.values() for r in res(path)}
                suffix.append(acc)
            out = self._suffixes[id(plan)] = [plan, suffix[::-1]]  # the plan kept: its id stays its own
        return out[1]


class _Folded:
    """A call played as a delay from ``start_s``; its resources reserved until its last flow's end."""

    __slots__ = ("folder", "shape", "start_s", "done", "origin_s", "alive", "tail", "end_s")

    def __init__(self, folder: CallFolder, shape: _Shape, rep_s: float, all_s: float, done: simpy.Event | None,
                 origin_s: float):
        env = folder.env
        self.folder, self.shape, self.start_s = folder, shape, env.now
        self.done = done
        """Fires at the representative's end (None: a replica's rest, nobody waits)."""
        self.origin_s = origin_s
        """Where the duration the done event reports is counted from (the call's start, before a rest)."""
        self.alive = True
        self.tail = all_s > rep_s
        """Replicas ride on after the representative: their end releases the resources."""
        t = self.start_s
        self.end_s = t + (all_s if self.tail else rep_s)
        """When its last flow ends and its resources are released."""
        self._timer(t + rep_s, SETTLE_PRIORITY if shape.rep_in_settle else 1, self._rep_end)
        if self.tail:
            self._timer(t + all_s, SETTLE_PRIORITY, self._all_end)
        folder.net.reserve(self, shape.res)

    def _timer(self, at: float, priority: int, callback) -> None:
        event = simpy.Event(self.folder.env)
        event._ok, event._value = True, None
        event.callbacks.append(callback)
        schedule_at(self.folder.env, event, priority, at)

    def _rep_end(self, _event) -> None:
        if self.alive and (self.done is None or not self.done.triggered):
            if not self.tail:  # its flows are gone before whoever waits goes on
                self._all_end(_event)
            if self.done is not None:
                self.done.succeed(self.folder.env.now - self.origin_s)

    def _all_end(self, _event) -> None:
        if self.alive:
            self.alive = False
            self.folder.net.release(self, self.shape.res)

    def unfold(self, arrivals: list) -> None:
        """Called by the main network's settle at ``now`` when a flow arrives on a reserved resource: replay
        the call from its start on a scratch network up to ``now`` and move its state onto the main one."""
        folder, main = self.folder, self.folder.net
        now = main.env.now
        self.alive = False
        main.release(self, self.shape.res)
        folder.unfolds += 1
        env, scratch, players = self.shape.scratch_at(main, self.start_s, now)
        moved, groups = _move_flows(scratch, main, now, arrivals)
        _move_wake(env, scratch, main, now)
        for k, player in enumerate(players):
            done = None
            if k == 0 and self.done is not None and not self.done.triggered:
                done = self.done
                if player.phase == DONE:  # ended an ulp before the cached end: report it now
                    done.succeed(player.end_s - self.origin_s)
                    continue
            player.start_s = self.origin_s
            _resume(player, main, done, moved, groups, folder)


def _move_flows(scratch: _Scratch, main: FlowNetwork, now: float, arrivals: list) -> tuple[dict, dict]:
    """The scratch network's unfinished flows as main-network flows (keyed by scratch flow id, numbered in their
    scratch order): active ones with their progress and filed finish times, each resource's flows in the scratch
    order; pending ones as arrivals (those due ``now`` join the settle's ``arrivals``). Also their scratch groups
    by completion event; the main groups are made by :func:`_resume`."""
    due: list[tuple[float, Flow]] = [(t, f) for t, bucket in scratch._due.items() for f, version in bucket
                                     if f.active and f.version == version]
    pending = {t: scratch._arrivals[t] for t in sorted(scratch._arrivals)}
    unfinished = sorted([f for _, f in due] + [f for flows in pending.values() for f in flows], key=_fid)
    moved: dict[int, Flow] = {}
    groups: dict[int, _Group] = {}
    fid = main.stats.flows
    for f in unfinished:
        m = moved[f.fid] = main._new_flow(fid, main._route(f.path), f.nbytes, f.start_s, None)
        fid += 1
        m.remaining, m.rate, m.t_last, m.active_s = f.remaining, f.rate, f.t_last, f.active_s
        m.delivered_bytes, m.active = f.delivered_bytes, f.active
        groups[id(f.group.event)] = f.group
    main.stats.flows = fid
    for t, f in due:
        m = moved[f.fid]
        m.version = 1
        entry = main._due.get(t)
        if entry is None:
            main._due[t] = [(m, 1)]
            heappush(main._due_times, t)
        else:
            entry.append((m, 1))
    main._active += len(due)
    for r, flows in scratch._res_flows.items():
        if flows:
            main._res_flows[r].update((moved[f.fid].fid, moved[f.fid]) for f in flows.values())
    main._activated([moved[f.fid] for _, f in due])
    for t, flows in pending.items():
        batch = [moved[f.fid] for f in flows]
        if t == now:
            arrivals.extend(batch)
        elif t in main._arrivals:
            main._arrivals[t].extend(batch)
        else:
            main._arrivals[t] = batch
            heappush(main._arrival_times, t)
            _Settle(main.env, main._settle, 0.0, at=t)
    return moved, groups


def _fid(flow: Flow) -> int:
    return flow.fid


def _move_wake(env: simpy.Environment, scratch: _Scratch, main: FlowNetwork, now: float) -> None:
    """The scratch network's pending wake-up, at the instant it was filed for, if it is the earliest."""
    if scratch._wake_at is None or (main._wake_at is not None and main._wake_at <= scratch._wake_at):
        return
    at = next(t for t, _, _, event in env._queue if event is scratch._wake)
    if at > now:
        main._wake_at = scratch._wake_at
        main._wake = _Settle(main.env, main._settle, 0.0, at=at)


def _resume(player: _Player, main: FlowNetwork, done: simpy.Event | None, moved: dict[int, Flow],
            groups: dict[int, _Group], folder: CallFolder) -> None:
    """Go on with ``player`` on the main network from its phase at ``now`` (its rest may fold again)."""
    player.env, player.net, player.done, player.refold = main.env, main, done, folder
    if player.phase in (PRE, GAMMA):
        event = simpy.Event(main.env)
        event._ok, event._value = True, None
        event.callbacks.append(player._timer)
        schedule_at(main.env, event, 1, player.until)  # NORMAL, as the timeout's
    elif player.phase == STEP:
        event = simpy.Event(main.env)
        flows = [moved[f.fid] for f in groups[id(player.flows)].flows if f.fid in moved]
        group = _Group(event, flows, False)
        for m in flows:
            m.group = group
        event.callbacks.append(player._stepped)
        player.flows = event
