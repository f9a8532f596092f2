"""Run a plan file on torch.distributed: the one entry point of ``torchrun`` and ``trainplan execute``.

    torchrun --nproc-per-node 4 -m executor.run plan.json --scale tiny --out results.json

Each rank reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (set by torchrun, by
``trainplan execute``'s local supervisor, or by SLURM/Kubernetes launchers), so the same command
runs on one machine or many. Without them it runs as a world of one. Per rank:

1. check the options and the plan (:func:`executor.options.prepare`); scale it to the world size;
2. join the process group (gloo or NCCL; its timeout is ``--timeout-s``, so a silent peer fails
   the run instead of hanging it), build the ``DeviceMesh`` (dims named by the placement,
   outermost first) and the :class:`~executor.strategies.run_context.RunContext`;
3. build the family's :class:`~executor.strategies.base.StepRunner` and run ``--steps`` steps (with
   ``--measure-s``, as many more as fill that time: :mod:`executor.step_budget`),
   timing each (``time.perf_counter`` around ``train_step``, after a device synchronise, less the
   step's ``check_s``: the loss reduction the equivalence checks need). Every step starts after a
   barrier: rank 0's bookkeeping between steps (below) would otherwise be counted in the other
   ranks' next step, which waits for it in its first collective (measured 2026-11-24 on the quick
   suite's ddp case: rank 1's step 16 ms against rank 0's 6 ms, on a quiet 2-core VM);
4. rank 0 writes the results file (``simulator.run_results``, atomically) before the first step, with
   no steps; after every step it gathers every rank's record and appends it as one line of the
   file's step journal (:mod:`executor.run_record`, :mod:`simulator.run_journal`), so completed steps
   survive a later failure without a whole-file rewrite between timed steps (20-70 ms on the 2-core VM,
   which slowed the next step: docs/validation.md, cal19); at the end it writes the whole file with
   model-state bytes and peak memory per rank (on CPU the allocator's peak over set-up
   and the warm-up steps, and the peak RSS: :mod:`executor.measure`) (and, for a parameter server, the
   staleness its server ranks measured: ``runner.pushes()``) and marks the run complete.

A rank that fails writes ``{"error", "detail", "peer"}`` to ``--status-dir`` (the supervisor's,
``executor/supervise.py``), ``peer`` saying the error came from a peer's failure (a
connection reset or a timeout in a collective), and rank 0 marks the results failed.

Fault injection, for the failure tests only: ``TRAINPLAN_FAULT=RANK:STEP:KIND`` makes rank RANK
``raise``, ``kill`` itself (SIGKILL) or ``hang`` at the start of step STEP; ``RANK:end:abort``
makes rank RANK abort (SIGABRT) after the run completed, as gloo's teardown sometimes does.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from dataclasses import replace
from datetime import timedelta

import torch
import torch.distributed as dist

from executor import step_budget
from executor.launch import threads_per_rank
from executor.measure import AllocationWindow, model_state_dict, peak_memory, peak_rss_bytes, profiler, reset_peak
from executor.options import RunOptions, add_run_arguments, options_from_args, prepare
from executor.run_record import Recorder, between_steps, write_status
from executor.sdpa import with_sdpa_backend
from executor.strategies.base import Backend, Precision, phases_absent
from executor.strategies.run_context import RunContext
from simulator.errors import SpecError
from simulator.run_results import Failure, RunStatus
from simulator.strategy import ParamServerSync

_PEER_WORDS = ("connection reset", "connection closed", "timed out", "timeout", "broken pipe", "peer")


def nccl_environment(plan) -> dict[str, str]:
    """Environment for NCCL that the plan implies: ``NCCL_ALGO`` for ring, tree or NVLS all-reduce,
    scoped to all-reduce (:func:`executor.launch_files.nccl_algo`, the one home of the rule)."""
    from executor.launch_files import nccl_algo

    var = nccl_algo(plan)
    return {} if var is None else {var.name: var.value}


def _mesh(layout, device_type: str):
    """The layout's DeviceMesh; None for a parameter server (its world also holds the server ranks)."""
    from torch.distributed.device_mesh import init_device_mesh

    if isinstance(layout.strategy.dp_sync, ParamServerSync):
        return None

    names = tuple(reversed(layout.strategy.placement.dims))
    return init_device_mesh(device_type, tuple(layout.dims[n] for n in names), mesh_dim_names=names)


def build_context(plan, *, rank: int, world: int, local_rank: int, backend: Backend, seed: int,
                  precision: Precision) -> RunContext:
    """The RunContext of ``plan`` (already scaled to ``world``) on this rank; the process group must exist."""
    device = torch.device("cuda", local_rank) if backend is Backend.NCCL else torch.device("cpu")
    return RunContext(rank=rank, world=world, local_rank=local_rank, backend=backend, device=device, seed=seed,
                      plan=plan, spec=plan.model, layout=plan.layout(), mesh=_mesh(plan.layout(), device.type),
                      precision=precision)


def _context(options: RunOptions, scaled, rank: int, world: int, local_rank: int) -> RunContext:
    return build_context(scaled.run, rank=rank, world=world, local_rank=local_rank, backend=options.backend,
                         seed=options.seed, precision=options.precision.resolve(scaled.run.model.dtype))


def _inject_fault(rank: int, step: int) -> None:
    spec = os.environ.get("TRAINPLAN_FAULT")
    if not spec:
        return
    fault_rank, fault_step, kind = spec.split(":")
    if int(fault_rank) != rank or fault_step == "end" or int(fault_step) != step:
        return
    if kind == "raise":
        raise RuntimeError(f"injected fault on rank {rank} at step {step}")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        while True:
            time.sleep(1.0)


def _step_record(ctx: RunContext, runner, step: int) -> dict:
    ctx.synchronize()
    t0 = time.perf_counter()
    rec = runner.train_step(step)
    ctx.synchronize()
    phases = {p.value: 0.0 for p in phases_absent(ctx.layout)} | {p.value: s for p, s in rec.phases_s.items()}
    return {"t": time.perf_counter() - t0 - rec.check_s, "loss": rec.loss, "phases": phases}


def _budgeted_total(options: RunOptions, recorder: "Recorder | None") -> int:
    """All ranks' step count under ``--measure-s`` (:mod:`executor.step_budget`): rank 0 decides from the slowest
    rank's warm-up steps, which it has gathered, and broadcasts it; the recorder notes the count."""
    decided = [None]
    if recorder is not None:
        slowest = [max(ranks) for ranks in zip(*([rec["t"] for rec in steps] for steps in recorder.steps))]
        decided[0] = step_budget.total_steps(steps=options.steps, warmup=options.warmup, measure_s=options.measure_s,
                                             warm_step_s=step_budget.warm_step_s(slowest),
                                             max_steps=options.max_steps or step_budget.DEFAULT_MAX_STEPS)
    dist.broadcast_object_list(decided, src=0)
    if recorder is not None:
        recorder.info = replace(recorder.info, steps=decided[0])
    return decided[0]


def _train(options: RunOptions, scaled, family, ctx: RunContext) -> "Recorder | None":
    window = AllocationWindow(ctx, options.warmup, traced=options.trace is not None)
    window.open()  # the model's tensors and the warm-up steps' (executor.measure: peak allocated on CPU)
    runner = family.build(ctx)
    write_status(options.status_dir, ctx.rank, "step", 0)
    recorder = Recorder(options, scaled, family, ctx, runner) if ctx.rank == 0 else None
    if recorder is not None:
        recorder.start()  # the results file with no steps yet: the steps go to its journal (executor.run_record)
    reset_peak(ctx)
    gathered = [None] * ctx.world if ctx.rank == 0 else None
    try:
        with profiler(ctx, options.trace):
            step, total = 0, options.steps
            while step < total:
                _inject_fault(ctx.rank, step)
                dist.barrier()  # start each step together: rank 0's bookkeeping (gather, journal) is not the step's
                record = _step_record(ctx, runner, step)
                if step == options.warmup - 1:
                    window.close()
                between_steps(ctx.rank, step, record, gathered, options.status_dir,
                              recorder.journal if recorder is not None else None)
                if recorder is not None:
                    recorder.add(gathered)
                if step == step_budget.decision_step(options.warmup) and options.measure_s is not None:
                    total = _budgeted_total(options, recorder)
                step += 1
        window.close()  # no-op: closed after the last warm-up step
        rss = peak_rss_bytes() if ctx.device.type == "cpu" else None  # one reading for both fields
        peak, kind = peak_memory(ctx, window, rss)
        final = {"model_state": model_state_dict(runner), "peak": peak, "peak_kind": kind, "rss": rss,
                 "pushes": runner.pushes() if hasattr(runner, "pushes") else None}
        dist.gather_object(final, gathered, dst=0)
    except BaseException as err:
        if recorder is not None:
            recorder.save(RunStatus.FAILED, _failure(err, ctx.rank))
        raise
    if recorder is not None:
        recorder.final = gathered
        recorder.save(RunStatus.COMPLETE)
    return recorder


