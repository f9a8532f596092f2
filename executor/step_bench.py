"""Time the tiny model's forward and backward the way a rank of a run does: in a step, in lockstep with its peers.

``trainplan calibrate --compute`` timed the host time per dispatched operator on one block in a tight loop, one
process alone (:func:`executor.compute_bench.time_block_phases`). A rank of the executor runs the whole model once
per micro-batch inside a step: a gloo barrier starts the step (``executor/run.py``), each micro-batch's forward
follows the previous backward or the previous step's optimizer and bookkeeping, and its peers run on the other
cores. Measured 2026-11-25 (docs/validation.md, "Per-operator host time in the rank's step"): concurrency leaves
per-call medians within 5 %, a barrier adds 0.06-0.09 ms to the first forward, and a micro-batch's forward in a step
costs 0.33-0.64 ms against 0.23-0.29 ms in a tight loop: most of the gap is where the call sits, not the peers
[src: own-rank-step-probe].

This probe runs ``processes`` gloo processes (the executor's threads per rank), each training the plain tiny model
(no DDP: its reducer is ``host.ddp_*``) the way :class:`executor.strategies.data_parallel.DataParallelRunner`
does: a barrier, then per step the global batch's replica share split into ``micro_batches``; each micro-batch's
forward with the loss and its backward timed apart; the AdamW step; ``zero_grad(set_to_none=False)``; the loss
all-reduced (the run's check, outside the step). Per rank it keeps, over the timed steps,

    forward_s  = Σ forward  / micro_batches,      backward_s = Σ backward / micro_batches,
    optimizer_s = the AdamW step (after the last backward, as in the run),
    outside_s  = step − Σ forward − Σ backward − optimizer     (the loop's own work: batch, slicing, zero_grad)

and :func:`executor.calibrate_calls.step_call_overheads` turns the first two into the per-operator fields, and
:func:`executor.calibrate_host.adamw_call_us` the third into ``op_call_overhead_us``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from executor.compute_bench import Timing, _percentile
from simulator.workload.transformer import TransformerSpec

STEP_PROBE_PROCESSES = 2
"""Processes of the probe: two ranks on this 2-core machine's two cores, the suite's most common count (15 of its 21
cases run 2 ranks); their threads per rank are :func:`executor.launch.threads_per_rank`'s."""
STEP_PROBE_MICRO_BATCHES = 2
"""Micro-batches per step: the suite's m for dp = 2 (8 samples / (2 replicas · 2))."""


@dataclass(frozen=True, kw_only=True)
class RankStepTiming:
    """What :func:`time_rank_steps` measured, per rank (median, p10, p90 over the timed steps)."""

    processes: int
    micro_batches: int
    forward: tuple[Timing, ...]
    """Each rank's forward with the loss, per micro-batch (the step's sum / micro_batches)."""
    backward: tuple[Timing, ...]
    """Each rank's backward, per micro-batch."""
    outside: tuple[Timing, ...]
    """Each rank's seconds per step outside the forward, backward and optimizer."""
    optimizer: tuple[Timing, ...] = ()
    """Each rank's AdamW step."""

    @property
    def forward_s(self) -> float:
        """Mean over ranks of the median forward per micro-batch."""
        return statistics.fmean(t.median_s for t in self.forward)

    @property
    def backward_s(self) -> float:
        return statistics.fmean(t.median_s for t in self.backward)

    @property
    def outside_s(self) -> float:
        return statistics.fmean(t.median_s for t in self.outside)

    @property
    def optimizer_timing(self) -> Timing:
        """The AdamW step, each statistic the mean over ranks."""
        return Timing(median_s=statistics.fmean(t.median_s for t in self.optimizer),
                      p10_s=statistics.fmean(t.p10_s for t in self.optimizer),
                      p90_s=statistics.fmean(t.p90_s for t in self.optimizer))


def _rank_steps(rank: int, world: int, spec: TransformerSpec, micro_batch: int, m: int, repeats: int, warmup: int,
                seed: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """One rank (``executor.launch.run``): per timed step, forward and backward per micro-batch, outside and optimizer
    seconds."""
    import torch
    import torch.distributed as dist

    from executor.data import global_batch, micro_batches, replica_samples
    from executor.model import build_gpt
    from executor.reference import make_optimizer

    model = build_gpt(spec, seed)
    optimizer = make_optimizer(model.parameters())
    fwd, bwd, outside, opt = [], [], [], []
    for step in range(warmup + repeats):
        dist.barrier()  # every step starts together, as executor/run.py's
        start = time.perf_counter()
        inputs, targets = (replica_samples(t, rank, world) for t in
                           global_batch(seed, step, batch=micro_batch * m * world, seq=spec.seq_len, vocab=spec.vocab))
        local, f, b = torch.zeros(()), 0.0, 0.0
        for x, y in zip(micro_batches(inputs, m), micro_batches(targets, m)):
            t0 = time.perf_counter()
            loss = model(x, y) / m
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            f, b = f + t1 - t0, b + t2 - t1
            local += loss.detach().float()
        t3 = time.perf_counter()
        optimizer.step()
        t4 = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        end = time.perf_counter()
        dist.all_reduce(local)  # the run's loss check, outside the step
        if step >= warmup:
            fwd.append(f / m)
            bwd.append(b / m)
            outside.append((end - start) - f - b - (t4 - t3))
            opt.append(t4 - t3)
    return fwd, bwd, outside, opt


def time_rank_steps(spec: TransformerSpec, micro_batch: int, *, processes: int = STEP_PROBE_PROCESSES,
                    micro_batches: int = STEP_PROBE_MICRO_BATCHES, repeats: int = 100, warmup: int = 5,
                    thread_count: int = 1, seed: int = 0) -> RankStepTiming:
    """The probe of the module docstring on ``processes`` gloo processes of ``thread_count`` threads each."""
    from executor.launch import run

    per_rank = run(_rank_steps, processes, args=(spec, micro_batch, micro_batches, repeats, warmup, seed),
                   num_threads=thread_count)
    forward, backward, outside, optimizer = (tuple(_timing(r[k]) for r in per_rank) for k in range(4))
    return RankStepTiming(processes=processes, micro_batches=micro_batches, forward=forward, backward=backward,
                          outside=outside, optimizer=optimizer)


def _timing(seconds: list[float]) -> Timing:
    return Timing(median_s=statistics.median(seconds), p10_s=_percentile(seconds, 0.1),
                  p90_s=_percentile(seconds, 0.9))
