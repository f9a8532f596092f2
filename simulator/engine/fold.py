"""Folded compute: a stretch of an action's compute segments and TP calls played as one event while
the links of its calls carry nothing else, and put back on the network the instant another flow arrives
on them.

A forward or backward is ``len(tp_calls) + 1`` compute segments with a blocking TP call between two
(:func:`simulator.engine.rank_compute._segments`); played step by step that is a timeout per segment and, per
call, a process, a settle for its flows' arrival and one for their end (a 64-GPU Llama-2-70B step: 85k
calls, 600k events). Where a call's flows are alone on their links, the network only adds up floats the
engine can add up itself. From the current item, :meth:`Folder.fold` takes the longest run of items it
can predict:

- a compute segment of ``seg_s`` ends at ``t + seg_s`` (SimPy's ``now + delay``);
- a call that :meth:`~simulator.engine.replay_work.CommRunner.launch` runs as a delay ends at ``t + delay``;
- a call run as one plan of one step of zero-latency flows that share no resource with each other (a
  fused ring) ends as :func:`~simulator.engine.replay_work._replay` on an otherwise idle network ends it:
  flows active at ``t1 = t + pre_s``, each at its bottleneck (max-min fair rate of a flow that shares
  none of its resources), due at ``t1 + bytes/rate``, completed at the wake-ups
  :func:`~simulator.engine.settle_clock.alone_finishes` gives, then ``γ``; provided no other flow is active on
  its resources when the fold starts;
- any other call (replicas on the network, several steps, shared resources) that shortcut 10 would play as a
  delay ends at ``t + rep_s``, as :class:`~simulator.engine.callfold._Folded` ends it, where its replicas end
  no later (:mod:`simulator.engine.fold_calls`). A call shortcut 10 would not fold, or whose replicas outlast
  it, ends the run.

The run is one event at its predicted end (scheduled at that absolute time:
:func:`~simulator.engine.settle_clock.schedule_at`), and the folded calls' resources are *reserved* on the network. The
prediction is what the step-by-step play gives unless another flow uses one of those resources before the run ends,
and every such flow must arrive (a settle of the network). That settle first *unfolds* the run
(:meth:`~simulator.engine.fold_run.Fold.unfold`): it finds the item in progress at that instant in the step-by-step
play (events at that instant other than settles already processed), puts its state back — a segment or a delay
waits for its own end, a call before ``t1`` starts its flows at ``t1``, a call with flows on the wire gets them
back with the bytes, rates, finishes and wake-up they would have
(:func:`~simulator.engine.fold_run.adopt`), a call in its ``γ`` waits for its end — and the rank goes on
step by step, folding again at its next item. The items before it are booked with their predicted times, which are
those of the step-by-step play.

What can differ is the order of events within one instant (a folded run's end is an ordinary event,
where the step-by-step play ends a call inside a settle) and settles that other flows would have
shared with the folded calls' own: a settle completes every flow due within ``CLOCK_ULPS`` ulps of it,
so a flow elsewhere can end a few ulps earlier in one play than in the other. Tests
(``tests/test_engine_fold.py``) compare folded and step-by-step steps to 1e-12 relative, the clock's
rounding, and the golden estimates stay bit for bit.

Folding is off under ``shortcuts=False``, in unrolled pipelines (several jobs, mixed clusters) and for a
rank's last backward (its gradient buckets fire at fractions of its progress).

A run predicted to its natural end is kept per items and binade and parity of its start, and a later run of the
same items from a start of that key is its offsets plus the start, to the bit (:mod:`simulator.engine.fold_runs`);
only the idle checks are made again.

This module holds :class:`Folder`, which predicts a run and builds it; the run as one event, its calls'
end predictions and its unfold (:class:`~simulator.engine.fold_run.Fold`, ``_Call``) are
:mod:`simulator.engine.fold_run`.
"""

from __future__ import annotations

import simpy

from simulator.engine.fold_calls import shape_of
from simulator.engine.fold_run import Fold, _Call
from simulator.engine.fold_runs import predict, replayed, run_key
from simulator.engine.streams import KIND_CATEGORY


