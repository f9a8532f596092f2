"""The options of a plan run, shared by ``python -m executor.run`` (torchrun) and ``trainplan execute``.

Checked before anything is launched (:func:`prepare`): the plan file, the scale and world size,
the family's own refusals, the step counts, the output and trace paths. Each problem is one
:class:`~simulator.errors.SpecError` naming the flag.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from executor.fp8 import check_fp8_cuda, check_fp8_run
from executor.strategies import load_families
from executor.strategies.base import Backend, FamilySpec, Precision, check_model, family_spec
from simulator.strategy import Framework, ParamServerSync, ZeroStage
from simulator.strategy.kinds import MixedPrecision
from simulator.strategy.framework import resolve_framework
from simulator.errors import SpecError
from simulator.jsonio import check_writable
from simulator.plan_file import load_plan
from simulator.plan_scale import Scale, ScaledPlan, scale_plan
from simulator.workload.kinds import DtypePolicy

DEFAULT_TIMEOUT_S = 60.0
"""Process-group timeout and watchdog limit, seconds: how long a rank may wait on a silent peer."""


class PrecisionChoice(Enum):
    """``--precision``: the plan's (bf16 autocast for a bf16/fp16 model), or forced."""

    AUTO = "auto"
    FP32 = "fp32"
    BF16 = "bf16"

    def resolve(self, dtype: DtypePolicy) -> Precision:
        if self is PrecisionChoice.FP32 or (self is PrecisionChoice.AUTO and dtype is DtypePolicy.FP32):
            return Precision.FP32
        return Precision.BF16_AUTOCAST


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    plan: str
    scale: Scale
    steps: int
    warmup: int
    seed: int
    backend: Backend
    precision: PrecisionChoice
    out: str | None
    trace: str | None
    timeout_s: float
    threads: int | None
    measure_s: float | None = None
    """Time budget of the measured steps, seconds (``executor.step_budget``); None: exactly ``steps`` steps."""
    max_steps: int | None = None
    """Most steps with ``measure_s`` (None: ``executor.step_budget.DEFAULT_MAX_STEPS``)."""
    status_dir: str | None = None
    """Internal (the local supervisor): where each rank writes its progress and its error."""


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every form of a plan run takes (not ``--nproc``: torchrun gives the world size)."""
    p.add_argument("plan", help="plan file (trainplan plan --out, simulate --save-plan)")
    p.add_argument("--scale", default="as-planned", help="tiny, as-planned or a ratio in (0, 1] (default as-planned)")
    p.add_argument("--steps", type=int, default=5, help="optimizer steps, warm-up included (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="leading steps left out of the statistics (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the synthetic data (default 0)")
    p.add_argument("--backend", choices=[b.value for b in Backend], default=None,
                   help="gloo (CPU) or nccl (one GPU per rank); default nccl when CUDA is available, else gloo")
    p.add_argument("--precision", choices=[c.value for c in PrecisionChoice], default="auto",
                   help="auto: bf16 autocast for a bf16/fp16 model, fp32 for an fp32 one (default auto)")
    p.add_argument("--out", default=None, help="results file (JSON): written before the first step and at the end; "
                   "the steps in between go to OUT.steps.jsonl, folded in if the run dies")
    p.add_argument("--trace", default=None, metavar="DIR", help="write each rank's torch.profiler Chrome trace here")
    p.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds a rank may wait on a peer before the run fails (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--threads", type=int, default=None, help="torch threads per rank (default cores ÷ local ranks)")
    p.add_argument("--measure-s", type=float, default=None,
                   help="run more steps (--steps is then the least) until the measured ones take about this many "
                        "seconds, estimated from the median warm-up step after the first (default: exactly --steps)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="most steps, warm-up included, that --measure-s may run (default 400); only with --measure-s")
    p.add_argument("--status-dir", default=None, help=argparse.SUPPRESS)


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """Typed options from parsed flags; SpecError names the flag."""
    if args.steps is None or args.steps < 1:
        raise SpecError("--steps", f"must be a positive integer, got {args.steps}")
    if args.warmup is None or not 0 <= args.warmup < args.steps:
        raise SpecError("--warmup", f"must be in 0..{args.steps - 1} (fewer than --steps), got {args.warmup}")
    if not args.timeout_s > 0 or args.timeout_s == float("inf"):
        raise SpecError("--timeout-s", f"must be a positive number of seconds, got {args.timeout_s}")
    if args.threads is not None and args.threads < 1:
        raise SpecError("--threads", f"must be a positive integer, got {args.threads}")
    measure_s, max_steps = getattr(args, "measure_s", None), getattr(args, "max_steps", None)
    if measure_s is not None and not 0 < measure_s < float("inf"):
        raise SpecError("--measure-s", f"must be a positive number of seconds, got {measure_s}")
    if max_steps is not None and max_steps < args.steps:
        raise SpecError("--max-steps", f"must be at least --steps ({args.steps}), got {max_steps}")
    if max_steps is not None and measure_s is None:
        raise SpecError("--max-steps", "caps the steps --measure-s adds and does nothing without it; give "
                                       "--measure-s SECONDS too, or --steps N for a fixed count")
    try:
        scale = Scale.parse(args.scale)
    except SpecError as err:
        raise SpecError("--scale", err.problem) from None
    return RunOptions(plan=args.plan, scale=scale, steps=args.steps, warmup=args.warmup,
                      seed=args.seed, backend=resolve_backend(args.backend), precision=PrecisionChoice(args.precision),
                      out=args.out, trace=args.trace, timeout_s=args.timeout_s, threads=args.threads,
                      measure_s=measure_s, max_steps=max_steps, status_dir=args.status_dir)


def resolve_backend(name: str | None) -> Backend:
    """``--backend``: the one named, or NCCL when CUDA is available, else gloo; SpecError for NCCL without CUDA."""
    import torch

    if name is None:
        return Backend.NCCL if torch.cuda.is_available() else Backend.GLOO
    backend = Backend(name)
    if backend is Backend.NCCL and not torch.cuda.is_available():
        raise SpecError("--backend", "nccl needs CUDA GPUs and none is available; use --backend gloo")
    return backend


def prepare(options: RunOptions, nproc: int | None) -> tuple[ScaledPlan, FamilySpec]:
    """Check everything that can be checked before launching: SpecError names the flag or plan field."""
    plan = load_plan(options.plan)
    try:
        scaled = scale_plan(plan, options.scale, _workers(plan, nproc))
    except SpecError as err:
        raise (SpecError(f"--{err.field}", err.problem) if err.field in ("nproc", "scale") else err) from None
    scaled = _as_torch_runs(scaled)
    load_families()
    family = family_spec(scaled.run.layout())
    family.check(scaled.run, scaled.run.layout())
    check_model(scaled.run.model)
    check_fp8_run(scaled.run, options.backend, options.precision.resolve(scaled.run.model.dtype))
    if options.backend is Backend.NCCL:
        import torch

        if torch.cuda.device_count() < min(scaled.run.layout().world_size, _local_world()):
            raise SpecError("--backend", f"nccl needs one GPU per local rank; {torch.cuda.device_count()} visible")
        check_fp8_cuda(scaled.run)
    if options.out is not None:
        check_writable(options.out, "--out")
    if options.trace is not None:
        trace = Path(options.trace)
        if trace.exists() and not trace.is_dir():
            raise SpecError("--trace", f"{options.trace!r} is a file; give a folder")
        if not trace.exists() and not trace.parent.is_dir():
            raise SpecError("--trace", f"folder {str(trace.parent)!r} does not exist")
    return scaled, family


def torch_framework(zero: ZeroStage) -> Framework:
    """The framework the executor runs a ZeRO stage with: torch DDP and ZeroRedundancyOptimizer (whole
    tensors) at ZeRO 0-1, FSDP2 ``fully_shard`` at ZeRO 2-3 (docs/executor.md)."""
    return Framework.TORCH_DDP if zero in (ZeroStage.ZERO0, ZeroStage.ZERO1) else Framework.FSDP2


def _as_torch_runs(scaled: ScaledPlan) -> ScaledPlan:
    """``scaled`` whose run plan names the framework torch really runs, with a note when the plan named
    (or implied) another: the simulator then estimates what ran (memory and ZeRO calls differ by
    framework), and the change is said, not silent. Likewise the mixed precision: torch DDP (ZeRO 0-1) runs
    a bf16 model under ``torch.autocast`` over fp32 parameters, so a plan asking for ``param-dtype`` there
    runs (and is estimated) as ``autocast``; FSDP2 runs either (:meth:`RunContext.mp_policy`). A plan for
    FSDP1's flat parameters (``fsdp1_flat_params``) runs as FSDP2, so it is estimated with FSDP2's copies."""
    s = scaled.run.strategy
    framework = torch_framework(s.zero)
    notes = scaled.notes
    if resolve_framework(s.zero, s.partitioning, s.framework)[1] is not framework:
        was = s.framework.value if s.framework else f"{resolve_framework(s.zero, s.partitioning)[1].value} (implied)"
        s = replace(s, framework=framework, partitioning=None)
        notes += (f"framework {was} → {framework.value}: torch runs ZeRO-{int(s.zero)} this way",)
    if framework is Framework.TORCH_DDP and s.mixed_precision is MixedPrecision.PARAM_DTYPE:
        s = replace(s, mixed_precision=MixedPrecision.AUTOCAST)
        notes += ("mixed_precision param-dtype → autocast: torch DDP keeps fp32 parameters under torch.autocast",)
    if s.fsdp1_flat_params:
        s = replace(s, fsdp1_flat_params=False)
        notes += ("fsdp1_flat_params → off: torch runs FSDP2 fully_shard, whose all-gather copy-out and "
                  "reduce-scatter copy-in run on the compute stream",)
    if s is scaled.run.strategy:
        return scaled
    return replace(scaled, run=replace(scaled.run, strategy=s), notes=notes)


def _workers(plan, nproc: int | None) -> int | None:
    """Worker processes of ``nproc``: a parameter-server run's world also holds one rank per server shard."""
    sync = plan.strategy.dp_sync
    return nproc - sync.shards if nproc is not None and isinstance(sync, ParamServerSync) else nproc


def _local_world() -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
