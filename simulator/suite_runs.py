"""The validation suite's runs folder: what was run, how the machine was meanwhile, and each case validated.

A suite run leaves, in one folder (``RUNS``), each case's ``<case>.plan.json`` and ``<case>.results.json``
(the results file of ``trainplan execute``, :mod:`simulator.run_results`), the cluster file when it was
calibrated, and ``suite.json``, the manifest written here::

    {"schema": "trainplan.suite-runs", "version": 1, "suite": "quick", "date": "2026-11-24T10:40:00+00:00",
     "host": {"node": "...", "cpu_model": "...", "cores": 2, "system": "Linux"},
     "cluster": "localhost-cpu" | "cluster.yaml" (relative to the folder), "cluster_notes": ["..."],
     "steps": 5, "warmup": 2, "load_average_start": [1m, 5m, 15m], "load_average_end": [...],
     "cases": [{"name": "ddp-overlap", "processes": 2, "error": null, "skipped": false, "load_1m": 0.4,
                "foreign_cpu_fraction": 0.03, "wall_s": 8.1,
                "speed_before_s": 0.028, "speed_after_s": 0.029, "attempt": 2,
                "attempts": [{"error": null, "load_1m": 0.5, "foreign_cpu_fraction": 0.02, "wall_s": 8.4,
                              "speed_before_s": 0.028, "speed_after_s": 0.041,
                              "results": "ddp-overlap.attempt1.results.json"}, {...}]}],
     "speed_reference_s": 0.028, "retries": 2}

With ``--retries N`` a case measured while the machine was noisy is run again (``executor.suite_run``): the
record's own fields are those of the attempt used (``attempt``, 1-based), ``attempts`` keeps every attempt, each
with its results file kept beside ``<case>.results.json`` (a copy of the used one's).

Results files made elsewhere (torchrun on a cluster, one per case, rank 0 writes each with every
rank's steps) need no manifest: :func:`suite_rows` validates whatever results files the folder holds,
and a case without one is listed as not run. Bad input is a SpecError naming the file and field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from simulator.errors import SpecError
from simulator.jsonio import read_json, write_json
from simulator.validation_suite import SuiteCase

SCHEMA = "trainplan.suite-runs"
VERSION = 1
MANIFEST = "suite.json"


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One run of a case under ``--retries`` (the fields of :class:`CaseRecord` of the same names)."""

    error: str | None = None
    load_1m: float | None = None
    foreign_cpu_fraction: float | None = None
    wall_s: float | None = None
    speed_before_s: float | None = None
    speed_after_s: float | None = None
    results: str | None = None
    """This attempt's results file, by its name in the runs folder (None: the run wrote none)."""

    @classmethod
    def of(cls, rec: "CaseRecord", results: str | None) -> "Attempt":
        """The attempt ``rec`` records (its fields of the same names), with its results file."""
        return cls(**{f.name: getattr(rec, f.name) for f in fields(cls) if f.name != "results"}, results=results)


@dataclass(frozen=True, kw_only=True)
class CaseRecord:
    """How one case's run went on this machine (written by ``executor/suite_run.py``)."""

    name: str
    processes: int
    error: str | None = None
    """None: the run completed; else one line (the supervisor's blame, or why it was skipped)."""
    skipped: bool = False
    load_1m: float | None = None
    """1-minute load average just before the launch (``os.getloadavg``)."""
    foreign_cpu_fraction: float | None = None
    """Share of the machine's CPU time taken by other work during the run (None: not measured)."""
    wall_s: float | None = None
    speed_before_s: float | None = None
    """The machine-speed probe's reading (``executor.speed_probe``, thread CPU seconds) just before the launch."""
    speed_after_s: float | None = None
    """Its reading just after the run (the next case's ``speed_before_s``, or the suite's last reading)."""
    attempt: int | None = None
    """Which of :attr:`attempts` the fields above are, 1-based (None: run without ``--retries``)."""
    attempts: tuple[Attempt, ...] = ()
    """Every run of the case, in order (empty without ``--retries``, and for a skipped case)."""


