"""Time the host work torch's pipeline schedule runtime does per action (``trainplan calibrate --compute``).

The executor runs a pipeline with ``torch.distributed.pipelining``'s ``_PipelineScheduleRuntime``
(:mod:`executor.strategies.pipeline`), which walks each rank's action list (compute actions, the sends and
receives ``_add_send_recv`` puts around them, and per stage ``UNSHARD``, ``REDUCE_GRAD``, ``RESHARD``) and, per
action, enters a profiler range, dispatches on the action's kind, builds a send's or receive's p2p op list, scales
the stage's gradients (``REDUCE_GRAD``); around the list ``step`` splits the batch into micro-batches and collects
the losses [src: torch-pipelining]. None of that is a kernel, a transfer or a wait, so none of it is in a phase the
executor measures (:class:`executor.phase_clock.PipelineClock`: compute actions and the loss, posting p2p ops,
receive waits): it is the step's *time outside every phase*. This probe measures that quantity with the executor's
own schedule loader and phase timers:

    pipeline_action_us = Σ_r median over steps of (t_step,r − phases_r) / Σ_r actions_r

over ``pp`` ranks (real gloo processes on this machine, so the runtime's p2p path is the one a run takes) running
the executor's stages of the run's tiny model (:class:`executor.strategies.pipeline.Stage`; without a model, one
``nn.Linear(PROBE_WIDTH, PROBE_WIDTH)`` each), ``actions_r`` the length of rank r's list
(``pipeline_order_with_comms``), ``phases_r`` the forward, backward, loss, posting and waiting time the clock
counts in that step. :mod:`simulator.pipeline_runtime` charges the term per action [src: own-pipeline-action-probe].

From the same steps, the host time of posting the sends and receives (``_batch_p2p``, which the clock times as
pp, so it is not in the term above):

    pipeline_p2p_post_us = Σ_r median over steps of post_r / Σ_r p2p_r

``post_r`` the clock's posting seconds (``PipelineClock.comm_s``) in that step and ``p2p_r`` the ``SEND_*`` and
``RECV_*`` actions of rank r's list [src: own-pipeline-post-probe].

Not in the term: what ``forward_one_chunk`` and ``backward_one_chunk`` do around the stage module (the executor
measures that as forward and backward), and the executor's own work between steps (``zero_grad``, the batch). The
first is measured in the same steps, per compute action:

    pipeline_chunk_us = Σ_r median over steps of (chunk_r − inner_r) / Σ_r compute_r

``chunk_r`` the seconds inside rank r's ``forward_one_chunk`` and ``backward_one_chunk`` calls, ``inner_r`` those
inside the stage module's forward and torch's ``stage_backward`` they call, ``compute_r`` its F and B actions: the
stage's bookkeeping (``_retrieve_recv_activations`` / ``_retrieve_recv_grads``, flattening and caching the inputs
and outputs, normalising the output, detaching the last stage's) [src: own-pipeline-chunk-probe].
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from executor.compute_bench import Timing, timing_of
from simulator.schedules import ScheduleKind

PROBE_WIDTH = 8
"""Features of the probe's trivial stages (one ``nn.Linear``): kernels of a few µs, so the runtime's host work is
what the step holds."""


@dataclass(frozen=True, kw_only=True)
class PipelineActionTiming:
    """What :func:`time_pipeline_actions` measured and the per-action term derived from it."""

    schedule: ScheduleKind
    pp: int
    micro_batches: int
    actions: tuple[int, ...]
    """Each rank's actions per step, sends and receives included."""
    outside: tuple[Timing, ...]
    """Each rank's seconds per step outside every phase (median, p10, p90 over the timed steps)."""
    action_us: float
    p2p: tuple[int, ...] = ()
    """Each rank's sends and receives per step (``SEND_*``, ``RECV_*`` actions of its list)."""
    post: tuple[Timing, ...] = ()
    """Each rank's seconds per step posting them (``PipelineClock.comm_s``)."""
    post_us: float = 0.0
    compute: tuple[int, ...] = ()
    """Each rank's forward and backward actions per step."""
    chunk: tuple[Timing, ...] = ()
    """Each rank's seconds per step inside ``forward_one_chunk`` / ``backward_one_chunk`` but outside the module's
    forward and ``stage_backward``."""
    chunk_us: float = 0.0


def _loss(output, target):
    return ((output - target) ** 2).mean()


def _outside_s(clock, wall_s: float) -> float:
    """A step's seconds outside the phases ``clock`` (:class:`executor.phase_clock.PipelineClock`) counted."""
    waits_ns = sum(t1 - t0 for t0, t1, _ in clock.waits) + sum(t1 - t0 for t0, t1 in clock._pending)
    return wall_s - clock.forward_s - clock.backward_s - clock.comm_s - waits_ns / 1e9


class _ChunkTimer:
    """Seconds inside the stages' ``forward_one_chunk`` / ``backward_one_chunk`` (``outer_s``) and, within them,
    inside the stage module's forward and torch's ``stage_backward`` (``inner_s``); install before the phase clock
    wraps the stages."""

    def __init__(self, stages):
        import torch.distributed.pipelining.stage as stage_mod

        self.outer_s = self.inner_s = 0.0
        for stage in stages:
            stage.forward_one_chunk = self._timed(stage.forward_one_chunk, "outer_s")
            stage.backward_one_chunk = self._timed(stage.backward_one_chunk, "outer_s")
            stage.submod.forward = self._timed(stage.submod.forward, "inner_s")
        stage_mod.stage_backward = self._timed(stage_mod.stage_backward, "inner_s")  # the probe's own process

    def _timed(self, fn, field: str):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                setattr(self, field, getattr(self, field) + time.perf_counter() - start)
        return timed

    def take_s(self) -> float:
        """The bookkeeping seconds since the last call."""
        out, self.outer_s, self.inner_s = self.outer_s - self.inner_s, 0.0, 0.0
        return out


