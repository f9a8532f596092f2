"""Timers that split a tensor- or pipeline-parallel step into the simulator's phases
(``simulator.results.Category``): forward, backward, exposed tp and pp communication, bubble.

**Tensor parallel** (:class:`TpClock`). DTensor's tp collectives go through
``torch.distributed._functional_collectives`` (``all_reduce``, ``all_gather_single``,
``reduce_scatter_single``), which launch the collective and return a tensor whose first use calls
``wait_tensor`` [src: torch-dtensor-tp]. While a step runs, those module functions are replaced by
timed wrappers (the outermost call only, so nested waits are not counted twice). The rank's thread
is blocked for exactly that time, computing nothing: it is the *exposed* tp time (what gloo moved
while the thread computed, between launch and wait, is hidden and not counted).

**Pipeline** (:class:`PipelineClock`), timers around torch's schedule actions
(``_PipelineScheduleRuntime`` [src: torch-pipelining]): each stage's ``forward_one_chunk`` and the
loss are forward, ``backward_one_chunk`` backward (both less the tp time, and the ep all-to-alls,
inside them); posting the
sends and receives (``_batch_p2p``) and waiting on them (``_wait_batch_p2p``) are communication. A
receive wait before compute action (s, mb) is split as the discrete-event engine splits it
(``simulator.engine.streams.Recorder.wait``): until the sending rank posted that send it is
*bubble* (waiting for another stage's compute), the rest *pp* (the transfer). Send post times are
``time.time_ns()`` stamps, exchanged over the pp group after the schedule (one int64 all-reduce, timed
apart from the step as check time: :meth:`PipelineClock.split`);
ranks on one host share that clock exactly; across hosts it is as good as their clock sync (NTP
or PTP). The waits for unfinished sends at the schedule's end are pp.

On CUDA the compute actions are bracketed by device synchronisations; the tp timers still read host
time, and NCCL's ``wait_tensor`` makes the stream wait rather than the host, so there the tp phase is
the host's share only (CUDA events or the profiler would be needed; no GPU run has been made).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch
import torch.distributed as dist

_FUNCOL_CALLS = ("all_reduce", "all_gather_single", "reduce_scatter_single", "all_gather_tensor",
                 "reduce_scatter_tensor", "all_to_all_single", "wait_tensor")
"""The functional collectives DTensor's redistribution calls, and their wait."""


class TpClock:
    """Seconds this thread spent inside DTensor's functional collectives while :meth:`timing` is active."""

    def __init__(self):
        self.seconds = 0.0
        self._depth = 0

    def _wrap(self, fn):
        def timed(*args, **kwargs):
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self._depth -= 1
        return timed

    @contextmanager
    def timing(self):
        """Time the functional collectives (the module's functions are restored on exit)."""
        import torch.distributed._functional_collectives as funcol

        saved = {name: getattr(funcol, name) for name in _FUNCOL_CALLS if hasattr(funcol, name)}
        try:
            for name, fn in saved.items():
                setattr(funcol, name, self._wrap(fn))
            yield self
        finally:
            for name, fn in saved.items():
                setattr(funcol, name, fn)


class ClockSum:
    """The ``seconds`` of several clocks together (what a compute timer leaves out: tp and ep time)."""

    def __init__(self, *clocks):
        self.clocks = tuple(c for c in clocks if c is not None)

    @property
    def seconds(self) -> float:
        return sum(c.seconds for c in self.clocks)


