"""Estimated vs measured for one results file: the plan as run, re-simulated, row by row.

``validate(results, cluster)`` compiles the plan *as run* (the scaled model, world and batch that
``trainplan execute`` embeds in its results file, :mod:`simulator.run_results`) on ``cluster`` and
estimates it with both engines (analytical and discrete-event). Each :class:`Row` puts an estimate
beside its measurement:

- ``step_time_s``: the measured median over the steps after warm-up of the slowest rank per step,
  with its p10/p90 spread, against each engine's step time;
- one row per phase the results file measured (``forward``, ``backward``, ``optimizer``, ``dp``, ...),
  against the estimate's breakdown of the slowest rank in the same category, plus the parts of other categories
  the executor times inside that phase (FSDP2's calls in forward and backward, torch ZeRO-1's broadcasts in the
  optimizer: :mod:`simulator.validate_phases`) (seconds);
- ``model_state_bytes``: the most loaded rank's measured states (params + grads + optimizer + its step
  counters + host copies) against the memory model's most loaded rank, wherever its states live;
- ``peak_memory_bytes``: the largest measured peak against the model's peak ``allocated`` bytes
  (``torch.cuda.max_memory_allocated``; on a CPU run the CPU allocator's peak over set-up and the warm-up
  steps, ``executor.measure.AllocationWindow``). A CPU run recorded before that measurement existed (or
  without warm-up steps, or traced) has the process's peak RSS there, which includes torch itself: an upper
  bound, flagged in :attr:`Validation.notes`.

For a parameter-server run, :attr:`Validation.staleness` puts the staleness the server ranks measured
(``simulator.run_results.Staleness``: step lag, the DES's measure, and update staleness) beside the DES's
histogram (``extras["staleness"]``), both over all pushes and per worker; for an asynchronous run the DES
plays as many steps as the run completed, so both count the same pushes.

Error: the signed fraction ``estimate / measured - 1`` (positive: the model is slow / large), None
when the measurement is zero. The run's precision decides the compute dtype: an ``fp32`` run is
estimated with the model's dtype set to fp32. Model-state totals do not depend on that choice:
mixed-precision Adam holds 2 + 2 + 12 bytes per parameter, fp32 Adam 4 + 4 + 8 (Rajbhandari et al.
SC'20, "ZeRO", §3.1), and the memory model stores torch DDP's mixed-precision states in the fp32 layout
torch autocast keeps (:mod:`simulator.memory.autocast`), line by line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.busy_share import BusyShare, busy_share
from simulator.errors import SpecError
from simulator.results import Category, StepResult
from simulator.run_results import PeakMemoryKind, Results
from simulator.validate_phases import Folds, folded_categories, loop_moves, phase_estimate
from simulator.validate_staleness import staleness_rows
from simulator.workload import TransformerSpec
from simulator.workload.kinds import DtypePolicy

STATE_KEYS = ("params_bytes", "grads_bytes", "optimizer_bytes")
"""The measured model-state fields summed into one rank's total (``executor.strategies.base.ModelStateBytes``:
its ``optimizer_bytes`` holds Adam's step counters; its ``host_bytes`` is a part of these, not more; its
``buffers_bytes``, DDP buckets, are buffers in the memory model, not model states)."""


def signed_error(estimate: float | None, measured: float | None) -> float | None:
    """``estimate / measured - 1``; None when either is missing or the measurement is zero."""
    if estimate is None or measured is None or measured == 0:
        return None
    return estimate / measured - 1.0


@dataclass(frozen=True, kw_only=True)
class Row:
    """One quantity: measured (median and spread) and each engine's estimate."""

    name: str
    unit: str
    """``s`` or ``bytes``."""
    measured: float
    analytical: float
    des: float | None = None
    """None where the engines share one model (memory)."""
    p10: float | None = None
    p90: float | None = None

    @property
    def error_analytical(self) -> float | None:
        return signed_error(self.analytical, self.measured)

    @property
    def error_des(self) -> float | None:
        return signed_error(self.des, self.measured)

    def to_dict(self) -> dict:
        return {"name": self.name, "unit": self.unit, "measured": self.measured, "p10": self.p10,
                "p90": self.p90, "analytical": self.analytical, "des": self.des,
                "error_analytical": self.error_analytical, "error_des": self.error_des}


