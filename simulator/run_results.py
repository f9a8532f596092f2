"""The results file: what a plan run measured, as versioned JSON (written by ``executor.run``).

It is a simulator type, like the plan file, so the validation step reads it without torch: the
plan as planned and the plan as run (the scaled model, world and batch) are embedded, so the
estimates for the run come from the same shapes. Schema (``version`` 2; version 1 files, which have
no ``staleness``, are still read)::

    {"schema": "trainplan.results", "version": 2,
     "status": "complete" | "failed" | "running",
     "failure": null | {"rank": 1, "error": "one line", "detail": "traceback"},
     "plan": {plan file as planned},
     "run": {"plan": {plan file as run}, "scale": "tiny", "notes": [...], "family": "data-parallel",
             "precision": "fp32" | "bf16-autocast", "steps": 5, "warmup": 1, "seed": 0,
             "components": {"what": "torch component"}, "phases": {"forward": "how it is measured"}},
     "environment": {"torch": "2.13.0", "python": "3.11.9", "backend": "gloo", "device": "cpu",
                     "device_model": "...", "cores": 2, "threads_per_rank": 1},
     "ranks": [{"rank": 0, "step_time_s": [...], "loss": [...], "phases_s": {"forward": [...]},
                "model_state_bytes": {"params_bytes": ...}, "peak_memory_bytes": ...,
                "peak_memory_kind": "cuda-max-allocated" | "cpu-peak-allocated" | "cpu-max-rss",
                "peak_rss_bytes": ...}],
     "staleness": null | {"step_lag": {"0": [per push...], ...}, "updates": {"0": [...], ...}},
     "summary": {derived on writing: step_time_s {median, p10, p90, steps} over the measured steps
                 (after warm-up) of the per-step slowest rank, the same per phase, the loss per step}}

Each rank lists every completed step, warm-up included; ``warmup`` says how many lead. The
``summary`` is derived and recomputed on reading. ``status`` is ``running`` in the copy the run writes before its
first step; its completed steps then go to a journal beside the file (:mod:`simulator.run_journal`), which
:func:`load_results` folds into a ``running`` file, so a run that dies keeps its completed steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path

import numpy as np

from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.jsonio import read_json, write_json
from simulator.plan_file import Plan, plan_from_dict
from simulator.results import Category
from simulator.run_journal import fold, journal_path
from simulator.run_staleness import Staleness, histogram  # noqa: F401 (re-exported)

SCHEMA = "trainplan.results"
VERSION = 2
"""The results-file schema version this code writes (2 added ``staleness``)."""
READS = (1, 2)
"""The versions this code reads."""


class RunStatus(Kind):
    """Whether the run finished."""

    RUNNING = "running"
    """Written before the first step, the steps going to the journal (or left by a run killed without a word)."""
    COMPLETE = "complete"
    FAILED = "failed"


class PeakMemoryKind(Kind):
    """What ``peak_memory_bytes`` counts."""

    CUDA_MAX_ALLOCATED = "cuda-max-allocated"
    """``torch.cuda.max_memory_allocated``: the caching allocator's peak of live tensor bytes."""
    CPU_MAX_RSS = "cpu-max-rss"
    """The process's peak resident set (``getrusage`` ru_maxrss): tensors, the Python heap and torch itself."""
    CPU_PEAK_ALLOCATED = "cpu-peak-allocated"
    """The CPU allocator's peak of live tensor bytes from before the model is built to the end of the warm-up
    steps (``torch.profiler`` allocation events, ``executor.measure.AllocationWindow``): like for like with
    the CUDA figure."""


@dataclass(frozen=True)
class Stats:
    """Median, 10th and 90th percentile (numpy's linear interpolation) of ``steps`` samples, seconds."""

    median_s: float
    p10_s: float
    p90_s: float
    steps: int

    @classmethod
    def of(cls, samples) -> "Stats | None":
        s = np.asarray(list(samples), dtype=float)
        if s.size == 0:
            return None
        p10, p50, p90 = np.percentile(s, [10, 50, 90])
        return cls(median_s=float(p50), p10_s=float(p10), p90_s=float(p90), steps=int(s.size))


