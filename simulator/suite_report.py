"""The validation suite's figures: step-time MAPE overall and per family, memory errors and a table (the
Markdown report: ``simulator.suite_markdown``; the predicted-vs-measured scatter: ``simulator.suite_scatter``).

Per case the step-time error is ``simulator.validate``'s signed ``estimate / measured − 1`` of the
analytical engine against the measured median (the DES's is reported beside it). The suite's figure
is the mean absolute percentage error over the cases that completed,

    MAPE = (1/n) · Σ |t_est,i / t_meas,i − 1|,

overall and per :class:`~simulator.validation_suite.Family`. Memory: the same mean of |error| for the
model-state bytes (the part of the memory model that should be exact) and for the peak allocated bytes
(on CPUs the CPU allocator's peak over set-up and the warm-up steps, ``executor.measure``; results files
recorded before 2026-11-25 hold the process's RSS there, torch included, which validate flags).

**Hygiene.** A case counts as measured on a quiet machine when other work took at most
:data:`QUIET_FOREIGN_CPU_FRACTION` of the machine's CPU time during its run (``executor/suite_run.py``
measures that share), and the machine itself ran at the calibration's speed: a fixed single-thread
reference (``executor/speed_probe.py``) read just before and just after the case took at most
:data:`SPEED_DRIFT_MAX` more or less than the reference,

    drift = max over the case's readings t_i of |t_i / t_ref − 1|,   t_ref = median of the reference readings

taken around the calibration (:func:`speed_reference`: two before it, three after it; one reading alone was
set by a single high take, 27.7 ms against a usual 21.8 ms, docs/validation.md ``### bias21``)

(contention from outside a VM, a noisy neighbour or throttling, shows in neither the load average nor
other processes' CPU). When any case is over either, the report and the table say the machine was noisy
and that the figures are not clean, instead of presenting them as the model's error.

With ``--retries N`` (``executor.suite_run``) a noisy case is run again, up to N more times; the case reports
:func:`used_attempt`: the first attempt that is not noisy, else the least drifted, and the headline counts the
cases still noisy after their retries (every attempt's drift is in the table's ``attempts`` column).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, fields

from simulator.enum_kind import Kind
from simulator.suite_runs import SuiteRow, SuiteRuns
from simulator.validation_suite import Family

QUIET_FOREIGN_CPU_FRACTION = 0.10
"""Largest share of the machine's CPU time other work may take during a case for it to count as quiet
(a measurement-hygiene threshold of this report, not a model parameter)."""
SPEED_DRIFT_MAX = 0.25
"""Largest |t_case / t_ref − 1| of the speed probe for a case to count as run at the calibration's speed (a
hygiene threshold, not a model parameter). Above the probe's own repeatability on the 2-core VM shared with
other helpers (load 2.8–7): in blocks of 20–30 readings back to back, no reading was more than 23.5 % from its
block's median, p10..p90 within about ±12 % (2026-11-26, docs/validation.md ``### val20``); on a quiet machine
every reading within 10.3 % of the median (``benchmarks/speed_probe_repeat.py``, 2026-11-26 09:55 UTC, same doc,
"val20's speed check on a quiet machine"); well below the 1.6x slowdown of 2026-11-26 that the foreign CPU share did
not see. The reference is the median of several readings around the calibration (:func:`speed_reference`)."""


class Hygiene(Kind):
    QUIET = "quiet"
    NOISY = "noisy"
    UNKNOWN = "not measured"
    """Results made elsewhere (torchrun) without this command's samples."""


def speed_drift(reference_s: float | None, readings) -> float | None:
    """max |t_i / t_ref − 1| over the readings that exist (module docstring); None without a reference or any
    reading."""
    kept = [t for t in readings if t is not None]
    if not reference_s or not kept:
        return None
    return max(abs(t / reference_s - 1.0) for t in kept)


def run_busy(rec) -> bool | None:
    """Other work took more than the quiet share of the CPU during one run (a ``CaseRecord`` or an ``Attempt`` of
    ``simulator.suite_runs``); None: not measured."""
    f = None if rec is None else rec.foreign_cpu_fraction
    return None if f is None else f > QUIET_FOREIGN_CPU_FRACTION


def run_drift(rec, reference_s: float | None) -> float | None:
    """One run's speed drift from the reference (:func:`speed_drift` of its two readings); None: not measured."""
    return None if rec is None else speed_drift(reference_s, (rec.speed_before_s, rec.speed_after_s))


