"""The plan file: what the planner writes and the executor runs, as versioned JSON.

A plan is self-contained: the model (a preset name and sequence length, or the full shape), the
cluster (a preset name and node count, or the full cluster), the worker GPU count, the strategy
and the estimates made for it. The strategy is split in two, by each field's declared role
(:mod:`simulator.strategy.fields`):

- ``strategy``: the executable training layout (every role but :data:`Role.SCENARIO`), the only
  part an executor reads;
- ``scenario``: what-if inputs for the simulator alone (stragglers, failures).

Schema (``version`` 1)::

    {"schema": "trainplan.plan", "version": 1,
     "model": {"preset": "llama2-7b", "seq": 4096} | {"transformer": {...}} | {"layers": {...}},
     "cluster": {"preset": "dgx-h100", "nodes": 1} | {"spec": {...cluster file...}},
     "gpus": 8,
     "strategy": {flat strategy keys},
     "scenario": {flat straggler and failure keys},
     "estimates": [{"engine": "analytical", "step_time_s": ..., "tokens_per_s": ..., "mfu": ...,
                    "breakdown": {category: seconds}, "memory": {"total_bytes": ..., "fits": ...}}]}

Loading checks everything: an unknown field or version, a wrong type, a strategy that does not lay
out on the cluster and model gives one :class:`~simulator.errors.SpecError` naming the field
(``plan.model.seqq: unknown field; known: preset, seq, transformer, layers``). How ``model`` and
``cluster`` are written and read (a preset reference or the full shape) is :mod:`simulator.plan_refs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from simulator.checks import enum_member, known_fields, non_negative_number, positive_number
from simulator.errors import SpecError
from simulator.jsonio import read_json, write_json
from simulator.plan_refs import cluster_from_ref, cluster_ref, model_from_dict, model_to_dict  # noqa: F401 (re-exported)
from simulator.results import Engine
from simulator.strategy import ParallelLayout, ParamServerSync, Role, Strategy, build_layout
from simulator.strategy.flat import FLAT, strategy_from_flat, strategy_to_flat

SCHEMA = "trainplan.plan"
VERSION = 1
"""The plan-file schema version this code writes and reads."""
_EXECUTABLE = tuple(r for r in Role if r is not Role.SCENARIO)


# --- estimates ------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Estimate:
    """One engine's estimate of the plan's step, as the planner recorded it."""

    engine: str
    step_time_s: float
    tokens_per_s: float
    mfu: float
    breakdown: dict[str, float] = field(default_factory=dict)
    """Seconds per category on the slowest rank (``simulator.results.Category`` values)."""
    memory: dict[str, object] = field(default_factory=dict)
    """``total_bytes`` of the most loaded rank and ``fits``, when the memory model ran."""

    @classmethod
    def from_result(cls, result) -> "Estimate":
        """From a :class:`simulator.results.StepResult`."""
        memory = {} if result.memory is None else {"total_bytes": result.memory.worst.total_bytes,
                                                   "fits": result.memory.fits}
        return cls(engine=result.engine.value, step_time_s=result.step_time_s, tokens_per_s=result.tokens_per_s,
                   mfu=result.mfu, breakdown={c.value: v for c, v in result.breakdown.items()}, memory=memory)

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "Estimate":
        names = tuple(f.name for f in fields(cls))
        known_fields(where, d, names)
        try:
            estimate = cls(**d)
        except TypeError as err:
            raise SpecError(where, f"incomplete estimate ({err})") from None
        estimate._check(where)
        return estimate

    def _check(self, where: str) -> None:
        """Types and ranges: a hand-edited estimate of "fast" seconds or a NaN MFU is refused on load."""
        enum_member(Engine, self.engine, f"{where}.engine", "engine")
        positive_number(f"{where}.step_time_s", self.step_time_s)
        positive_number(f"{where}.tokens_per_s", self.tokens_per_s)
        non_negative_number(f"{where}.mfu", self.mfu)
        for name, part in (("breakdown", self.breakdown), ("memory", self.memory)):
            if not isinstance(part, dict):
                raise SpecError(f"{where}.{name}", f"must be a mapping, got {type(part).__name__}")
        for category, seconds in self.breakdown.items():
            non_negative_number(f"{where}.breakdown.{category}", seconds)
        if "total_bytes" in self.memory:
            non_negative_number(f"{where}.memory.total_bytes", self.memory["total_bytes"])
        if not isinstance(self.memory.get("fits", False), bool):
            raise SpecError(f"{where}.memory.fits", f"must be true or false, got {self.memory['fits']!r}")


# --- the plan -------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Plan:
    """A plan: model, cluster, worker GPUs, strategy (layout + scenario) and its estimates."""

    model: object
    """The workload (a TransformerSpec or a LayerListWorkload)."""
    cluster: object
    gpus: int
    strategy: Strategy
    estimates: tuple[Estimate, ...] = ()

    def layout(self) -> ParallelLayout:
        """The checked layout (raises the layout's SpecError)."""
        return build_layout(self.strategy, self.cluster, self.model, gpus=self._layout_gpus())

    def executable_strategy(self) -> Strategy:
        """The strategy without the what-if scenario (no stragglers, no failures): what an executor runs."""
        flat = strategy_to_flat(self.strategy, _EXECUTABLE)
        return strategy_from_flat(flat)

    def _layout_gpus(self) -> int | None:
        """Worker GPUs for the layout (a parameter-server layout takes every worker node instead)."""
        return None if isinstance(self.strategy.dp_sync, ParamServerSync) else self.gpus

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "version": VERSION, "model": model_to_dict(self.model),
                "cluster": cluster_ref(self.cluster), "gpus": self.gpus,
                "strategy": strategy_to_flat(self.strategy, _EXECUTABLE),
                "scenario": strategy_to_flat(self.strategy, (Role.SCENARIO,)),
                "estimates": [_plain_estimate(e) for e in self.estimates]}

    def save(self, path: str | Path) -> Path:
        """Write the plan as JSON, atomically (a temporary file renamed over ``path``)."""
        return write_json(path, self.to_dict())


