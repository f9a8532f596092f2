"""The contract between the plan runner (:mod:`executor.run`) and a strategy family.

The runner owns everything shared: reading and scaling the plan, the process group, the seeded
data, timing and memory measurement, the results file, failure handling. A *family* owns how one
kind of layout trains: which torch components wrap the model and how one optimizer step runs.
To add a family, write a module that builds a :class:`StepRunner` from a
:class:`~executor.strategies.run_context.RunContext` and
registers it; nothing else changes::

    from executor.strategies.base import Family, FamilySpec, register

    def check(plan, layout) -> None:          # no torch, no process group: runs before any launch
        if layout.sequence_parallel and ...:  # a plan field torch cannot run here
            raise SpecError("plan.strategy.sequence_parallel", "... (one line, with the fix)")

    def build(ctx: RunContext) -> StepRunner: # on every rank, after the process group exists
        ...

    register(FamilySpec(family=Family.TENSOR, check=check, build=build))

and add the module to :data:`executor.strategies.FAMILY_MODULES`.

What a :class:`StepRunner` must do (the runner calls these and nothing else):

- ``train_step(step)``: one optimizer step on the global batch of step ``step``
  (``executor.data.global_batch(ctx, step)``: every rank can build the whole batch, a pure function of
  (seed, step); take this rank's samples with ``executor.data.replica_samples``). Split it into the
  layout's ``micro_batches`` of ``micro_batch`` samples, accumulate, step AdamW with
  :data:`OPTIMIZER`. Return a :class:`StepRecord` whose ``loss`` is the mean token cross-entropy over
  the *whole global batch* before the update, the same float on every rank (reduce it; the
  single-process reference in :mod:`executor.reference` computes the same number), and the phases
  the family measured honestly (:class:`Phase`; leave out what it cannot separate and say in
  ``components()`` what each phase includes).
- ``model_state_bytes()``: this rank's model-state bytes, exact (``executor.memory_measure``'s
  storage accounting): :class:`ModelStateBytes`.
- ``components()``: ``{what: torch component}`` lines for the results file, e.g.
  ``{"gradient sync": "DDP, bucket_cap_mb=25, ring all-reduce comm hook (executor/p2p.py)"}``.
- ``model``: the ``torch.nn.Module`` this rank trains (the profiler trace and the tests look at it).
- optionally ``pushes()``: ``[(worker, step, update staleness, step lag), ...]`` this rank measured as a
  parameter server (``simulator.run_results.Staleness``).
- optionally ``phase_notes``: ``{phase value: how it is measured and what it includes}``, copied
  into the results file's ``run.phases``.

Rules every family keeps: weights come from ``executor.model.build_gpt(ctx.spec, seed=ctx.seed)``
(the same init as the reference); forward runs under ``ctx.autocast()``; the timed regions end with
``ctx.synchronize()`` (CUDA is asynchronous); a bad plan field is refused in ``check`` with a
one-line :class:`~simulator.errors.SpecError`, never silently changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from simulator.errors import SpecError
from simulator.plan_file import Plan
from simulator.strategy import ParallelLayout, ParamServerSync

if TYPE_CHECKING:
    from executor.strategies.run_context import RunContext


class Backend(Enum):
    """torch.distributed backend of the run."""

    GLOO = "gloo"
    """CPU tensors over TCP (the only backend on a machine without GPUs)."""
    NCCL = "nccl"
    """CUDA tensors, one GPU per rank."""


class Precision(Enum):
    """What arithmetic the forward runs in (parameters, gradients and Adam state stay fp32)."""

    FP32 = "fp32"
    """Everything fp32."""
    BF16_AUTOCAST = "bf16-autocast"
    """``torch.autocast(dtype=bfloat16)`` around the forward (matmuls in bf16; CPU and GPU)."""


class Family(Enum):
    """Strategy families; each also covers dp ≥ 1 replicas of its layout (and ZeRO over them)."""

    DATA_PARALLEL = "data-parallel"
    """tp = pp = 1: DDP, ZeRO-1 (ZeroRedundancyOptimizer), ZeRO-2/3 (FSDP2), offload, recompute."""
    TENSOR = "tensor"
    """tp > 1, pp = 1: DTensor tensor (and sequence) parallelism, with dp/FSDP2 on a 2-D mesh."""
    PIPELINE = "pipeline"
    """pp > 1, tp = 1: torch.distributed.pipelining running the simulator's schedule."""
    PIPELINE_TENSOR = "pipeline-tensor"
    """pp > 1 and tp > 1 (with dp): a 3-D mesh."""
    PARAM_SERVER = "param-server"
    """dp_sync param-server: workers push gradients to and pull parameters from server ranks."""


def processes(layout: ParallelLayout) -> int:
    """Processes a run of ``layout`` takes: its worker ranks, plus one rank per server shard for a
    parameter server (``executor.strategies.param_server``: servers are processes of their own)."""
    sync = layout.strategy.dp_sync
    return layout.world_size + (sync.shards if isinstance(sync, ParamServerSync) else 0)


def family_of(layout: ParallelLayout) -> Family:
    """The family that runs ``layout``."""
    if isinstance(layout.strategy.dp_sync, ParamServerSync):
        return Family.PARAM_SERVER
    return {(False, False): Family.DATA_PARALLEL, (True, False): Family.TENSOR,
            (False, True): Family.PIPELINE, (True, True): Family.PIPELINE_TENSOR}[(layout.tp > 1, layout.pp > 1)]


