"""``trainplan execute``: run a plan file for real on torch.distributed and write what it measured.

    trainplan execute plan.json [--nproc N] [--backend gloo|nccl] [--steps S --warmup W]
                      [--scale as-planned|tiny|RATIO] [--seed K] [--trace DIR] [--out results.json]
                      [--timeout-s T]

Everything is checked first (plan, scale, world size, family, paths, processes per core as for
``collective --measure`` and ``calibrate``: one line and exit 2); then N local processes run ``executor.run`` as torchrun would (``executor/supervise.py``). Under torchrun
already (RANK set), this process is one rank and runs in place. See docs/executor.md.
"""

from __future__ import annotations

import argparse
import os
import sys

from executor.options import add_run_arguments, options_from_args, prepare


def register(subparsers) -> None:
    p = subparsers.add_parser("execute", help="run a plan file on torch.distributed and record what it measured",
                              description="Run a plan file's strategy for real (gloo on CPU, NCCL on GPUs) and "
                                          "write measured step times, phases, memory and loss (docs/executor.md).")
    add_run_arguments(p)
    p.add_argument("--nproc", type=int, default=None,
                   help="local processes (default: the plan's GPUs); fewer shrinks dp, keeping tp and pp")
    p.set_defaults(handler=_run)


def _forwarded(args) -> list[str]:
    argv = [args.plan, "--scale", args.scale, "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--seed", str(args.seed), "--precision", args.precision, "--timeout-s", repr(args.timeout_s)]
    for flag, value in (("--backend", args.backend), ("--out", args.out), ("--trace", args.trace),
                        ("--threads", args.threads), ("--measure-s", args.measure_s), ("--max-steps", args.max_steps)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


def _run(args: argparse.Namespace) -> int:
    from executor import run, supervise
    from executor.launch import check_local_processes
    from executor.strategies.base import processes

    options = options_from_args(args)
    if "RANK" in os.environ:  # already one rank of a torchrun job: it ends as executor.run's ranks do
        from executor.rank_exit import exit_rank

        exit_rank(run.run_rank(options))
    if args.nproc is not None and args.nproc < 1:
        from simulator.errors import SpecError

        raise SpecError("--nproc", f"must be a positive integer, got {args.nproc}")
    if args.nproc is not None:
        check_local_processes(args.nproc, "--nproc")  # a huge --nproc is refused before the plan is scaled
    scaled, _ = prepare(options, args.nproc)
    nproc = processes(scaled.run.layout())
    warning = check_local_processes(nproc, "--nproc")  # the plan's own GPU count, when --nproc is not given
    for note in scaled.notes:
        print(f"note: {note}")
    if warning is not None:
        print(f"trainplan execute: {warning}", file=sys.stderr)
    if args.trace is not None:
        os.makedirs(args.trace, exist_ok=True)
    outcome = supervise.supervise(_forwarded(args), nproc, timeout_s=options.timeout_s, out=args.out)
    if outcome.warning:
        print(f"trainplan execute: warning: {outcome.warning}", file=sys.stderr)
    if not outcome.ok:
        who = "the run" if outcome.rank is None else f"rank {outcome.rank}"
        print(f"trainplan execute: {who} failed: {outcome.error}"
              + (f" (completed steps kept in {args.out})" if args.out else ""), file=sys.stderr)
        return 1
    return 0
