"""An action's compute on a rank's compute stream (:mod:`simulator.engine.rank`): segments of compute with the
TP calls between them (runs of them folded into one event, :mod:`simulator.engine.fold`), and, with ZeRO-3
all-gathers, block by block behind a gather stream that prefetches ahead."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import simpy

from simulator.engine.streams import KIND_CATEGORY
from simulator.interference import overlap_s, takes_sms
from simulator.results import Category
from simulator.schedules import Action

if TYPE_CHECKING:
    from simulator.engine.rank import Pipe
    from simulator.engine.rank_grads import GradProgress


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
    name = str(act) if ctx.rec.trace else ""  # only the timeline's rows read it (Recorder.row, off without a trace)
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
    kinds = ctx.folder.categories(tp_calls)
    if _book_apart(ctx.rec.accounts[who], fold.first, fold.start_s, ends, played, kinds, seg_s, category):
        return
    sums: list[list] = []  # [category, running sum]: Recorder.spend's additions, in its order
    t0 = fold.start_s
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


def _book_apart(account: dict, first: int, start_s: float, ends: list[float], played: int, kinds: list,
                seg_s: float, category: Category) -> bool:
    """:func:`_book_fold`'s sums when the calls book into other categories than the segments' and every category
    is already in ``account``: the calls' (every other item) in one pass, then the segments' ``seg_s`` added once
    per segment. Each category's running sum gets the same additions in the same order as the item-by-item pass,
    and the account's keys keep their order (none is new), so the accounts are the same to the bit. False (and
    ``account`` untouched) where that does not hold: the item-by-item pass books them."""
    sums: dict = {}
    k = 1 - (first & 1)  # the first call among the items (item first + k odd)
    while k < played:
        seconds = ends[k] - (ends[k - 1] if k else start_s)
        if seconds > 0:
            cat = kinds[(first + k) >> 1]
            total = sums.get(cat)
            if total is None:
                total = account.get(cat)
                if total is None or cat is category:
                    return False
            sums[cat] = total + seconds
        k += 2
    segments = (played + 1 - (first & 1)) // 2  # items first + k, k < played, that are even
    if seg_s > 0 and segments:
        total = account.get(category)
        if total is None:
            return False
        for _ in range(segments):
            total += seg_s
        sums[category] = total
    for cat, total in sums.items():
        account[cat] = total
    return True


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
    if prefetch == 0:
        yield from _blocking_blocks(ctx, pipe, who, rank, act, total_s, tp_calls, zero_calls, category, progress)
        return
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


def _blocking_blocks(ctx, pipe: Pipe, who: tuple, rank: int, act: Action, total_s: float, tp_calls, zero_calls,
                     category: Category, progress: GradProgress | None = None):
    """:func:`_blocks` with ``prefetch`` 0: call i runs on the compute stream before block i, nothing ahead
    (:func:`simulator.analytical.exposed_gathers`'s ``Σ g_i``)."""
    env, blocks, r = ctx.env, len(zero_calls), ctx.schedule.rank_of(act.stage)
    for i, call in enumerate(zero_calls):
        t0 = env.now
        yield ctx.start(call, (r, "dp"), pipe)
        ctx.rec.row(rank, "dp", f"{act} all-gather", Category.ZERO, t0, env.now, act.microbatch, act.stage)
        ctx.rec.spend(who, Category.ZERO, env.now - t0)
        mine = tuple(c for j, c in enumerate(tp_calls) if j * blocks // len(tp_calls) == i)
        yield from _segments(ctx, pipe, who, rank, act, total_s / blocks, mine, category, progress)


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