def run_noisy(rec, reference_s: float | None) -> bool | None:
    """Busy or drifted by more than :data:`SPEED_DRIFT_MAX`; None when the CPU share was not measured (the speed
    probe alone cannot say quiet). The one rule the report flags and ``--retries`` re-runs by."""
    busy, drift = run_busy(rec), run_drift(rec, reference_s)
    return None if busy is None else busy or (drift is not None and drift > SPEED_DRIFT_MAX)


def used_attempt(runs, reference_s: float | None) -> int:
    """The index of the run a case reports among its attempts, in order: the first completed one that is not noisy;
    else (every completed one noisy) the completed one with the smallest drift, ties (or no readings) to the smaller
    foreign CPU share, then the earlier. Failed runs count only when none completed."""
    done = [i for i, r in enumerate(runs) if r.error is None] or list(range(len(runs)))
    quiet = [i for i in done if run_noisy(runs[i], reference_s) is not True]
    if quiet:
        return quiet[0]

    def key(i: int):
        drift, share = run_drift(runs[i], reference_s), runs[i].foreign_cpu_fraction
        return (math.inf if drift is None else drift, math.inf if share is None else share, i)

    return min(done, key=key)


def speed_reference(readings) -> float | None:
    """The machine-speed reference: the median of the readings that exist (thread CPU seconds of the fixed probe,
    ``executor/speed_probe.py``), taken around the calibration (``executor.suite_run``: two before it, three
    after). A median of five is set by neither one nor two high takes, which one reading right after the
    calibration was (2026-11-26 09:57 UTC: 27.7 ms against the 21.8 ms median of 20 readings two minutes before,
    docs/validation.md ``### bias21``). None without any reading."""
    kept = [t for t in readings if t is not None]
    return statistics.median(kept) if kept else None


def mape(errors) -> float | None:
    """Mean |error| of the errors that exist (fractions); None when there is none."""
    kept = [abs(e) for e in errors if e is not None and math.isfinite(e)]
    return sum(kept) / len(kept) if kept else None