@dataclass(frozen=True, kw_only=True)
class Validation:
    """The rows, the two estimates they came from, and notes on what is not like for like."""

    rows: tuple[Row, ...]
    analytical: StepResult
    des: StepResult
    cluster_name: str
    notes: tuple[str, ...] = ()
    staleness: dict | None = None
    """Parameter-server runs: ``{"measured": Staleness.summary(), "des": {histogram, mean, max, per_worker}
    or None}`` (the DES models staleness for asynchronous servers only)."""
    busy: BusyShare | None = None
    """More processes than cores: how many were busy at once, against the modelled share (:mod:`simulator.busy_share`;
    a per-case figure, so not among the ``notes`` a suite gathers)."""

    def row(self, name: str) -> Row | None:
        """The row called ``name``; None when the results file did not measure it."""
        return next((r for r in self.rows if r.name == name), None)

    @property
    def step_time_error(self) -> float | None:
        """Signed error of the analytical step time against the measured median."""
        return self.row("step_time_s").error_analytical

    @property
    def memory_error(self) -> float | None:
        """Signed error of the model-state bytes (the exact part of the memory model)."""
        row = self.row("model_state_bytes")
        return None if row is None else row.error_analytical

    def to_dict(self) -> dict:
        return {"cluster": self.cluster_name, "step_time_error": self.step_time_error,
                "memory_error": self.memory_error, "notes": list(self.notes),
                "busy_per_core": None if self.busy is None else self.busy.busy_per_core,
                "rows": [r.to_dict() for r in self.rows], "staleness": self.staleness}


def check_results(results: Results) -> None:
    """SpecError unless ``results`` has a measured step (after warm-up) to compare with."""
    if results.completed_steps == 0:
        raise SpecError("results", f"the run ({results.status.value}) completed no step; nothing to validate")
    if results.summary()["step_time_s"] is None:
        raise SpecError("results", f"the run completed {results.completed_steps} step(s), all warm-up "
                        f"({results.run.warmup}); nothing measured to validate")


def run_workload(results: Results):
    """The model as run: the plan-as-run's model, in fp32 when the run was, and without dropout, which
    ``executor.model`` does not have (its results file says so under ``components``)."""
    model = results.run.plan.model
    if not isinstance(model, TransformerSpec):
        return model
    if results.run.precision == "fp32" and model.dtype is not DtypePolicy.FP32:
        model = replace(model, dtype=DtypePolicy.FP32)
    return replace(model, dropout=0.0) if model.dropout else model


def estimate_run(results: Results, cluster) -> tuple[StepResult, StepResult]:
    """(analytical, DES) estimates of the plan as run on ``cluster``."""
    return estimate_compiled(results, cluster)[1:]


def estimate_compiled(results: Results, cluster):
    """(the compiled step, analytical, DES) of the plan as run on ``cluster``."""
    from simulator.analytical import estimate_work
    from simulator.compile import compile_step
    from simulator.compile.costs import CostCache
    from simulator.engine.step import simulate
    from simulator.strategy import build_layout

    plan = results.run.plan
    workload = run_workload(results)
    layout = build_layout(plan.strategy, cluster, workload, gpus=plan._layout_gpus())
    # a replayed collective ran the schedule the executor built on the plan's cluster (simulator.collectives.replayed)
    work = compile_step(cluster, workload, plan.strategy, layout=layout,
                        cache=CostCache(cluster, replays_built_on=plan.cluster))
    steps = results.completed_steps if _async_ps(plan) else 1
    return work, estimate_work(work), simulate(work, cluster, seed=0, steps=steps, trace=False)


def _async_ps(plan) -> bool:
    from simulator.strategy import ParamServerSync
    from simulator.strategy.sync import ParamServerMode

    sync = plan.strategy.dp_sync
    return isinstance(sync, ParamServerSync) and sync.mode is ParamServerMode.ASYNC


def _measured_states(results: Results) -> float:
    return float(max(sum(r.model_state_bytes.get(k, 0) for k in STATE_KEYS) for r in results.ranks))


def _estimated_states(result: StepResult) -> float:
    """The model's states of its most loaded rank as the run measures them, at rest after the last step
    (``executor/run.py`` reads ``model_state_bytes()`` once the loop ends): the parameters after the step
    (:attr:`~simulator.memory.states.ModelStateBytes.params_at_rest_bytes`), not their peak, which differs only
    under FSDP2 ZeRO-2, whose unsharded copy lives from forward to the end of backward and is freed there
    (``reshard_after_forward=False``; its peak stays in the peak row)."""
    placed = result.memory.worst.placed
    return float(placed.gpu.total_after_step_bytes + placed.host_params_bytes + placed.host_grads_bytes
                 + placed.host_optimizer_bytes)


def _estimated_peak(result: StepResult, peaks) -> float:
    """The model's peak allocated bytes of its busiest rank; on a CPU run plus what it places in host memory
    (offloaded parameters, gradients, optimizer state), which the same CPU allocator holds there."""
    worst = result.memory.worst
    host = 0
    if any(r.peak_memory_kind is PeakMemoryKind.CPU_PEAK_ALLOCATED for r in peaks):
        placed = worst.placed
        host = placed.host_params_bytes + placed.host_grads_bytes + placed.host_optimizer_bytes
    return float(worst.allocated_bytes + host)


def _outside(result: StepResult) -> float:
    """An estimate's step time less the sum of its breakdown (0 where the breakdown covers the step)."""
    return result.step_time_s - sum(result.breakdown.values())


