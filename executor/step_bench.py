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
    first_cold_s = forward_1 − mean(forward_2..m)               (the first micro-batch after the between-step work)

Between steps each rank does what ``executor/run.py``'s loop does, with its function: the step's record gathered on
rank 0, the rank's status file written and rank 0's step journal line appended (:func:`_between_steps`).
:func:`executor.calibrate_calls.step_call_overheads`
turns the warm forward (``forward_s − first_cold_s / micro_batches``) and the backward into the per-operator fields,
:func:`executor.calibrate_host.adamw_call_us` the optimizer into ``op_call_overhead_us``, and ``outside_s`` and
``first_cold_s`` become ``host.step_loop_us`` and ``host.first_microbatch_cold_us`` (:mod:`simulator.step_loop`)
[src: own-step-loop-probe].

With ``ddp`` the same processes then run as many steps of the model wrapped in ``DistributedDataParallel`` as the
executor's data-parallel family wraps it at ZeRO 0 (one bucket; its comm hook without the collective,
:func:`executor.host_bench._bucket_hook`, which the model times as a call of its own; ``no_sync`` on all but the last
micro-batch, as with overlapped reduction). DDP's host terms in a rank's step are then, per rank, means over ranks,

    ddp_forward_call_us = forward_s(DDP) − forward_s(plain)                  (per forward call)
    ddp_sync_extra_s    = last backward(DDP) − last backward(plain)          (the synchronising backward)

which :func:`executor.calibrate_host.with_step_ddp` writes (less the bucket passes, a kernel of their own) in place of
the tight loop's on one rank, where the wrapper's few Python calls stay hot and measured 0 µs per forward in both
quiet calibrations of 2026-11-25 17:26 / 17:29 [src: own-ddp-step-probe].

With ``fsdp2`` the same processes then run as many steps of the model under the executor's FSDP2 ZeRO-3 wrap on their
own gloo group (its all-gathers and reduce-scatters real), and the AdamW step over the shards gives

    dtensor_call_us = (optimizer_s(FSDP2) − optimizer_s(plain)) / (ADAMW_PER_TENSOR_CALLS · tensors)

(means over ranks of the medians), which :func:`executor.calibrate_host.with_step_dtensor_calls` writes in place of
the fake group's tight loop: 27.8-30.1 µs in the step against 17.2-17.7 µs in the loop, and the step's figure is the
one the executor's zero3 run pays (2026-11-26, loaded) [src: own-dtensor-in-step-probe]. The FSDP2 steps also
call ``set_requires_gradient_sync(True)`` before each micro-batch, as the executor's runner does, timed apart, and
``zero_grad`` is timed in both; means over ranks of the medians,

    fsdp2_sync_switch_us = switch seconds per step / micro_batches
    fsdp2_zero_grad_us   = max(0, zero_grad(FSDP2) − zero_grad(plain))

(together what the executor's FSDP2 loop spends outside the phases beyond the plain loop's), which
:func:`executor.calibrate_host.with_step_loop` writes as ``host.fsdp2_sync_switch_us`` and
``host.fsdp2_zero_grad_us`` (:mod:`simulator.step_loop`) [src: own-fsdp2-loop-probe].
"""

from __future__ import annotations

import statistics
import time

from executor.compute_bench import timing_of
from executor.step_timing import RankStepTiming
from simulator.rank_max import effective_sd_fraction
from simulator.workload.transformer import TransformerSpec

STEP_PROBE_PROCESSES = 2
"""Processes of the probe: two ranks on this 2-core machine's two cores, the suite's most common count (15 of its 21
cases run 2 ranks); their threads per rank are :func:`executor.launch.threads_per_rank`'s."""
STEP_PROBE_MICRO_BATCHES = 2
"""Micro-batches per step: the suite's m for dp = 2 (8 samples / (2 replicas · 2))."""