def _plain_estimate(e: Estimate) -> dict:
    return {f.name: getattr(e, f.name) for f in fields(e)}


def plan_from_dict(d: dict) -> Plan:
    """A checked :class:`Plan` from its JSON data (see the module docstring)."""
    known_fields("plan", d, ("schema", "version", "model", "cluster", "gpus", "strategy", "scenario", "estimates"))
    if d.get("schema") != SCHEMA:
        raise SpecError("plan.schema", f"must be {SCHEMA!r}, got {d.get('schema')!r}; is this a plan file?")
    if d.get("version") != VERSION:
        raise SpecError("plan.version", f"{d.get('version')!r} is not supported; this trainplan reads version "
                        f"{VERSION}")
    for key in ("model", "cluster", "gpus", "strategy"):
        if key not in d:
            raise SpecError(f"plan.{key}", "missing")
    gpus = d["gpus"]
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise SpecError("plan.gpus", f"must be a positive integer, got {gpus!r}")
    strategy = _strategy(d["strategy"], d.get("scenario", {}))
    estimates = d.get("estimates", [])
    if not isinstance(estimates, list):
        raise SpecError("plan.estimates", "must be a list")
    plan = Plan(model=_placed("plan.model", model_from_dict, d["model"]),
                cluster=_placed("plan.cluster", cluster_from_ref, d["cluster"]), gpus=gpus,
                strategy=strategy,
                estimates=tuple(Estimate.from_dict(e, f"plan.estimates[{i}]") for i, e in enumerate(estimates)))
    try:
        layout = plan.layout()
    except SpecError as err:
        where = "scenario" if err.field.split("[")[0] in d.get("scenario", {}) else "strategy"
        raise SpecError(f"plan.{where}.{err.field}", err.problem) from None
    if layout.world_size != gpus:  # a parameter-server layout takes every worker node, whatever gpus says
        raise SpecError("plan.gpus", f"the parameter-server layout runs on {layout.world_size} worker GPUs (every "
                        f"worker node), got {gpus}; set gpus to {layout.world_size}")
    return plan


def _placed(where: str, read, d):
    """``read(d)``, its SpecError's field placed inside the plan (``cluster`` → ``plan.cluster.preset``,
    ``device.memory_GB`` → ``plan.cluster.spec.device.memory_GB``)."""
    try:
        return read(d)
    except SpecError as err:
        if err.field.startswith("plan."):
            raise
        head = where.removeprefix("plan.")
        if err.field == head:
            field = "preset" if isinstance(d, dict) and "preset" in d else "spec"
        elif err.field in ("seq", "nodes"):
            field = err.field
        else:
            field = ("spec." if head == "cluster" else "") + err.field
        raise SpecError(f"{where}.{field}", err.problem) from None


def _strategy(layout: dict, scenario: dict) -> Strategy:
    known_fields("plan.strategy", layout, tuple(k for k, v in FLAT.items() if v.decl.role in _EXECUTABLE))
    known_fields("plan.scenario", scenario, tuple(k for k, v in FLAT.items() if v.decl.role is Role.SCENARIO))
    try:
        return strategy_from_flat(layout | scenario)
    except SpecError as err:
        where = "scenario" if err.field in scenario else "strategy"
        raise SpecError(f"plan.{where}.{err.field}", err.problem) from None


def load_plan(path: str | Path) -> Plan:
    """Read and check a plan file; every problem is one SpecError naming the file or the field."""
    return plan_from_dict(read_json(path, "plan"))


def with_estimates(plan: Plan, estimates) -> Plan:
    """``plan`` with ``estimates`` (StepResults or Estimates) recorded."""
    return replace(plan, estimates=tuple(e if isinstance(e, Estimate) else Estimate.from_result(e) for e in estimates))
