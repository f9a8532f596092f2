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
  :func:`simulator.schedule_dry_run.dry_run` assumes). Where torch's pipelining runtime keeps a chunk's gathered
  parameters (``gather_reuse``), only the actions :func:`simulator.gather_reuse.gathers` names run the gathers.
- Sends run on the rank's pp stream, one at a time, without blocking compute. Where a call has a
  ``receive_first_time_s`` (:mod:`simulator.receive_first`), the receiving rank posts each receive where torch's
  runtime does (:func:`simulator.receive_first.receive_posts`: when its compute action before it ended); a send
  issued after its receive was posted costs that price, one issued before waits on its stream for the posting
  (gloo's rendezvous) and then costs ``time_s``.
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

This module holds the rank's process and its pp sends; an action's compute with its TP calls and ZeRO
gathers is :mod:`simulator.engine.rank_compute`, the gradient buckets :mod:`simulator.engine.rank_grads`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import simpy

from simulator.engine.rank_compute import _compute
from simulator.engine.rank_grads import GradProgress, _launch_grad_sync
from simulator.engine.streams import KIND_CATEGORY, KIND_STREAM, SendStream
from simulator.gather_reuse import gathers
from simulator.interference import overlap_s
from simulator.results import Category
from simulator.schedules import Action, ActionKind


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
    previous: dict[int, ActionKind] = {}  # each chunk's last F / B / I (simulator.gather_reuse)
    for i, act in enumerate(ctx.schedule.ranks[r]):
        if ctx.receive_posts is not None:
            for sender in ctx.receive_posts[r][i]:
                _post(ctx, (pipe.key, k, *sender))
        chunk = ctx.chunk_of[act.stage]
        dep = ctx.dependency(act)
        if dep is not None:
            key = (pipe.key, k, dep[0], dep[1], act.microbatch)
            ev = ctx.arrival(key)
            if not ev.processed:
                t0 = env.now
                yield ev
                rec.wait(who, t0, env.now, ctx.sent_at.get(key, t0), Category.BUBBLE, Category.PP)
        gathering = chunk.gather_reuse is None or gathers(chunk.gather_reuse, act.kind, previous.get(act.stage))
        if act.kind is not ActionKind.W:
            previous[act.stage] = act.kind
        if act.kind is ActionKind.F:
            yield from _compute(ctx, pipe, who, rank, act, chunk.fwd_s * f, chunk.tp_fwd,
                                chunk.zero_fwd if gathering else (), Category.FORWARD, prefetch=chunk.zero_prefetch_calls)
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
        yield from _compute(ctx, pipe, who, rank, act, chunk.bwd_s * f * share, chunk.tp_bwd,
                            chunk.zero_bwd if gathering else (), Category.BACKWARD, progress,
                            prefetch=chunk.zero_prefetch_calls)
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
    if ctx.posted.get(key, float("inf")) <= ctx.env.now:  # posted after its receive: the receive-first price
        call = ctx.first_calls.get(id(call), call)
    send = (ctx, pipe, rank, act, call, arrived, key)
    if stream.busy:
        stream.waiting.append(send)
    else:
        _p2p(stream, *send)


def first_variants(work) -> dict:
    """Per p2p call of ``work`` with a receive-first price (by id): the call at that price
    (:mod:`simulator.receive_first`)."""
    calls = (x for sw in work.stages for c in sw.chunks for x in (c.p2p_fwd, c.p2p_bwd))
    return {id(x): replace(x, time_s=x.receive_first_time_s, receive_first_time_s=None)
            for x in calls if x is not None and x.receive_first_time_s is not None}


def _post(ctx, key: tuple) -> None:
    """The receiving rank posts the receive of transfer ``key`` now; a send waiting for it starts."""
    ctx.posted.setdefault(key, ctx.env.now)
    waiting = ctx.post_events.pop(key, None)
    if waiting is not None:
        waiting.succeed()


def _p2p(stream: SendStream, ctx, pipe: Pipe, rank: int, act: Action, call, arrived: simpy.Event, key: tuple) -> None:
    """Start a send on its rank's pp stream now, or, where the lists say when receives are posted
    (``ctx.receive_posts``) and this one's is not yet, once it is (gloo's rendezvous: the data moves when both
    sides have posted, :mod:`simulator.receive_first`); when it is done, the receiver's input has arrived and the
    stream's next send starts (the same instants as a capacity-1 SimPy resource, without its events)."""
    env, r = ctx.env, ctx.schedule.rank_of(act.stage)
    stream.busy = True
    t0 = env.now
    if ctx.receive_posts is not None and key not in ctx.posted:
        ev = ctx.post_events.setdefault(key, simpy.Event(env))
        ev.callbacks.append(lambda _e: _p2p(stream, ctx, pipe, rank, act, call, arrived, key))
        return

    def sent(_event) -> None:
        ctx.rec.row(rank, "pp", f"send {act}", Category.PP, t0, env.now, act.microbatch, act.stage)
        arrived.succeed()
        if stream.waiting:
            _p2p(stream, *stream.waiting.popleft())
        else:
            stream.busy = False

    ctx.start(call, (r, "pp"), pipe).callbacks.append(sent)