def _fsdp2_model(model, world: int):
    """``model`` sharded as the executor's ZeRO-3 shards it (``executor.strategies.dp_wrap.wrap_fsdp``: ``fully_shard``
    on every block, then on the root, ``reshard_after_forward=True``) over the probe's ``world`` gloo ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _rank_steps(rank: int, world: int, spec: TransformerSpec, micro_batch: int, m: int, repeats: int, warmup: int,
                seed: int, status_dir: str | None = None, ddp: bool = False,
                fsdp2: bool = False) -> tuple[list[float], ...]:
    """One rank (``executor.launch.run``): per timed step, forward and backward per micro-batch, outside and optimizer
    seconds, the first micro-batch's forward less the mean of the others', and the last micro-batch's backward; with
    ``ddp``, then the forward per micro-batch and the last backward of as many steps under DDP, with ``fsdp2`` the
    AdamW step, the time outside the phases, the ``set_requires_gradient_sync`` calls and ``zero_grad`` per step of
    as many under FSDP2 ZeRO-3, then the plain steps' ``zero_grad`` (module docstring; an empty list for a part not
    run).
    Between steps it runs the executor's own bookkeeping (:func:`_between_steps`)."""
    from executor.model import build_gpt

    args = (rank, world, spec, micro_batch, m, repeats, warmup, seed, status_dir)
    plain = _steps(build_gpt(spec, seed), *args)
    ddp_parts = _steps(_ddp_model(build_gpt(spec, seed)), *args, sync_last_only=True) if ddp else None
    fsdp2_parts = _steps(_fsdp2_model(build_gpt(spec, seed), world), *args, switch=True) if fsdp2 else None
    return plain[:6] + ((ddp_parts[0], ddp_parts[5]) if ddp_parts else ([], [])) + (
        (fsdp2_parts[3], fsdp2_parts[2], fsdp2_parts[6], fsdp2_parts[7], plain[7]) if fsdp2_parts
        else ([], [], [], [], []))


def _ddp_model(model):
    """``model`` wrapped as the executor's data-parallel family wraps it at ZeRO 0 with one bucket, its comm hook
    without the collective (:func:`executor.host_bench._bucket_hook`)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from executor.host_bench import _bucket_hook

    wrapped = DDP(model, bucket_cap_mb=1 << 20)
    wrapped.register_comm_hook(None, _bucket_hook)
    return wrapped


def _steps(model, rank: int, world: int, spec: TransformerSpec, micro_batch: int, m: int, repeats: int, warmup: int,
           seed: int, status_dir: str | None, sync_last_only: bool = False, between=None,
           switch: bool = False) -> tuple[list[float], ...]:
    """The timed steps of :func:`_rank_steps` on ``model``; ``sync_last_only``: every micro-batch but the last
    under the DDP model's ``no_sync``; ``between``: the work between two steps, called as :func:`_between_steps`
    is (None: :func:`_between_steps`); ``switch``: before each micro-batch the FSDP2 model's
    ``set_requires_gradient_sync(True)``, as the executor's data-parallel runner calls it
    (``executor/strategies/data_parallel.py`` ``_accumulating``), timed: its seconds per step are the 7th list;
    the 8th is ``zero_grad``'s per step."""
    import contextlib

    import torch
    import torch.distributed as dist

    from executor.data import global_batch, micro_batches, replica_samples
    from executor.reference import make_optimizer

    optimizer = make_optimizer(model.parameters())
    fwd, bwd, outside, opt, cold, last, switches, zeroing = [], [], [], [], [], [], [], []
    gathered = [None] * world if rank == 0 else None
    for step in range(warmup + repeats):
        dist.barrier()  # every step starts together, as executor/run.py's
        start = time.perf_counter()
        inputs, targets = (replica_samples(t, rank, world) for t in
                           global_batch(seed, step, batch=micro_batch * m * world, seq=spec.seq_len, vocab=spec.vocab))
        local, forwards, backwards, switch_s = torch.zeros(()), [], [], 0.0
        for i, (x, y) in enumerate(zip(micro_batches(inputs, m), micro_batches(targets, m))):
            if switch:  # outside every phase, as in the run
                s0 = time.perf_counter()
                model.set_requires_gradient_sync(True)
                switch_s += time.perf_counter() - s0
            quiet = sync_last_only and i < m - 1
            with model.no_sync() if quiet else contextlib.nullcontext():
                t0 = time.perf_counter()
                loss = model(x, y) / m
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
            forwards.append(t1 - t0)
            backwards.append(t2 - t1)
            local += loss.detach().float()
        t3 = time.perf_counter()
        optimizer.step()
        t4 = time.perf_counter()
        z0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        end = time.perf_counter()
        dist.all_reduce(local)  # the run's loss check, outside the step
        f, b = sum(forwards), sum(backwards)
        record = {"t": end - start, "loss": float(local), "phases": {"forward": f, "backward": b, "optimizer": t4 - t3}}
        (between or _between_steps)(rank, step, record, gathered, status_dir)
        if step >= warmup:
            fwd.append(f / m)
            bwd.append(b / m)
            outside.append((end - start) - f - b - (t4 - t3))
            opt.append(t4 - t3)
            cold.append(forwards[0] - statistics.fmean(forwards[1:]) if m > 1 else 0.0)
            last.append(backwards[-1])
            zeroing.append(end - z0)
            if switch:
                switches.append(switch_s)
    return fwd, bwd, outside, opt, cold, last, switches, zeroing