class PipelineClock:
    """One rank's phase timers for torch's pipeline schedule runtime ``schedule`` (module docstring).

    ``n_stages`` global stages, ``m`` micro-batches; ``tp`` times the tp collectives inside compute, and
    ``others`` (objects with a ``seconds`` counter, e.g. ``executor.moe.EpClock``) other communication
    inside it, which compute excludes too; ``synchronize`` (``RunContext.synchronize``) brackets each
    compute action, so CUDA work is timed."""

    def __init__(self, schedule, n_stages: int, m: int, tp: TpClock, synchronize=lambda: None, others=()):
        self.schedule, self.n_stages, self.m, self.tp, self.sync = schedule, n_stages, m, tp, synchronize
        self.excluded = ClockSum(tp, *others)
        self.sent_ns = torch.zeros((n_stages, 2, m), dtype=torch.int64)
        self.forward_s = self.backward_s = self.comm_s = self.exchange_s = self.reduce_s = 0.0
        """``reduce_s``: the stages' ``perform_reduce_grad`` (torch's ``REDUCE_GRAD`` action: an FSDP2 stage's one
        reduce-scatter per module of the step, [src: torch-pipelining-fsdp-sync]), the runner's ``dp`` phase."""
        self.waits: list[tuple[int, int, tuple[int, int, int]]] = []
        self._pending: list[tuple[int, int]] = []
        for stage in schedule._stages:
            self._wrap_stage(stage)
        loss_fn = schedule._loss_fn
        schedule._loss_fn = lambda *a, **k: self._compute("forward", loss_fn, a, k)

    def _compute(self, phase: str, fn, args, kwargs):
        self.sync()
        ex0, start = self.excluded.seconds, time.perf_counter()
        out = fn(*args, **kwargs)
        self.sync()
        busy = time.perf_counter() - start - (self.excluded.seconds - ex0)
        setattr(self, f"{phase}_s", getattr(self, f"{phase}_s") + busy)
        return out

    def _wrap_stage(self, stage) -> None:
        s = stage.stage_index
        fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk
        fsend, bsend = stage.get_fwd_send_ops, stage.get_bwd_send_ops

        def forward(mb, *a, **k):
            self._depends_on((s - 1, 0, mb))
            return self._compute("forward", fwd, (mb, *a), k)

        def backward(mb, *a, **k):
            self._depends_on((s + 1, 1, mb))
            return self._compute("backward", bwd, (mb, *a), k)

        def stamp(kind, get):
            def ops(mb, *a, **k):
                self.sent_ns[s, kind, mb] = time.time_ns()
                return get(mb, *a, **k)
            return ops

        stage.forward_one_chunk, stage.backward_one_chunk = forward, backward
        reduce = stage.perform_reduce_grad
        stage.perform_reduce_grad = lambda *a, **k: self._compute("reduce", reduce, a, k)
        stage.get_fwd_send_ops, stage.get_bwd_send_ops = stamp(0, fsend), stamp(1, bsend)

    def _depends_on(self, key: tuple[int, int, int]) -> None:
        """The receive waits since the last compute action were for ``key`` (stage, 0 F / 1 B, mb)."""
        self.waits += [(t0, t1, key) for t0, t1 in self._pending]
        self._pending = []

    def _timed_wait(self, fn):
        def wait(*args, **kwargs):
            t0 = time.time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self._pending.append((t0, time.time_ns()))
        return wait

    def _timed_post(self, fn):
        def post(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.comm_s += time.perf_counter() - start
        return post

    def reset(self) -> None:
        self.sent_ns.zero_()
        self.forward_s = self.backward_s = self.comm_s = self.exchange_s = self.reduce_s = 0.0
        self.waits, self._pending = [], []

    @contextmanager
    def timing(self):
        """Time one ``schedule.step`` (torch's module-level p2p helpers are restored on exit)."""
        from torch.distributed.pipelining import schedules

        self.reset()
        saved = schedules._batch_p2p, schedules._wait_batch_p2p
        schedules._batch_p2p, schedules._wait_batch_p2p = self._timed_post(saved[0]), self._timed_wait(saved[1])
        try:
            with self.tp.timing():
                yield self
        finally:
            schedules._batch_p2p, schedules._wait_batch_p2p = saved

    def split(self, group) -> tuple[float, float]:
        """(pp, bubble) seconds of the step just timed: exchanges the send stamps over the pp ``group``
        (every rank of it must call this) and splits each receive wait at its sender's post time.

        The exchange is the clock's own work, not training (a trainer makes no such call), so its seconds,
        ``exchange_s``, are the step's check time (left out of the step and of every phase, as the loss
        broadcast is): a rank whose schedule ended early waits in it for the last one, so its step ends at its
        own last action and a step lasts as long as its slowest rank's (``simulator.run_results``: the largest
        over ranks), which waits in the exchange only for the exchange's own gloo call."""
        start = time.perf_counter()
        dist.all_reduce(self.sent_ns, group=group)  # each entry is stamped by exactly one rank
        self.exchange_s = time.perf_counter() - start
        pp, bubble = split_waits(self.waits, self.sent_ns, self.n_stages)
        return self.comm_s + sum(t1 - t0 for t0, t1 in self._pending) / 1e9 + pp, bubble


def split_waits(waits, sent_ns, n_stages: int) -> tuple[float, float]:
    """(pp, bubble) seconds of receive waits ``[(t0_ns, t1_ns, (stage, kind, mb))]``: each wait is bubble
    until ``sent_ns[stage, kind, mb]`` (clamped into the wait), pp after; a wait with no sending stage
    (outside ``0..n_stages-1``) is all pp. The engine's rule: ``simulator.engine.streams.Recorder.wait``."""
    pp = bubble = 0
    for t0, t1, (s, kind, mb) in waits:
        posted = int(sent_ns[s, kind, mb]) if 0 <= s < n_stages else t0
        cut = min(max(posted, t0), t1)
        bubble, pp = bubble + cut - t0, pp + t1 - cut
    return pp / 1e9, bubble / 1e9