@dataclass(frozen=True, kw_only=True)
class Failure:
    rank: int | None
    """The failing rank (None: the run as a whole, e.g. the watchdog's deadline)."""
    error: str
    """One line."""
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class RankResult:
    rank: int
    step_time_s: tuple[float, ...]
    loss: tuple[float, ...]
    phases_s: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """Seconds per step per phase (``simulator.results.Category`` values)."""
    model_state_bytes: dict[str, int] = field(default_factory=dict)
    peak_memory_bytes: int | None = None
    peak_memory_kind: PeakMemoryKind | None = None
    peak_rss_bytes: int | None = None
    """The process's peak resident set (CPU runs), kept beside an allocated ``peak_memory_bytes``."""

    def outside_phases_s(self) -> tuple[float, ...]:
        """Per step, the step time less the sum of its measured phases: what no phase covers (on a CPU,
        the training loop's own Python between phases; negative only by timer rounding)."""
        return tuple(t - sum(v[k] for v in self.phases_s.values()) for k, t in enumerate(self.step_time_s))

    def __post_init__(self) -> None:
        where = f"results.ranks[{self.rank}]"
        if len(self.loss) != len(self.step_time_s):
            raise SpecError(f"{where}.loss", f"has {len(self.loss)} entries for {len(self.step_time_s)} steps")
        known = {c.value for c in Category}
        for name, values in self.phases_s.items():
            if name not in known:
                raise SpecError(f"{where}.phases_s.{name}", f"unknown phase; known: {', '.join(sorted(known))}")
            if len(values) != len(self.step_time_s):
                raise SpecError(f"{where}.phases_s.{name}", f"has {len(values)} entries for "
                                f"{len(self.step_time_s)} steps")


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    plan: Plan
    """The plan as run."""
    scale: str
    notes: tuple[str, ...] = ()
    family: str
    precision: str
    steps: int
    warmup: int
    seed: int
    components: dict[str, str] = field(default_factory=dict)
    phases: dict[str, str] = field(default_factory=dict)
    """How each measured phase is measured and what it includes."""


@dataclass(frozen=True, kw_only=True)
class Results:
    status: RunStatus
    plan: Plan
    """The plan as planned."""
    run: RunInfo
    environment: dict[str, object]
    ranks: tuple[RankResult, ...]
    failure: Failure | None = None
    staleness: Staleness | None = None
    """Parameter-server runs: what the servers measured (None for other families, and in version 1 files)."""

    @property
    def completed_steps(self) -> int:
        """Steps every rank completed."""
        return min((len(r.step_time_s) for r in self.ranks), default=0)

    def _slowest(self, per_rank) -> list[float]:
        n, w = self.completed_steps, self.run.warmup
        return [max(values[k] for values in per_rank) for k in range(w, n)] if self.ranks else []

    def summary(self) -> dict:
        """Stats over the measured steps (after warm-up) of the slowest rank per step: the step time, each
        phase, and the time outside every phase (:meth:`RankResult.outside_phases_s`; None without
        phases); the loss per step."""
        steps = Stats.of(self._slowest([r.step_time_s for r in self.ranks]))
        phases = {}
        for name in sorted({p for r in self.ranks for p in r.phases_s}):
            if all(name in r.phases_s for r in self.ranks):
                phases[name] = _plain(Stats.of(self._slowest([r.phases_s[name] for r in self.ranks])))
        loss = list(self.ranks[0].loss[:self.completed_steps]) if self.ranks else []
        outside = Stats.of(self._slowest([r.outside_phases_s() for r in self.ranks])) if phases else None
        out = {"completed_steps": self.completed_steps, "measured_steps": 0 if steps is None else steps.steps,
               "step_time_s": _plain(steps), "phases_s": phases, "outside_phases_s": _plain(outside),
               "loss": loss}
        if self.staleness is not None:
            out["staleness"] = self.staleness.summary()
        return out

    def to_dict(self) -> dict:
        run = {f.name: _plain(getattr(self.run, f.name)) for f in fields(self.run) if f.name != "plan"}
        return {"schema": SCHEMA, "version": VERSION, "status": self.status.value,
                "failure": _plain(self.failure), "plan": self.plan.to_dict(),
                "run": {"plan": self.run.plan.to_dict()} | run, "environment": dict(self.environment),
                "ranks": [_plain(r) for r in self.ranks], "staleness": _plain(self.staleness),
                "summary": self.summary()}

    def save(self, path: str | Path) -> Path:
        """Write atomically (a temporary file renamed over ``path``)."""
        return write_json(path, self.to_dict())


def _plain(value):
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k.value if isinstance(k, Enum) else k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}


def _build(cls, d, where: str, **converted):
    if not isinstance(d, dict):
        raise SpecError(where, "must be a mapping")
    names = {f.name for f in fields(cls)}
    for key in d:
        if key not in names:
            raise SpecError(f"{where}.{key}", f"unknown field; known: {', '.join(sorted(names))}")
    try:
        return cls(**(d | converted))
    except (TypeError, ValueError) as err:
        if isinstance(err, SpecError):
            raise
        raise SpecError(where, f"bad or missing field ({err})") from None


def _rank(d: dict, i: int) -> RankResult:
    where = f"results.ranks[{i}]"
    if not isinstance(d, dict):
        raise SpecError(where, "must be a mapping")
    kind = d.get("peak_memory_kind")
    return _build(RankResult, d, where, step_time_s=tuple(d.get("step_time_s", ())), loss=tuple(d.get("loss", ())),
                  phases_s={k: tuple(v) for k, v in d.get("phases_s", {}).items()},
                  peak_memory_kind=None if kind is None else PeakMemoryKind(kind))


def _staleness(d) -> Staleness | None:
    if d is None:
        return None
    where = "results.staleness"
    if not isinstance(d, dict) or not all(isinstance(d.get(k), dict) for k in ("step_lag", "updates")):
        raise SpecError(where, "must be a mapping with step_lag and updates, each {worker: [int per push]}")
    try:
        per = {k: {str(w): tuple(int(x) for x in v) for w, v in d[k].items()} for k in ("step_lag", "updates")}
    except (TypeError, ValueError):
        raise SpecError(where, "values must be lists of integers, one per push") from None
    return _build(Staleness, d, where, **per)


def results_from_dict(d: dict) -> Results:
    """A checked :class:`Results` (plans included) from its JSON data."""
    if d.get("schema") != SCHEMA:  # first: a plan file given by mistake is named as such, not by its fields
        raise SpecError("results.schema", f"must be {SCHEMA!r}, got {d.get('schema')!r}; is this a results file?")
    if d.get("version") not in READS:
        raise SpecError("results.version", f"{d.get('version')!r} is not supported; this trainplan reads "
                        f"versions {', '.join(map(str, READS))}")
    known = ("schema", "version", "status", "failure", "plan", "run", "environment", "ranks", "summary") + (
        ("staleness",) if d["version"] >= 2 else ())
    for key in d:
        if key not in known:
            raise SpecError(f"results.{key}", f"unknown field; known: {', '.join(known)}")
    try:
        status = RunStatus(d.get("status"))
    except ValueError:
        raise SpecError("results.status", f"unknown {d.get('status')!r}; known: "
                        f"{', '.join(s.value for s in RunStatus)}") from None
    run = dict(d.get("run") or {})
    run_plan = plan_from_dict(run.pop("plan", None) or {})
    info = _build(RunInfo, run, "results.run", plan=run_plan, notes=tuple(run.get("notes", ())))
    failure = None if d.get("failure") is None else _build(Failure, d["failure"], "results.failure")
    return Results(status=status, plan=plan_from_dict(d.get("plan") or {}), run=info,
                   environment=dict(d.get("environment") or {}), failure=failure,
                   staleness=_staleness(d.get("staleness")),
                   ranks=tuple(_rank(r, i) for i, r in enumerate(d.get("ranks") or [])))


def load_results(path: str | Path) -> Results:
    """Read and check a results file, a ``running`` one with its step journal folded in
    (:func:`simulator.run_journal.fold`); every problem is one SpecError naming the file or the field."""
    return results_from_dict(fold(read_json(path, "results"), journal_path(path)))