def _between_steps(rank: int, step: int, record: dict, gathered: list | None, status_dir: str | None) -> None:
    """What ``executor.run._train`` does between two steps, with its own function
    (:func:`executor.run_record.between_steps`): every rank's step record gathered on rank 0, each rank's status file
    written, and rank 0's step journal line appended (to a journal in ``status_dir``)."""
    import os

    from executor.run_record import between_steps
    from simulator.run_journal import journal_path

    journal = journal_path(os.path.join(status_dir, "results.json")) if rank == 0 and status_dir else None
    between_steps(rank, step, record, gathered, status_dir, journal)


def time_rank_steps(spec: TransformerSpec, micro_batch: int, *, processes: int = STEP_PROBE_PROCESSES,
                    micro_batches: int = STEP_PROBE_MICRO_BATCHES, repeats: int = 100, warmup: int = 5,
                    thread_count: int = 1, seed: int = 0, ddp: bool = False, fsdp2: bool = False) -> RankStepTiming:
    """The probe of the module docstring on ``processes`` gloo processes of ``thread_count`` threads each; ``ddp``:
    the DDP steps too; ``fsdp2``: the FSDP2 ZeRO-3 steps too (their AdamW step kept)."""
    import tempfile

    from executor.launch import run

    with tempfile.TemporaryDirectory(prefix="trainplan-step-probe-") as status_dir:
        per_rank = run(_rank_steps, processes, args=(spec, micro_batch, micro_batches, repeats, warmup, seed,
                                                     status_dir, ddp, fsdp2), num_threads=thread_count)
    (forward, backward, outside, optimizer, cold, last, ddp_forward, ddp_last, fsdp2_opt, fsdp2_out, switch,
     fsdp2_zeroing, zeroing) = (
        tuple(timing_of(r[k]) for r in per_rank) if per_rank[0][k] else () for k in range(len(per_rank[0])))
    m = micro_batches
    totals = [[(f + b) * m + o + a for f, b, o, a in zip(*r[:4])] for r in per_rank]
    return RankStepTiming(processes=processes, micro_batches=micro_batches, forward=forward, backward=backward,
                          outside=outside, optimizer=optimizer, first_cold=cold, last_backward=last,
                          ddp_forward=ddp_forward, ddp_last_backward=ddp_last, fsdp2_optimizer=fsdp2_opt,
                          fsdp2_outside=fsdp2_out, fsdp2_switch=switch, fsdp2_zero_grad=fsdp2_zeroing,
                          zero_grad=zeroing,
                          optimizer_tensors=_tensors(spec) if fsdp2 else 0,
                          step_independent_sd_fraction=step_jitter_fraction(totals))


def _tensors(spec: TransformerSpec) -> int:
    """Parameter tensors of the executor's model of ``spec`` (each one AdamW steps)."""
    from executor.model import build_gpt

    return len(list(build_gpt(spec, 0).parameters()))


def step_jitter_fraction(totals: list[list[float]]) -> float:
    """``simulator.rank_max.effective_sd_fraction`` of the ranks' paired per-step totals (ranks × steps): the median
    of the per-step maximum over the ranks above a rank's median, over z(0.5^(1/n)); 0 for one rank or no steps."""
    return effective_sd_fraction(totals) if len(totals) > 1 and all(totals) else 0.0