@dataclass(frozen=True, kw_only=True)
class SuiteRuns:
    """The manifest of one suite run."""

    suite: str
    date: str
    """When the runs started, ISO 8601, UTC."""
    host: dict
    cluster: str | None
    """Preset name or file the cases are estimated on (a file inside the runs folder by its name); None: each
    plan's own cluster (GPU runs)."""
    steps: int
    warmup: int
    cluster_notes: tuple[str, ...] = ()
    load_average_start: tuple[float, ...] = ()
    load_average_end: tuple[float, ...] = ()
    speed_reference_s: float | None = None
    """The machine-speed reference: the median of :attr:`speed_reference_readings_s`
    (``simulator.suite_report.speed_reference``); each case's readings are compared with it
    (``simulator.suite_report.speed_drift``). Manifests written before branch bias21 hold one reading right after
    the calibration here."""
    speed_reference_readings_s: tuple[float, ...] = ()
    """The probe's readings the reference is the median of, in order: those before the calibration, then those
    after it at the start of the runs (only the latter without ``--calibrate``)."""
    retries: int | None = None
    """``--retries``: most extra runs of a noisy case (None: manifests written before branch val28, and 0, ran
    every case once)."""
    cases: tuple[CaseRecord, ...] = field(default_factory=tuple)

    def record(self, name: str) -> CaseRecord | None:
        return next((c for c in self.cases if c.name == name), None)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "cases"}
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
        return {"schema": SCHEMA, "version": VERSION} | d | {
            "cases": [_record_dict(c) for c in self.cases]}

    def save(self, runs: str | Path) -> Path:
        return write_json(Path(runs) / MANIFEST, self.to_dict())


def _record_dict(c: CaseRecord) -> dict:
    d = {f.name: getattr(c, f.name) for f in fields(c)}
    return d | {"attempts": [{f.name: getattr(a, f.name) for f in fields(a)} for a in c.attempts]}


def _record(d: dict) -> CaseRecord:
    return CaseRecord(**d | {"attempts": tuple(Attempt(**a) for a in d.get("attempts", ()))})


def load_manifest(runs: str | Path) -> SuiteRuns | None:
    """The folder's manifest; None when it has none (results files made elsewhere, e.g. under torchrun)."""
    path = Path(runs) / MANIFEST
    if not path.exists():
        return None
    d = read_json(path, "suite manifest")
    if d.get("schema") != SCHEMA or d.get("version") != VERSION:
        raise SpecError(f"{path}", f"not a {SCHEMA} version {VERSION} manifest; remove it or run the suite again")
    d = {k: v for k, v in d.items() if k not in ("schema", "version")}
    try:
        cases = tuple(_record(c) for c in d.pop("cases", []))
        return SuiteRuns(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}, cases=cases)
    except TypeError as err:
        raise SpecError(f"{path}", f"bad or missing field ({err})") from None


@dataclass(frozen=True, kw_only=True)
class SuiteRow:
    """One case: its validation (None when it did not run or failed) and the run's record."""

    case: SuiteCase
    validation: object | None
    """A :class:`simulator.validate.Validation`, or None."""
    record: CaseRecord | None
    error: str | None = None
    """Why there is no validation (not run, skipped, failed, no measured step)."""
    results: str | None = None
    """The results file, where it exists."""

    @property
    def ok(self) -> bool:
        return self.validation is not None

    def error_of(self, name: str, engine: str = "analytical") -> float | None:
        """Signed error of row ``name`` (``step_time_s``, ``model_state_bytes``, ...), None where absent."""
        row = None if self.validation is None else self.validation.row(name)
        return None if row is None else getattr(row, f"error_{engine}")


def results_file(runs: Path, case: SuiteCase) -> Path:
    return Path(runs) / f"{case.name}.results.json"


def suite_cluster(runs: Path, manifest: SuiteRuns | None, given: str | None) -> str | None:
    """The cluster to validate on: ``given``; else the manifest's (a file inside the folder resolved); else None."""
    if given is not None or manifest is None or manifest.cluster is None:
        return given
    inside = Path(runs) / manifest.cluster
    return str(inside) if inside.exists() else manifest.cluster


def suite_rows(cases, runs: str | Path, cluster: str | None, manifest: SuiteRuns | None = None) -> list[SuiteRow]:
    """Validate each case's results file in ``runs`` on ``cluster`` (``simulator.validate``), in case order."""
    from simulator.run_results import RunStatus, load_results
    from simulator.validate import run_cluster, validate

    rows = []
    for case in cases:
        record = None if manifest is None else manifest.record(case.name)
        path = results_file(Path(runs), case)
        if record is not None and record.skipped:
            rows.append(SuiteRow(case=case, validation=None, record=record, error=f"skipped: {record.error}"))
            continue
        if not path.exists():
            why = record.error if record is not None and record.error else "not run (no results file)"
            rows.append(SuiteRow(case=case, validation=None, record=record, error=why))
            continue
        results = load_results(path)
        error = record.error if record is not None else None
        if results.status is not RunStatus.COMPLETE:
            why = error or (results.failure.error if results.failure else f"run {results.status.value}")
            rows.append(SuiteRow(case=case, validation=None, record=record, results=str(path),
                                 error=f"{results.status.value}: {why}"))
            continue
        try:
            v = validate(results, run_cluster(results, cluster))
        except SpecError as err:
            if err.field == "--cluster":
                raise
            rows.append(SuiteRow(case=case, validation=None, record=record, results=str(path),
                                 error=error or str(err)))
            continue
        rows.append(SuiteRow(case=case, validation=v, record=record, results=str(path), error=error))
    return rows
