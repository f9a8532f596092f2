"""The validation suite's figures: step-time MAPE overall and per family, memory errors, a table, a
Markdown report and a predicted-vs-measured scatter.

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
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

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
MARKERS = {Family.DDP: "o", Family.ZERO: "s", Family.OFFLOAD: "D", Family.PIPELINE: "^", Family.TENSOR: "v",
           Family.HYBRID: "P", Family.RECOMPUTE: "X", Family.PARAM_SERVER: "*"}
"""One scatter marker per family."""
BAND = 0.10
"""The ±10 % band drawn around y = x."""


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

    def busy(self, row: SuiteRow) -> bool | None:
        """Other work took more than the quiet share of the CPU during the case (None: not measured)."""
        f = None if row.record is None else row.record.foreign_cpu_fraction
        return None if f is None else f > QUIET_FOREIGN_CPU_FRACTION

    def drift(self, row: SuiteRow) -> float | None:
        """The case's speed drift from the calibration's (:func:`speed_drift`); None: not measured."""
        rec, ref = row.record, None if self.manifest is None else self.manifest.speed_reference_s
        return None if rec is None else speed_drift(ref, (rec.speed_before_s, rec.speed_after_s))

    def drifted(self, row: SuiteRow) -> bool | None:
        d = self.drift(row)
        return None if d is None else d > SPEED_DRIFT_MAX

    def noisy(self, row: SuiteRow) -> bool | None:
        """Busy or drifted; None when the CPU share was not measured (the speed probe alone cannot say quiet)."""
        busy = self.busy(row)
        return None if busy is None else busy or bool(self.drifted(row))

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
            return f"NOISY MACHINE: {'; '.join(why)}; the figures below are not clean measurements of the model's error"
        if self.hygiene is Hygiene.QUIET:
            speed = (f" and the machine's speed stayed within {SPEED_DRIFT_MAX:.0%} of the calibration's"
                     if all(self.drift(r) is not None for r in self.done) else " (machine speed not measured)")
            return (f"quiet machine: other work took at most {QUIET_FOREIGN_CPU_FRACTION:.0%} of the CPU{speed} "
                    "during every case")
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
                "speed_drift_max": SPEED_DRIFT_MAX,
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
            "noisy": report.noisy(r)}


def pct(x: float | None, signed: bool = True) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


COLUMNS = ("case", "family", "procs", "measured ms", "p10-p90 ms", "analytical ms", "error", "des error",
           "states err", "peak err", "other cpu", "speed drift", "load 1m")


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
        if not r.ok:
            cells.append([r.case.name, r.case.family.value, procs, "-", "-", "-", r.error or "-", "", "", "", other,
                          speed, load])
            continue
        cells.append([r.case.name, r.case.family.value, procs, _ms(d["measured_s"]), spread, _ms(d["analytical_s"]),
                      pct(d["step_time_error"]), pct(d["step_time_error_des"]), pct(d["model_state_error"]),
                      pct(d["peak_memory_error"]), other, speed, load])
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
    cells = table_cells(report)
    full = [list(COLUMNS)] + [c for r, c in zip(report.rows, cells) if r.ok]
    widths = [max(len(row[i]) for row in full) for i in range(len(COLUMNS))]

    def line(row):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    lines = [line(list(COLUMNS))]
    for r, row in zip(report.rows, cells):
        lines.append(line(row) if r.ok else "  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[6])
    return "\n".join(lines + [""] + summary_lines(report))


def scatter_figure(report: SuiteReport):
    """Estimated (analytical) vs measured step time, log axes, y = x and a ±10 % band, one marker per family."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 6))
    ax = fig.add_subplot()
    values = []
    for family in Family:
        pts = [(r.validation.row("step_time_s").measured, r.validation.row("step_time_s").analytical)
               for r in report.done if r.case.family is family]
        if pts:
            xs, ys = zip(*pts)
            values += [*xs, *ys]
            err = report.step_time_mape(family=family)
            ax.scatter(xs, ys, marker=MARKERS[family], s=60, label=f"{family.value} (MAPE {pct(err, signed=False)})")
    if values:
        lo, hi = min(values) / 2, max(values) * 2
        line = [lo, hi]
        ax.fill_between(line, [v * (1 - BAND) for v in line], [v * (1 + BAND) for v in line], color="0.85",
                        label=f"±{BAND:.0%}")
        ax.plot(line, line, color="0.3", linewidth=1, label="y = x")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured step time, s (median)")
    ax.set_ylabel("estimated step time, s (analytical)")
    ax.set_title(f"{report.suite} suite on {report.cluster}: step-time MAPE "
                 f"{pct(report.step_time_mape(), signed=False)}"
                 + (" (noisy machine)" if report.hygiene is Hygiene.NOISY else ""), fontsize="medium")
    ax.legend(fontsize="small", loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig
