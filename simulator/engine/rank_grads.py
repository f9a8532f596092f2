"""A rank's gradient buckets (:mod:`simulator.engine.rank`): when each becomes ready during its last backward
(:class:`GradProgress`), and the streams that run them in order, behind a barrier of the simulated pipelines
under synchronous data parallelism."""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy

from simulator.engine.streams import KIND_CATEGORY, KIND_STREAM, Barrier
from simulator.engine.unrolled import spans_dp
from simulator.interference import takes_sms
from simulator.results import Category
from simulator.work import CommKind

if TYPE_CHECKING:
    from simulator.engine.rank import Pipe

SYNC_KINDS = (CommKind.DP, CommKind.PS, CommKind.ZERO)
"""Gradient-sync kinds whose call waits for every dp replica under synchronous training."""


class GradProgress:
    """Gradient-producing work done in a rank's last backward; fires each bucket's ready event.

    Bucket j is ready once ``fractions[j]`` of the backward compute and its TP calls is done (recompute
    and gather waits produce no gradients) — the rule of :func:`simulator.analytical.gradient_work_s`.
    """

    def __init__(self, env: simpy.Environment, total_s: float, fractions):
        self.env, self.done, self.total_s = env, 0.0, total_s
        self.ready = [(f * total_s, simpy.Event(env)) for f in fractions]
        thresholds = [t for t, _ in self.ready]
        self._ordered = all(a <= b for a, b in zip(thresholds, thresholds[1:]))
        """Thresholds in bucket order (the usual case): a pass can stop at the first one not reached."""
        self._first = 0
        """Buckets before it are all fired: a pass starts there."""

    def advance(self, seconds: float, *, instant: bool = False) -> None:
        """``seconds`` of work start now and run for ``seconds`` (compute), or just finished (``instant``).
        Buckets are visited in their order, as one pass over all of them would, skipping those fired."""
        end = self.done + seconds
        ready, i = self.ready, self._first
        while i < len(ready) and ready[i][1].triggered:
            i += 1
        self._first = i
        for j in range(i, len(ready)):
            threshold, event = ready[j]
            if threshold > end:
                if self._ordered:
                    break
                continue
            if not event.triggered:
                delay = 0.0 if instant else max(0.0, threshold - self.done)
                self._fire(event, delay)
        self.done = end

    def finish(self) -> None:
        for _, event in self.ready:
            if not event.triggered:
                event.succeed()

    def _fire(self, event: simpy.Event, delay: float) -> None:
        if delay <= 0:
            event.succeed()
        else:
            self.env.timeout(delay).callbacks.append(lambda _: event.triggered or event.succeed())


def _launch_grad_sync(ctx, pipe: Pipe, rank: int, r: int, k: int, progress: GradProgress) -> list:
    sw = ctx.work.stages[r]
    by_stream: dict[str, list] = {}
    for i, (call, (_, ready)) in enumerate(zip(sw.grad_sync, progress.ready)):
        by_stream.setdefault(KIND_STREAM[call.kind], []).append((i, call, ready))
    return [ctx.env.process(_grad_stream(ctx, pipe, rank, r, k, stream, items))
            for stream, items in by_stream.items()]


def _grad_stream(ctx, pipe: Pipe, rank: int, r: int, k: int, stream: str, items):
    """Buckets in order on one stream; returns (barrier waits, category, end time, [(start, end)] of
    the calls that take SMs)."""
    env, waits, category, busy = ctx.env, [], Category.DP, []
    for i, call, ready in items:
        if not ready.processed:
            yield ready
        category = KIND_CATEGORY[call.kind]
        t0 = env.now
        parties = ctx.parties(k)
        if pipe.sync and parties > 1 and call.kind in SYNC_KINDS and spans_dp(ctx.layout, call.group):
            bar = ctx.barrier((k, r, stream, i), parties)
            if bar.arrive(env.now):
                env.process(_release(ctx, bar, call, (r, stream)))
            yield bar.released
            waits.append((t0, max(bar.arrive_s)))
            t0 = max(bar.arrive_s)
        else:
            yield ctx.start(call, (r, stream), pipe)
        if takes_sms(call):
            busy.append((t0, env.now))
        ctx.rec.row(rank, stream, f"{call.kind.value} {call.op.value} bucket {i}", category, t0, env.now, -1, r)
    return waits, category, env.now, busy


def _release(ctx, bar: Barrier, call, klass):
    yield ctx.start_shared(call, klass)
    bar.released.succeed()