def _is_peer_error(err: BaseException) -> bool:
    if isinstance(err, getattr(dist, "DistError", ())) and not isinstance(err, SpecError):
        return True
    return any(w in str(err).lower() for w in _PEER_WORDS)


def _failure(err: BaseException, rank: int) -> Failure:
    line = (str(err).strip().splitlines() or [type(err).__name__])[-1][:300]
    if _is_peer_error(err):
        return Failure(rank=None, error=f"rank {rank} saw a peer fail: {type(err).__name__}: {line}",
                       detail=traceback.format_exc()[-4000:])
    return Failure(rank=rank, error=f"{type(err).__name__}: {line}", detail=traceback.format_exc()[-4000:])


def run_rank(options: RunOptions) -> int:
    """One rank's whole run (the process group is created and destroyed here)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    scaled, family = prepare(options, world)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    torch.set_num_threads(threads_per_rank(local_world, options.threads))
    if options.backend is Backend.NCCL:
        for key, value in nccl_environment(scaled.run).items():
            os.environ.setdefault(key, value)
        torch.cuda.set_device(local_rank)
        scaled = with_sdpa_backend(scaled, torch.device("cuda", local_rank))  # the kernel SDPA runs here
    dist.init_process_group(options.backend.value, rank=rank, world_size=world,
                            timeout=timedelta(seconds=options.timeout_s))
    try:
        ctx = _context(options, scaled, rank, world, local_rank)
        recorder = _train(options, scaled, family, ctx)
        if recorder is not None:
            summary = recorder.results(RunStatus.COMPLETE).summary()
            step = summary["step_time_s"]
            print(f"ran {family.family.value} on {world} rank(s), scale {scaled.scale}: "
                  f"{summary['completed_steps']} steps, loss {summary['loss'][0]:.4f} → {summary['loss'][-1]:.4f}"
                  + (f", step median {step['median_s'] * 1e3:.1f} ms" if step else "")
                  + (f"; results: {options.out}" if options.out else ""))
        dist.barrier()  # leave together: a gloo rank that tears down while a peer still holds its pairs
        #                 can abort (SIGABRT seen once under load, after every step had completed)
        write_status(options.status_dir, rank, "done", True)  # every rank passed the barrier: the run is complete
    except BaseException as err:
        failure = _failure(err, rank)
        write_status(options.status_dir, rank, "error", {"error": failure.error, "detail": failure.detail,
                                               "peer": failure.rank is None})
        raise
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a peer's failure may have broken the group already
                pass
    if os.environ.get("TRAINPLAN_FAULT") == f"{rank}:end:abort":
        os.abort()
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m executor.run", description="Run a plan file on "
                                     "torch.distributed (under torchrun, or as a world of one).")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        from executor.launch import free_port

        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    try:
        return run_rank(options_from_args(args))
    except SpecError as err:
        if os.environ.get("RANK", "0") == "0":
            print(f"executor.run: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from executor.rank_exit import exit_rank

    exit_rank(main())  # no interpreter finalization after the run: executor/rank_exit.py