@dataclass(frozen=True, kw_only=True)
class SuiteReport:
    suite: str
    cluster: str
    rows: tuple[SuiteRow, ...]
    manifest: SuiteRuns | None = None

    @property
    def done(self) -> tuple[SuiteRow, ...]:
        return tuple(r for r in self.rows if r.ok)

    def step_time_mape(self, engine: str = "analytical", family: Family | None = None) -> float | None:
        return mape(r.error_of("step_time_s", engine) for r in self.done if family in (None, r.case.family))

    def step_time_bias(self) -> float | None:
        """Mean signed step-time error (analytical) over the completed cases: the bias the MAPE holds (a MAPE of
        15 % with a bias of −11 % is mostly estimates low alike, docs/validation.md ``### bias21``)."""
        kept = [e for e in (r.error_of("step_time_s") for r in self.done) if e is not None and math.isfinite(e)]
        return sum(kept) / len(kept) if kept else None

    def family_mape(self, engine: str = "analytical") -> dict[Family, float | None]:
        """Per family that has a case in the suite (None where none of its cases completed)."""
        return {f: self.step_time_mape(engine, f) for f in dict.fromkeys(r.case.family for r in self.rows)}

    def memory_mape(self, name: str) -> float | None:
        """``model_state_bytes`` or ``peak_memory_bytes``."""
        return mape(r.error_of(name) for r in self.done)

    @property
    def reference_s(self) -> float | None:
        return None if self.manifest is None else self.manifest.speed_reference_s

    @property
    def retries(self) -> int:
        """``--retries`` of the run (0: every case ran once, or a manifest from before it existed)."""
        return (None if self.manifest is None else self.manifest.retries) or 0

    def busy(self, row: SuiteRow) -> bool | None:
        """Other work took more than the quiet share of the CPU during the case (:func:`run_busy`)."""
        return run_busy(row.record)

    def drift(self, row: SuiteRow) -> float | None:
        """The case's speed drift from the calibration's (:func:`run_drift`); None: not measured."""
        return run_drift(row.record, self.reference_s)

    def drifted(self, row: SuiteRow) -> bool | None:
        d = self.drift(row)
        return None if d is None else d > SPEED_DRIFT_MAX

    def noisy(self, row: SuiteRow) -> bool | None:
        """Busy or drifted (:func:`run_noisy`), for the attempt the case reports."""
        return run_noisy(row.record, self.reference_s)

    def retried(self) -> str:
        """``, after up to N re-run(s) of a noisy case (k case(s) re-run, e extra run(s))``; '' without
        ``--retries``."""
        if not self.retries:
            return ""
        again = [len(r.record.attempts) for r in self.rows if r.record is not None and len(r.record.attempts) > 1]
        return (f", after up to {self.retries} re-run(s) of a noisy case ({len(again)} case(s) re-run, "
                f"{sum(again) - len(again)} extra run(s))")

    @property
    def hygiene(self) -> Hygiene:
        marks = [self.noisy(r) for r in self.done]
        if any(marks):
            return Hygiene.NOISY
        return Hygiene.QUIET if marks and all(m is False for m in marks) else Hygiene.UNKNOWN

    def verdict(self) -> str:
        """One sentence on the machine, for the table and the report."""
        n = len(self.done)
        if self.hygiene is Hygiene.NOISY:
            busy, drifted = (sum(bool(f(r)) for r in self.done) for f in (self.busy, self.drifted))
            why = ([f"other work took more than {QUIET_FOREIGN_CPU_FRACTION:.0%} of the CPU during {busy} of {n} "
                    "cases"] if busy else []) + ([
                f"the machine's speed drifted by more than {SPEED_DRIFT_MAX:.0%} from the calibration's during "
                f"{drifted} of {n} cases"] if drifted else [])
            return (f"NOISY MACHINE: {'; '.join(why)}{self.retried()}; the figures below are not clean measurements "
                    "of the model's error")
        if self.hygiene is Hygiene.QUIET:
            speed = (f" and the machine's speed stayed within {SPEED_DRIFT_MAX:.0%} of the calibration's"
                     if all(self.drift(r) is not None for r in self.done) else " (machine speed not measured)")
            return (f"quiet machine: other work took at most {QUIET_FOREIGN_CPU_FRACTION:.0%} of the CPU{speed} "
                    f"during every case{self.retried()}")
        return "machine load not measured by this command (results made elsewhere): cleanliness unknown"

    def to_dict(self) -> dict:
        m = self.manifest
        return {"suite": self.suite, "cluster": self.cluster, "step_time_mape": self.step_time_mape(),
                "step_time_mape_des": self.step_time_mape("des"),
                "step_time_mean_signed_error": self.step_time_bias(),
                "family_step_time_mape": {f.value: v for f, v in self.family_mape().items()},
                "model_state_mape": self.memory_mape("model_state_bytes"),
                "peak_memory_mape": self.memory_mape("peak_memory_bytes"),
                "hygiene": self.hygiene.value, "verdict": self.verdict(),
                "date": None if m is None else m.date, "host": None if m is None else m.host,
                "cluster_notes": [] if m is None else list(m.cluster_notes),
                "load_average_start": None if m is None else list(m.load_average_start),
                "load_average_end": None if m is None else list(m.load_average_end),
                "speed_reference_s": None if m is None else m.speed_reference_s,
                "speed_drift_max": SPEED_DRIFT_MAX, "retries": self.retries,
                "cases_completed": len(self.done), "cases": len(self.rows),
                "rows": [_row_dict(r, self) for r in self.rows]}


def _row_dict(r: SuiteRow, report: SuiteReport) -> dict:
    step = None if r.validation is None else r.validation.row("step_time_s")
    rec = r.record
    return {"case": r.case.name, "family": r.case.family.value, "ok": r.ok, "error": r.error,
            "results": r.results, "processes": None if rec is None else rec.processes,
            "measured_s": None if step is None else step.measured, "p10_s": None if step is None else step.p10,
            "p90_s": None if step is None else step.p90, "analytical_s": None if step is None else step.analytical,
            "des_s": None if step is None else step.des, "step_time_error": r.error_of("step_time_s"),
            "step_time_error_des": r.error_of("step_time_s", "des"),
            "model_state_error": r.error_of("model_state_bytes"), "peak_memory_error": r.error_of("peak_memory_bytes"),
            "load_1m": None if rec is None else rec.load_1m,
            "foreign_cpu_fraction": None if rec is None else rec.foreign_cpu_fraction,
            "wall_s": None if rec is None else rec.wall_s,
            "speed_before_s": None if rec is None else rec.speed_before_s,
            "speed_after_s": None if rec is None else rec.speed_after_s,
            "speed_drift": report.drift(r), "speed_drifted": report.drifted(r), "busy": report.busy(r),
            "noisy": report.noisy(r), "attempt": None if rec is None else rec.attempt,
            "attempts": [] if rec is None else [_attempt_dict(a, report.reference_s) for a in rec.attempts]}