def compare(results: Results, analytical: StepResult, des: StepResult, cluster_name: str,
            folds: Folds | None = None, moves: dict[str, float] | None = None) -> Validation:
    """The rows of :mod:`this module <simulator.validate>` from a results file and its two estimates; ``folds``
    (:func:`simulator.validate_phases.folded_categories` of the compiled step) says which estimate categories each
    measured phase holds besides its own (none given: each phase compares with its own category only), ``moves``
    (:func:`simulator.validate_phases.loop_moves`) the seconds of per-step host time a row's estimate gains or loses
    (none given: none)."""
    check_results(results)
    summary = results.summary()
    step = summary["step_time_s"]
    rows = [Row(name="step_time_s", unit="s", measured=step["median_s"], p10=step["p10_s"], p90=step["p90_s"],
                analytical=analytical.step_time_s, des=des.step_time_s)]
    folds, moves = folds or {}, moves or {}
    for name, stats in summary["phases_s"].items():
        phase, moved = Category(name), moves.get(name, 0.0)
        rows.append(Row(name=name, unit="s", measured=stats["median_s"], p10=stats["p10_s"], p90=stats["p90_s"],
                        analytical=phase_estimate(analytical, phase, folds) + moved,
                        des=phase_estimate(des, phase, folds) + moved))
    outside = summary.get("outside_phases_s")
    if outside is not None:  # what the measured phases do not cover; the estimates' breakdowns cover their steps
        moved = moves.get("outside_phases", 0.0)
        rows.append(Row(name="outside_phases", unit="s", measured=outside["median_s"], p10=outside["p10_s"],
                        p90=outside["p90_s"], analytical=_outside(analytical) + moved, des=_outside(des) + moved))
    notes = []
    if analytical.memory is not None and any(r.model_state_bytes for r in results.ranks):
        rows.append(Row(name="model_state_bytes", unit="bytes", measured=_measured_states(results),
                        analytical=_estimated_states(analytical)))
    workers = results.run.plan.layout().world_size  # a parameter server's ranks past them: not in the model
    peaks = [r for r in results.ranks if r.peak_memory_bytes is not None and r.rank < workers]
    if analytical.memory is not None and peaks:
        rows.append(Row(name="peak_memory_bytes", unit="bytes", measured=float(max(r.peak_memory_bytes for r in peaks)),
                        analytical=_estimated_peak(analytical, peaks)))
        if any(r.peak_memory_kind is PeakMemoryKind.CPU_MAX_RSS for r in peaks):
            notes.append("peak memory measured as the process's peak RSS, which includes torch and Python: an "
                         "upper bound on the modelled allocated bytes, not like for like")
    if results.run.scale != "as-planned":
        notes.append(f"estimated for the shapes run (scale {results.run.scale}), not the plan as planned")
    return Validation(rows=tuple(rows), analytical=analytical, des=des, cluster_name=cluster_name,
                      notes=tuple(notes), staleness=staleness_rows(results, des), busy=busy_share(results))


def run_cluster(results: Results, cluster: str | None):
    """The cluster to estimate on: ``cluster`` (a preset or a file), with enough nodes for the run's
    ranks (a one-machine cluster without an inter_node section, such as localhost-cpu or a calibrated
    file, holds exactly them on its one node, as the run did; their sharing of its cores is not
    modelled); or, for a run on
    GPUs (NCCL), the plan's own cluster. A gloo/CPU run has no default: its plan names the GPU cluster
    it was planned for, not the machine that ran it."""
    from simulator.cluster.io import load_cluster

    world = results.run.plan.layout().world_size
    if cluster is None:
        if results.environment.get("backend", "gloo") != "nccl" or results.environment.get("device") == "cpu":
            raise SpecError("--cluster", "this run used gloo on CPUs, not the plan's GPU cluster: give --cluster "
                            "localhost-cpu or a file from `trainplan calibrate`")
        return results.run.plan.cluster
    try:
        base = load_cluster(cluster)
        per_node = base.node.gpus_per_node
        if base.network is None:  # one machine (localhost-cpu): exactly the run's processes ran on it (a
            #                       parameter server lays out over every GPU of its cluster, so not more)
            chosen = replace(base, node=replace(base.node, gpus_per_node=world))
        elif base.world_size >= world:
            chosen = base
        else:
            chosen = load_cluster(cluster, nodes=-(-world // per_node))
    except SpecError as err:
        raise SpecError("--cluster", f"{cluster}: {err}") from None
    dtype = getattr(run_workload(results), "dtype", DtypePolicy.FP32).compute_dtype
    if dtype not in chosen.device.peak_tflops:
        raise SpecError("--cluster", f"{chosen.name} lists no {dtype.value} peak but the run computed in "
                        f"{results.run.precision}; run `trainplan execute --precision fp32`, or give a cluster "
                        f"whose device.peak_tflops has {dtype.value}")
    return chosen


def validate(results: Results, cluster) -> Validation:
    """Re-simulate the plan as run on ``cluster`` with both engines and compare (see module docstring)."""
    check_results(results)
    work, analytical, des = estimate_compiled(results, cluster)
    return compare(results, analytical, des, cluster.name, folded_categories(work), loop_moves(work))