def _gpt_stages(spec, world: int, v: int, rank: int, micro_batch: int, m: int):
    """The executor's stages of ``spec`` (:class:`executor.strategies.pipeline.Stage`, layers split as evenly as
    they go, a stage may hold none) held by ``rank``, with a batch of ``m`` micro-batches of ``micro_batch``
    sequences and its targets."""
    import torch

    from executor.model import build_gpt
    from executor.strategies.pipeline import Stage, token_loss

    n, layers = world * v, spec.layers
    full = build_gpt(spec, seed=0)
    modules = [(Stage(full, tuple(range(s * layers // n, (s + 1) * layers // n)), s == 0, s == n - 1), s)
               for s in range(rank, n, world)]
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, spec.vocab, (micro_batch * m, spec.seq_len), generator=g)
    return modules, x, torch.randint(0, spec.vocab, (micro_batch * m, spec.seq_len), generator=g), token_loss


def _rank_probe(rank: int, world: int, kind_value: str, m: int, v: int, repeats: int, warmup: int, seed: int,
                spec=None, micro_batch: int = 2) -> tuple[int, int, list[float], list[float], int, list[float]]:
    """One rank of the probe (``executor.launch.run``): (its actions per step, its sends and receives per step,
    seconds outside the phases per timed step, seconds posting sends and receives per timed step, its forward and
    backward actions per step, seconds of the stages' bookkeeping per timed step)."""
    import torch
    from torch import nn
    from torch.distributed.pipelining import PipelineStage

    from executor.phase_clock import PipelineClock, TpClock
    from executor.strategies.pipeline import load_schedule
    from simulator.schedules import make_schedule

    torch.manual_seed(seed)
    schedule = make_schedule(ScheduleKind(kind_value), world, m, v)
    n = world * v
    mine = range(rank, n, world)
    if spec is None:
        modules = [(nn.Linear(PROBE_WIDTH, PROBE_WIDTH), s) for s in mine]
        x, target, loss = torch.randn(2 * m, PROBE_WIDTH), torch.randn(2 * m, PROBE_WIDTH), _loss
    else:
        modules, x, target, loss = _gpt_stages(spec, world, v, rank, micro_batch, m)
    stages = [PipelineStage(mod, s, n, torch.device("cpu")) for mod, s in modules]
    chunks = _ChunkTimer(stages)
    runner = load_schedule(schedule, stages, m)
    runner._loss_fn = loss
    clock = PipelineClock(runner, n, m, TpClock())
    first, last = rank == 0, (n - 1) in mine
    outside, post, book = [], [], []
    for i in range(warmup + repeats):
        kwargs = {"target": target, "losses": []} if last else {}
        chunks.take_s()
        start = time.perf_counter()
        with clock.timing():
            runner.step(*((x,) if first else ()), **kwargs)
        if i >= warmup:
            outside.append(_outside_s(clock, time.perf_counter() - start))
            post.append(clock.comm_s)
            book.append(chunks.take_s())
    listed = [a for a in runner.pipeline_order_with_comms[rank] if a is not None]
    p2p = sum(1 for a in listed if a.computation_type.name.startswith(("SEND_", "RECV_")))
    compute = sum(1 for a in listed if a.computation_type.name in ("FORWARD", "FULL_BACKWARD"))
    return len(listed), p2p, outside, post, compute, book


def time_pipeline_actions(*, pp: int = 2, micro_batches: int = 4, kind: ScheduleKind = ScheduleKind.GPIPE,
                          v: int = 1, repeats: int = 100, warmup: int = 5, thread_count: int = 1,
                          seed: int = 0, spec=None, micro_batch: int = 2) -> PipelineActionTiming:
    """The per-action term (module docstring) from ``pp`` gloo processes running schedule ``kind`` over
    ``micro_batches`` micro-batches (``v`` stages per rank), ``repeats`` timed steps after ``warmup``."""
    from executor.launch import run

    per_rank = run(_rank_probe, pp, args=(kind.value, micro_batches, v, repeats, warmup, seed, spec, micro_batch),
                   num_threads=thread_count)
    actions, p2p = tuple(r[0] for r in per_rank), tuple(r[1] for r in per_rank)
    outside, post, chunk = (tuple(timing_of(r[k]) for r in per_rank) for k in (2, 3, 5))
    compute = tuple(r[4] for r in per_rank)
    action_us = max(0.0, sum(o.median_s for o in outside) / sum(actions) * 1e6)
    post_us = sum(o.median_s for o in post) / sum(p2p) * 1e6 if sum(p2p) else 0.0
    chunk_us = max(0.0, sum(o.median_s for o in chunk) / sum(compute) * 1e6)
    return PipelineActionTiming(schedule=kind, pp=pp, micro_batches=micro_batches, actions=actions,
                                outside=outside, action_us=action_us, p2p=p2p, post=post, post_us=post_us,
                                compute=compute, chunk=chunk, chunk_us=chunk_us)
