"""One simulated rank's step: its schedule's actions on the compute stream, and its side streams.

The plays (the analytical engine adds up the same ones in closed form):

- An action waits for its cross-stage input: F(s, j) for the activations of F(s−1, j), B(s, j) for
  the gradient of B(s+1, j), each arriving over p2p when the stages sit on different ranks. The
  wait is booked as BUBBLE until the producer finished computing, and as PP while the message flies.
- A forward is ``fwd_s`` of compute cut into ``len(tp_fwd) + 1`` equal segments with the TP calls
  between them (they block compute: Megatron's row-parallel all-reduce). With ZeRO-3 all-gathers
  the action runs block by block: block i waits for gather i, issued on the dp stream when block
  i−1 starts (prefetch one block ahead, one gather at a time). A backward is the recompute, then the same with
  ``bwd_s``, ``tp_bwd``, ``zero_bwd``. A split backward's ``I`` and ``W`` each take half (as
  :func:`simulator.schedule_dry_run.dry_run` assumes).
- Sends run on the rank's pp stream, one at a time, without blocking compute.
- Gradient buckets: when the rank's last backward starts (after its recompute), bucket i becomes
  ready ``grad_ready_fraction[i] × (bwd + Σ tp_bwd)`` later (the uncontended length of that
  backward); buckets run one after another on the dp stream (host copies on the host stream). Under
  synchronous data parallelism with stragglers a bucket's collective starts when the last dp
  replica's bucket is ready (a barrier); the wait is booked as STRAGGLER.
- Interference (:mod:`simulator.interference`): a bucket or a prefetched gather played as a collective
  takes ``f = StepWork.overlap_sm_fraction`` of the SMs; the compute it overlaps is stretched by ``f``
  × the overlap, after the fact (first order, as the closed form): each block by its share of the next
  gather, the last backward by the bucket time inside its gradient work's nominal length before its end
  (the rank cannot finish before ``end of that backward + f·H``; booked with the buckets' category).
- After the last action the rank waits for its buckets (exposed DP/PS/OFFLOAD), runs the optimizer
  (on the CPU stream under ZeRO-Offload), then the ``after_step`` calls, blocking.
- The input pipeline reads the next step's batch on the data stream from the start of the step; the
  step cannot end before it is read (exposed as DATA: a steady-state prefetch of one batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import simpy

from simulator.engine.streams import KIND_CATEGORY, KIND_STREAM, Barrier, SendStream
from simulator.interference import overlap_s, takes_sms
from simulator.results import Category
from simulator.schedules import Action, ActionKind
from simulator.work import CommKind

SYNC_KINDS = (CommKind.DP, CommKind.PS, CommKind.ZERO)
"""Gradient-sync kinds whose call waits for every dp replica under synchronous training."""


class PipeKey(NamedTuple):
    """Which simulated pipeline a time account, an arrival or a stream belongs to; prints ``dp0`` / ``w3``."""

    dp: int
    """dp index of the replica whose ranks it simulates (the smallest of the replicas it stands for)."""
    worker: bool = False
    """An asynchronous parameter-server worker (steps on its own) rather than synchronous replicas."""

    def __str__(self) -> str:
        return f"{'w' if self.worker else 'dp'}{self.dp}"


@dataclass(frozen=True)
class Pipe:
    """One simulated pipeline (a set of dp replicas that behave identically in a step)."""

    key: PipeKey
    factors: tuple[float, ...]
    """Compute-time multiplier per pipeline rank (the slowest of its tp ranks: TP runs in lockstep)."""
    base: bool
    """Its calls go on the network with their replicas; others are timed as they run alone."""
    sync: bool
    """Gradient sync waits at a barrier of all simulated pipelines of the step."""

    @property
    def dp(self) -> int:
        """dp index of the replica whose ranks it simulates."""
        return self.key.dp


def rank_step(ctx, pipe: Pipe, r: int, k: int):
    """SimPy process: pipeline rank ``r`` of ``pipe`` runs step ``k``; returns the time it finished."""
    env, rec, sw = ctx.env, ctx.rec, ctx.work.stages[r]
    who, rank, f = (k, pipe.key, r), ctx.layout.rank_of(dp=pipe.dp, pp=r, tp=0), pipe.factors[r]
    data = None
    if sw.data_s > 0:
        data = env.timeout(sw.data_s)
        rec.row(rank, "data", "read next batch", Category.DATA, env.now, env.now + sw.data_s, -1, r)
    streams: list = []
    last_b = ctx.last_backward[r]
    for i, act in enumerate(ctx.schedule.ranks[r]):
        chunk = ctx.chunk_of[act.stage]
        dep = ctx.dependency(act)
        if dep is not None:
            key = (pipe.key, k, dep[0], dep[1], act.microbatch)
            ev = ctx.arrival(key)
            if not ev.processed:
                t0 = env.now
                yield ev
                rec.wait(who, t0, env.now, ctx.sent_at.get(key, t0), Category.BUBBLE, Category.PP)
        if act.kind is ActionKind.F:
            yield from _compute(ctx, pipe, who, rank, act, chunk.fwd_s * f, chunk.tp_fwd, chunk.zero_fwd,
                                Category.FORWARD, prefetch=chunk.zero_prefetch_calls)
            _send(ctx, pipe, k, rank, act, chunk.p2p_fwd, act.stage + 1)
            continue
        share = 1.0 if act.kind is ActionKind.B else 0.5
        if act.kind is ActionKind.W:
            yield from _compute(ctx, pipe, who, rank, act, chunk.bwd_s * f * share, (), (), Category.BACKWARD)
            continue
        if chunk.recompute_s > 0:
            t0 = env.now
            yield env.timeout(chunk.recompute_s * f)
            rec.spend(who, Category.RECOMPUTE, env.now - t0)
            rec.row(rank, "compute", f"{act} recompute", Category.RECOMPUTE, t0, env.now, act.microbatch, act.stage)
        progress = None
        if i == last_b:
            nominal = chunk.bwd_s * f * share + sum(c.time_s for c in chunk.tp_bwd)
            progress = GradProgress(env, nominal, sw.grad_ready_fraction or (1.0,) * len(sw.grad_sync))
            streams = _launch_grad_sync(ctx, pipe, rank, r, k, progress)
        yield from _compute(ctx, pipe, who, rank, act, chunk.bwd_s * f * share, chunk.tp_bwd, chunk.zero_bwd,
                            Category.BACKWARD, progress, prefetch=chunk.zero_prefetch_calls)
        if progress is not None:
            progress.finish()
            b_end = env.now
            b_start = b_end - progress.total_s  # the gradient work's window, as the closed form counts it
        _send(ctx, pipe, k, rank, act, chunk.p2p_bwd, act.stage - 1)
    if streams:
        t0 = env.now
        yield simpy.AllOf(env, streams)
        intervals = [iv for proc in streams for iv in proc.value[0]]
        last_cat = max((proc.value for proc in streams), key=lambda v: v[2])[1]
        stretch = ctx.work.overlap_sm_fraction * sum(overlap_s(a, b, b_start, b_end)
                                                     for proc in streams for a, b in proc.value[3])
        if b_end + stretch > env.now:
            yield env.timeout(b_end + stretch - env.now)
        straggle = sum(max(0.0, min(b, env.now) - max(a, t0)) for a, b in intervals)
        rec.spend(who, Category.STRAGGLER, straggle)
        rec.spend(who, last_cat, env.now - t0 - straggle)
    if sw.optimizer_s > 0:
        t0 = env.now
        yield env.timeout(sw.optimizer_s)
        rec.spend(who, Category.OPTIMIZER, sw.optimizer_s)
        rec.row(rank, ctx.optimizer_stream, "optimizer", Category.OPTIMIZER, t0, env.now, -1, r)
    for call in ctx.work.stages[r].after_step:
        t0 = env.now
        yield ctx.start(call, (r, KIND_STREAM[call.kind]), pipe)
        rec.spend(who, KIND_CATEGORY[call.kind], env.now - t0)
        rec.row(rank, KIND_STREAM[call.kind], f"{call.kind.value} {call.op.value}", KIND_CATEGORY[call.kind],
                t0, env.now, -1, r)
    if data is not None and not data.processed:
        t0 = env.now
        yield data
        rec.spend(who, Category.DATA, env.now - t0)
    return env.now


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


def _compute(ctx, pipe: Pipe, who: tuple, rank: int, act: Action, total_s: float, tp_calls, zero_calls,
             category: Category, progress: GradProgress | None = None, prefetch: int = 1):
    """An action's compute with its TP calls between segments; with ZeRO gathers, block by block.

    Without gathers the compute is split evenly around its TP calls. With ``L`` gathers the action
    runs as ``L`` blocks (:func:`_blocks`): block i waits for gather i, which the gather stream issues
    when block i−``prefetch`` starts (one block ahead by default, one gather at a time) — the play the analytical
    engine's :func:`simulator.analytical.exposed_gathers` adds up in closed form.
    """
    if zero_calls:
        yield from _blocks(ctx, pipe, who, rank, act, total_s, tp_calls, zero_calls, category, progress, prefetch)
    else:
        yield from _segments(ctx, pipe, who, rank, act, total_s, tp_calls, category, progress)


def _segments(ctx, pipe: Pipe, who: tuple, rank: int, act: Action, total_s: float, tp_calls, category: Category,
              progress: GradProgress | None = None):
    """``total_s`` of compute split evenly around ``tp_calls``, each call blocking the compute: items
    ``0 .. 2·len(tp_calls)``, even ones the segments, odd ones the calls. Runs of items whose calls'
    links carry nothing else are folded into one event (:mod:`simulator.engine.fold`)."""
    env = ctx.env
    klass = (ctx.schedule.rank_of(act.stage), "tp")
    seg_s = total_s / (len(tp_calls) + 1)
    name = str(act)
    folder = ctx.folder if progress is None else None
    item, n = 0, 2 * len(tp_calls) + 1
    while item < n:
        if folder is not None:
            fold = folder.fold(pipe.base, klass, seg_s, tp_calls, item)
            if fold is not None:
                played = yield fold.done
                _book_fold(ctx, who, rank, act, name, fold, played, tp_calls, seg_s, category)
                item = fold.next_item(played)
                continue
        t0 = env.now
        if item % 2 == 0:
            if seg_s > 0:
                if progress is not None:
                    progress.advance(seg_s)
                yield env.timeout(seg_s)
                _book(ctx, who, rank, act, name, item, tp_calls, seg_s, category, t0, env.now)
        else:
            call = tp_calls[item // 2]
            yield ctx.start(call, klass, pipe)
            if progress is not None:
                progress.advance(call.time_s, instant=True)
            _book(ctx, who, rank, act, name, item, tp_calls, seg_s, category, t0, env.now)
        item += 1


def _book_fold(ctx, who: tuple, rank: int, act: Action, name: str, fold, played: int, tp_calls, seg_s: float,
               category: Category) -> None:
    """Account a fold's ``played`` items at their predicted times, and the one in progress (if any) until
    now: the same additions as :func:`_book`'s, in the same order."""
    ends = fold.ends
    if played < len(ends):  # the fold's predictions stay as they are (Folder.fold may reuse them)
        ends = ends[:played] + [ctx.env.now]
        played += 1
    if ctx.rec.trace:
        for k in range(played):
            _book(ctx, who, rank, act, name, fold.first + k, tp_calls, seg_s, category, fold.start_of(k), ends[k])
        return
    sums: list[list] = []  # [category, running sum]: Recorder.spend's additions, in its order
    t0 = fold.start_s
    kinds = ctx.folder.categories(tp_calls)
    for k in range(played):
        item, t1 = fold.first + k, ends[k]
        if item % 2 == 0:
            cat, seconds = category, seg_s
        else:
            cat, seconds = kinds[item // 2], t1 - t0
        t0 = t1
        if seconds > 0:
            for pair in sums:
                if pair[0] is cat:
                    pair[1] += seconds
                    break
            else:
                sums.append([cat, ctx.rec.accounts[who][cat] + seconds])
    if sums:
        account = ctx.rec.accounts[who]
        for cat, total in sums:
            account[cat] = total


def _book(ctx, who: tuple, rank: int, act: Action, name: str, item: int, tp_calls, seg_s: float,
          category: Category, t0: float, t1: float) -> None:
    """Account item ``item`` of :func:`_segments` (a segment: ``seg_s`` of ``category``; a call: its
    ``t1 − t0`` as TP, or EP for a MoE layer's all-to-all) and add its timeline row."""
    rec = ctx.rec
    if item % 2 == 0:
        rec.spend(who, category, seg_s)
        rec.row(rank, "compute", name, category, t0, t1, act.microbatch, act.stage)
        return
    call = tp_calls[item // 2]
    cat = KIND_CATEGORY[call.kind]
    rec.spend(who, cat, t1 - t0)
    rec.row(rank, "tp", f"{name} {call.op.value}", cat, t0, t1, act.microbatch, act.stage)


def _blocks(ctx, pipe: Pipe, who: tuple, rank: int, act: Action, total_s: float, tp_calls, zero_calls,
            category: Category, progress: GradProgress | None = None, prefetch: int = 1):
    """``L = len(zero_calls)`` blocks of ``total_s / L`` compute; the TP calls are shared out in order."""
    env, blocks = ctx.env, len(zero_calls)
    started = [simpy.Event(env) for _ in range(blocks)]
    gathered = [simpy.Event(env) for _ in range(blocks)]
    spans = [[math.inf, math.inf] for _ in range(blocks)]  # [issued, done] per gather
    env.process(_gather_stream(ctx, pipe, rank, act, zero_calls, started, gathered, spans, prefetch))
    nominal = (total_s + sum(c.time_s for c in tp_calls)) / blocks  # the closed form's block (exposed_gathers)
    for i in range(blocks):
        if not gathered[i].processed:
            t0 = env.now
            yield gathered[i]
            ctx.rec.spend(who, Category.ZERO, env.now - t0)
        started[i].succeed()
        t0 = env.now
        mine = tuple(c for j, c in enumerate(tp_calls) if j * blocks // len(tp_calls) == i)
        yield from _segments(ctx, pipe, who, rank, act, total_s / blocks, mine, category, progress)
        if i + 1 < blocks and ctx.work.overlap_sm_fraction > 0:  # gathers i+1 .. i+prefetch can overlap block i
            overlap = 0.0
            for j in range(i + 1, min(i + prefetch, blocks - 1) + 1):
                if takes_sms(zero_calls[j]):
                    overlap += overlap_s(*spans[j], t0, t0 + nominal)
            stretch = ctx.work.overlap_sm_fraction * overlap
            if stretch > 0:  # the next gathers took SMs from this block (module docstring)
                yield env.timeout(stretch)
                ctx.rec.spend(who, Category.ZERO, stretch)


def _gather_stream(ctx, pipe: Pipe, rank: int, act: Action, calls, started, gathered, spans, prefetch: int = 1):
    """Gather i is issued once gather i−1 is done and block i−``prefetch`` has started (``prefetch``
    blocks of prefetch, :attr:`ChunkWork.zero_prefetch_calls`); ``spans[i]`` records when it was issued and done."""
    env, r = ctx.env, ctx.schedule.rank_of(act.stage)
    for i, call in enumerate(calls):
        if i >= prefetch and not started[i - prefetch].processed:
            yield started[i - prefetch]
        t0 = env.now
        spans[i][0] = t0
        yield ctx.start(call, (r, "dp"), pipe)
        spans[i][1] = env.now
        ctx.rec.row(rank, "dp", f"{act} all-gather", Category.ZERO, t0, env.now, act.microbatch, act.stage)
        gathered[i].succeed()


def _send(ctx, pipe: Pipe, k: int, rank: int, act: Action, call, dst_stage: int) -> None:
    """Deliver ``act``'s output to ``dst_stage`` (over p2p if it sits on another rank)."""
    if not 0 <= dst_stage < ctx.schedule.n_stages:
        return
    kind = ActionKind.F if act.kind is ActionKind.F else ActionKind.B  # activations, or their gradient
    key = (pipe.key, k, act.stage, kind, act.microbatch)
    arrived = ctx.arrival(key)
    ctx.sent_at[key] = ctx.env.now
    if call is None or ctx.schedule.rank_of(dst_stage) == ctx.schedule.rank_of(act.stage):
        arrived.succeed()
        return
    stream = ctx.pp_stream(pipe, ctx.schedule.rank_of(act.stage), k)
    send = (ctx, pipe, rank, act, call, arrived)
    if stream.busy:
        stream.waiting.append(send)
    else:
        _p2p(stream, *send)


def _p2p(stream: SendStream, ctx, pipe: Pipe, rank: int, act: Action, call, arrived: simpy.Event) -> None:
    """Start a send on its rank's pp stream now; when it is done, the receiver's input has arrived and the
    stream's next send starts (the same instants as a capacity-1 SimPy resource, without its events)."""
    env, r = ctx.env, ctx.schedule.rank_of(act.stage)
    stream.busy = True
    t0 = env.now

    def sent(_event) -> None:
        ctx.rec.row(rank, "pp", f"send {act}", Category.PP, t0, env.now, act.microbatch, act.stage)
        arrived.succeed()
        if stream.waiting:
            _p2p(stream, *stream.waiting.popleft())
        else:
            stream.busy = False

    ctx.start(call, (r, "pp"), pipe).callbacks.append(sent)


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
        if pipe.sync and parties > 1 and call.kind in SYNC_KINDS:
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