class Phase(Enum):
    """Per-step phases, named as the simulator's breakdown categories (``simulator.results.Category``)."""

    FORWARD = "forward"
    BACKWARD = "backward"
    RECOMPUTE = "recompute"
    """The forward rerun by activation checkpointing inside backward (``executor.recompute``)."""
    OPTIMIZER = "optimizer"
    DP = "dp"
    """Data-parallel gradient sync that compute did not hide (exposed)."""
    TP = "tp"
    EP = "ep"
    """Time inside the MoE layers' all-to-alls (token dispatch and combine, ``executor.moe.EpClock``)."""
    PP = "pp"
    BUBBLE = "bubble"


def phases_absent(layout: ParallelLayout) -> tuple[Phase, ...]:
    """Phases ``layout`` cannot have, measured as 0 s by construction: recompute without recomputation, tp
    communication at tp 1, pipeline communication and bubble at pp 1 (the runner records them so a dp-only
    run's file says 0, not unknown)."""
    from simulator.workload import Recompute

    return (((Phase.RECOMPUTE,) if layout.strategy.recompute is Recompute.NONE else ())
            + ((Phase.TP,) if layout.tp == 1 else ()) + ((Phase.PP, Phase.BUBBLE) if layout.pp == 1 else ()))


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW as every family and the reference run it: torch defaults except the learning rate."""

    lr: float = 1e-3
    """A choice for a few-step run (any value trains; the loss test only needs all runs to agree)."""
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    """``torch.optim.AdamW``'s default."""


OPTIMIZER = OptimizerConfig()


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """What one optimizer step produced on one rank."""

    loss: float
    """Mean token cross-entropy over the global batch, before the update; equal on every rank."""
    phases_s: dict[Phase, float] = field(default_factory=dict)
    """Seconds per measured phase on this rank (absent: not measured)."""
    grad_norm: float | None = None
    """Global L2 norm of the summed gradient the optimizer stepped with (all parameters, all shards),
    equal on every rank; None if not computed. AdamW is blind to a constant gradient scale, so the
    equivalence check compares this too (a missing 1/dp or 1/m shows here, not in the loss)."""
    check_s: float = 0.0
    """Seconds of this step spent on the executor's own checks, not on training: the reduction of the
    loss over the ranks and the gradient norm (:attr:`grad_norm`) that the equivalence tests compare
    (a plain training loop logs its loss every few steps, not inside each timed step). The run loop
    leaves them out of the step time, and no phase contains them."""


@dataclass(frozen=True, kw_only=True)
class ModelStateBytes:
    """Model-state bytes this rank holds (distinct storages; DTensors by their local shard)."""

    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    """Adam moments plus step counters."""
    buffers_bytes: int = 0
    """Framework buffers holding gradients besides ``.grad`` (DDP buckets not aliased by a grad)."""
    host_bytes: int = 0
    """Of the above, bytes in host memory while the compute device is a GPU (CPU offload)."""


@runtime_checkable
class StepRunner(Protocol):
    """One rank's trainer for one family (see the module docstring)."""

    model: Any

    def train_step(self, step: int) -> StepRecord: ...

    def model_state_bytes(self) -> ModelStateBytes: ...

    def components(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class FamilySpec:
    """A registered family: ``check`` (before launch, torch-free) and ``build`` (on each rank)."""

    family: Family
    check: Callable[[Plan, ParallelLayout], None]
    """Raise a one-line SpecError for a plan field this family cannot run."""
    build: Callable[[RunContext], StepRunner]


_REGISTRY: dict[Family, FamilySpec] = {}


def register(spec: FamilySpec) -> FamilySpec:
    """Add a family (a second registration of the same family is a programming error)."""
    if spec.family in _REGISTRY and _REGISTRY[spec.family] is not spec:
        raise RuntimeError(f"family {spec.family.value} registered twice")
    _REGISTRY[spec.family] = spec
    return spec


def check_model(spec) -> None:
    """Refuse, in one line, a model the executor cannot build as declared (torch-free: ``executor.options.prepare``
    calls it before launch, ``executor.model.GPT`` when it builds)."""
    if getattr(spec, "mla", None) is not None:
        raise SpecError("model", f"{spec.name} has latent attention; the executor builds ordinary attention only "
                        "(not implemented yet); simulate the plan")
    moe = getattr(spec, "moe", None)
    if moe is not None and moe.capacity_factor is not None:
        raise SpecError("model.moe.capacity_factor", f"{moe.capacity_factor:g}: the executor routes dropless (every "
                        "token reaches its k experts); use capacity_factor None")


def family_spec(layout: ParallelLayout) -> FamilySpec:
    """The registered family that runs ``layout``; an unregistered one is a one-line SpecError."""
    if layout.ep > 1 and isinstance(layout.strategy.dp_sync, ParamServerSync):
        raise SpecError("plan.strategy.ep", f"{layout.ep}: this executor runs expert parallelism with an all-reduce "
                        f"(got {layout.strategy.dp_sync.kind.value}); simulate the plan, or execute it with ep 1, "
                        "or with an all-reduce")
    if layout.strategy.offload_activations:
        raise SpecError("plan.strategy.offload_activations", "true: this executor keeps activations on the "
                        "device (host offload of checkpoints not implemented); simulate the plan, or execute "
                        "it with offload_activations false")
    if layout.cp > 1 and (layout.tp > 1 or layout.pp > 1):
        raise SpecError("plan.strategy.cp", f"{layout.cp}: this executor runs context parallelism with tp = pp = 1 "
                        f"only (got tp={layout.tp} pp={layout.pp}); simulate the plan, or execute it with cp 1 "
                        "or tp = pp = 1")
    family = family_of(layout)
    if family not in _REGISTRY:
        known = ", ".join(f.value for f in _REGISTRY) or "none"
        raise SpecError("plan.strategy", f"the {family.value} family (dp={layout.dp} tp={layout.tp} "
                        f"pp={layout.pp}) is not implemented by this executor yet; it runs: {known}")
    return _REGISTRY[family]