class Folder:
    """Folds runs of a rank's compute segments and TP calls (see the module docstring)."""

    enabled = True
    """False: every item step by step (the reference folding is tested against)."""

    def __init__(self, env: simpy.Environment, net, runner):
        self.env, self.net, self.runner = env, net, runner
        self._lists: dict[tuple, tuple] = {}
        self._res: dict[tuple, tuple] = {}
        """Interned resource tuples: calls on the same links share one, so a fold checks it once."""
        self._categories: dict[int, tuple] = {}
        self._shapes: dict[tuple, _Call | None] = {}
        self._timings: dict[tuple, dict] = {}
        """Durations of shaped calls per signature and binade (as :class:`CallFolder`'s own)."""
        self._last: dict[tuple, Fold] = {}
        """The last run folded per (class, network): an unfolded run's rest is reused from it."""
        self._runs: dict[tuple, object] = {}
        """Runs predicted to their natural end, per items and binade and parity of the start
        (:mod:`simulator.engine.fold_runs`): a later fold of the same items adds its start to the offsets."""
        self.folds = self.unfolds = 0

    def _calls(self, calls, klass, network: bool) -> list:
        """Each of ``calls`` as a :class:`_Call`, or None where it cannot be folded (memoised per tuple)."""
        key = (id(calls), klass, network)
        entry = self._lists.get(key)
        if entry is None or entry[0] is not calls:
            entry = self._lists[key] = (calls, [self._describe(c, *self.runner.launch(c, klass, network))
                                                for c in calls])
        return entry[1]

    def categories(self, calls) -> list:
        """Where each of ``calls`` books its time (:data:`~simulator.engine.streams.KIND_CATEGORY`), memoised."""
        entry = self._categories.get(id(calls))
        if entry is None or entry[0] is not calls:
            entry = self._categories[id(calls)] = (calls, [KIND_CATEGORY[c.kind] for c in calls])
        return entry[1]

    def _describe(self, c, delay_s, plans) -> _Call | None:
        if delay_s is not None:
            return _Call(delay_s)
        if len(plans) != 1 or len(plans[0].steps) > 1:
            return self._shaped(c, plans)
        plan = plans[0]
        items = tuple(plan.steps[0]) if plan.steps else ()
        if any(latency != 0.0 for _, _, latency in items):
            return self._shaped(c, plans)
        net = self.net
        res = tuple(r for path, _, _ in items for r in net.resources(path))
        if len(res) != len(set(res)):
            return self._shaped(c, plans)  # flows that share a resource: their rates change as they end
        rates = tuple(net.bottleneck_Bps(p) for p, _, _ in items)
        alone = {b / rate for (_, b, _), rate in zip(items, rates)}
        return _Call(None, plan.pre_s, plan.gamma_s, items, rates, self._res.setdefault(res, res),
                     alone.pop() if len(alone) == 1 else None)

    def _shaped(self, c, plans) -> _Call | None:
        """A call shortcut 10 would play as a delay (:mod:`simulator.engine.fold_calls`), or None; memoised
        per shape as :meth:`CallFolder.start` keys it (the representative's plan is memoised per call content)."""
        key = (id(plans[0]), c.kind, c.concurrent_groups)
        if key not in self._shapes:
            shape = shape_of(self.runner.callfolder, self.net, plans, self._timings)
            self._shapes[key] = None if shape is None else _Call(
                None, res=self._res.setdefault(shape.res, shape.res), shape=shape)
        return self._shapes[key]

    def fold(self, network: bool, klass, seg_s: float, calls, item: int) -> Fold | None:
        """The longest foldable run from ``item`` (even: segment ``item // 2``; odd: call ``item // 2``), or
        None when it would hold no call. A segment of ``seg_s ≤ 0`` is an item that takes no time."""
        if not self.enabled:
            return None
        described = self._calls(calls, klass, network)
        start = self.env.now
        last = self._last.get((klass, network))
        if last is not None and last.calls is described and last.seg_s == seg_s and \
                last.first < item < last.first + len(last.ends) and last.ends[item - last.first - 1] == start:
            return self._again(last, item, (klass, network))
        key = run_key(described, seg_s, item, start)
        run = self._runs.get(key) if key is not None else None
        ends = None
        if run is not None and run.calls is described:
            ends = replayed(run, start)
        if ends is None:
            run = predict(self.net, described, seg_s, item, start, self.net.mask)
            ends = run.ends
            if run.offsets is not None:
                self._runs[key] = run
        cut = run.cut(ends, self.net.idle)
        if cut is None:
            return None
        self.folds += 1
        ends, res, mask = cut
        fold = self._last[(klass, network)] = Fold(self, described, item, start, ends, res, seg_s, mask)
        return fold

    def _again(self, last: Fold, item: int, key: tuple) -> Fold | None:
        """The rest of an unfolded run from ``item``, which starts exactly where it was predicted to: the
        prediction is a function of the start time and the items, so it is reused, cut before the first
        call whose resources are busy now."""
        k = item - last.first
        ends = last.ends[k:]
        res: dict[int, None] = {}
        mask, mask_of = 0, self.net.mask  # their bit mask, what the reservation reads
        checked: dict[int, bool] = {}
        idle, calls = self.net.idle, last.calls
        folded = 0
        for j in range(len(ends)):
            if (item + j) % 2:
                call = calls[(item + j) // 2]
                if call.delay_s is None:
                    free = checked.get(id(call.res))
                    if free is None:
                        free = checked[id(call.res)] = idle(call.res)
                        res.update(dict.fromkeys(call.res))
                        mask |= mask_of(call.res)
                    if not free:
                        ends = ends[:j]
                        break
                folded += 1
        if not folded:
            return None
        self.folds += 1
        fold = self._last[key] = Fold(self, calls, item, last.ends[k - 1], ends, tuple(res), last.seg_s, mask)
        return fold