def _attempt_dict(a, reference_s: float | None) -> dict:
    return {f.name: getattr(a, f.name) for f in fields(a)} | {
        "speed_drift": run_drift(a, reference_s), "busy": run_busy(a), "noisy": run_noisy(a, reference_s)}


def pct(x: float | None, signed: bool = True) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


COLUMNS = ("case", "family", "procs", "measured ms", "p10-p90 ms", "analytical ms", "error", "des error",
           "states err", "peak err", "other cpu", "speed drift", "load 1m")
ATTEMPTS = "attempts"
"""The column added under ``--retries``: ``1``, or ``k/n: d1 d2 ..`` (attempt k of n used, each one's speed drift)."""


def columns(report: SuiteReport) -> tuple[str, ...]:
    return COLUMNS + ((ATTEMPTS,) if report.retries else ())


def _attempts_cell(rec, reference_s: float | None) -> str:
    if rec is None or len(rec.attempts) <= 1:
        return "-" if rec is None or not rec.attempts else "1"
    drifts = (run_drift(a, reference_s) for a in rec.attempts)
    return f"{rec.attempt}/{len(rec.attempts)}: " + " ".join("-" if d is None else f"{d:.0%}" for d in drifts)


def table_cells(report: SuiteReport) -> list[list[str]]:
    """One list of :data:`COLUMNS` cells per case (the text table and the Markdown table)."""
    cells = []
    for r in report.rows:
        d = _row_dict(r, report)
        spread = "-" if d["p10_s"] is None else f"{_ms(d['p10_s'])}-{_ms(d['p90_s'])}"
        procs = "-" if d["processes"] is None else str(d["processes"])
        load = "-" if d["load_1m"] is None else f"{d['load_1m']:.2f}"
        other = pct(d["foreign_cpu_fraction"], signed=False) + (" noisy" if d["busy"] else "")
        speed = pct(d["speed_drift"], signed=False) + (" noisy" if d["speed_drifted"] else "")
        tail = [other, speed, load] + ([_attempts_cell(r.record, report.reference_s)] if report.retries else [])
        if not r.ok:
            cells.append([r.case.name, r.case.family.value, procs, "-", "-", "-", r.error or "-", "", "", ""] + tail)
            continue
        cells.append([r.case.name, r.case.family.value, procs, _ms(d["measured_s"]), spread, _ms(d["analytical_s"]),
                      pct(d["step_time_error"]), pct(d["step_time_error_des"]), pct(d["model_state_error"]),
                      pct(d["peak_memory_error"])] + tail)
    return cells


def summary_lines(report: SuiteReport) -> list[str]:
    fam = ", ".join(f"{f.value} {pct(v, signed=False)}" for f, v in report.family_mape().items())
    return [f"step-time MAPE {pct(report.step_time_mape(), signed=False)} (analytical), "
            f"{pct(report.step_time_mape('des'), signed=False)} (DES) over {len(report.done)} of {len(report.rows)} "
            f"cases, on {report.cluster}; mean signed error {pct(report.step_time_bias())}",
            f"per family: {fam}",
            f"memory: model states MAPE {pct(report.memory_mape('model_state_bytes'), signed=False)}, peak MAPE "
            f"{pct(report.memory_mape('peak_memory_bytes'), signed=False)}",
            report.verdict()]


def format_table(report: SuiteReport) -> str:
    """The suite as a text table (a case without a validation gives its reason), the MAPE lines, the verdict."""
    cells, heads = table_cells(report), list(columns(report))
    full = [heads] + [c for r, c in zip(report.rows, cells) if r.ok]
    widths = [max(len(row[i]) for row in full) for i in range(len(heads))]

    def line(row):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    lines = [line(heads)]
    for r, row in zip(report.rows, cells):
        lines.append(line(row) if r.ok else "  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[6])
    return "\n".join(lines + [""] + summary_lines(report))
