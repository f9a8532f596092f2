"""Run the validation suite's cases for real, one after the other, and note how quiet the machine was.

Each case (``simulator.validation_suite``) is written as a plan file ``RUNS/<case>.plan.json`` and run
exactly as ``trainplan execute PLAN --scale tiny --precision fp32 --out RUNS/<case>.results.json`` runs
it (``executor.options.prepare`` checks it, ``executor.supervise`` starts the ranks). Before and around
each run it samples the machine:

- the 1-minute load average (``os.getloadavg``) just before launching, recorded in the report;
- the **foreign CPU fraction**: CPU seconds the whole machine spent busy during the run (``/proc/stat``,
  Linux ``proc(5)``: user + nice + system + irq + softirq + steal jiffies over ``SC_CLK_TCK``) less the
  CPU seconds of this process and its ranks (:func:`executor.own_cpu.own_cpu_s`: forked ranks too), over wall seconds ×
  cores: the share of the machine other work took while the case was measured. Our own ranks' load
  is excluded, which the load average cannot do;
- the **machine speed**: :func:`executor.speed_probe.probe`:
  :data:`executor.speed_probe.REFERENCE_READINGS_BEFORE` readings before ``--calibrate``'s calibration
  (:func:`executor.speed_probe.reference_readings`, called by the command) and
  :data:`executor.speed_probe.REFERENCE_READINGS_AFTER` at the start of the runs, whose median is the reference
  (``simulator.suite_report.speed_reference``); then one after each case, so each case is bracketed by two
  readings (``speed_before_s``, ``speed_after_s``): contention from outside the VM that neither sample above
  sees (``simulator.suite_report.speed_drift``).

With ``retries`` (``validate --suite --retries N``) a case the report would flag noisy
(``simulator.suite_report.run_noisy``: foreign CPU share or speed drift over its threshold) is run again, up to N
more times, each attempt bracketed by the probe like a case; the case reports the attempt
``simulator.suite_report.used_attempt`` picks (the first quiet one, else the least drifted) and keeps them all.

:func:`executor.suite_calibration.calibrated_cluster` turns ``--calibrate`` into the cluster the suite is
estimated on.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from executor.own_cpu import own_cpu_s
from simulator.errors import SpecError
from simulator.suite_runs import Attempt, CaseRecord, SuiteRuns, results_file
from simulator.validation_suite import SuiteCase, case_plan

PRECISION = "fp32"
"""Every case runs in fp32: localhost-cpu lists only an fp32 peak, and one rule keeps GPU and CPU runs alike."""
SCALE = "tiny"
CALIBRATION_PROCESSES = 4
"""Most processes ``--calibrate`` measures on (fewer when ``--nproc`` is lower): the largest dp group of the suite."""
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
"""user, nice, system, irq, softirq, steal in /proc/stat's ``cpu`` line (idle and iowait are not busy)."""


def _machine_busy_s() -> float | None:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    return sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields)) / os.sysconf("SC_CLK_TCK")


def foreign_fraction(busy0: float | None, own0: float, wall_s: float) -> float | None:
    """The share of the machine's CPU other work took since ``busy0`` / ``own0`` were sampled, ``wall_s`` ago
    (module docstring); None where ``/proc/stat`` cannot be read."""
    busy1, own1 = _machine_busy_s(), own_cpu_s()
    if busy0 is None or busy1 is None or wall_s <= 0:
        return None
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall_s * (os.cpu_count() or 1))


def plan_path(runs: Path, case: SuiteCase) -> Path:
    return runs / f"{case.name}.plan.json"


def results_path(runs: Path, case: SuiteCase) -> Path:
    return results_file(runs, case)


def write_plans(cases, runs: Path) -> list[Path]:
    """Write each case's plan file into ``runs`` (made if missing); the paths, in case order."""
    runs.mkdir(parents=True, exist_ok=True)
    return [case_plan(c).save(plan_path(runs, c)) for c in cases]


def executor_args(case: SuiteCase, runs: Path, *, steps: int, warmup: int, timeout_s: float,
                  backend: str | None = None, measure_s: float | None = None) -> list[str]:
    """The ``python -m executor.run`` / ``trainplan execute`` arguments of ``case`` (also printed for torchrun)."""
    argv = [str(plan_path(runs, case)), "--scale", SCALE, "--steps", str(steps), "--warmup", str(warmup),
            "--seed", "0", "--precision", PRECISION, "--timeout-s", repr(timeout_s),
            "--out", str(results_path(runs, case))]
    argv += ["--measure-s", repr(measure_s)] if measure_s is not None else []
    return argv + (["--backend", backend] if backend else [])


def processes_for(case: SuiteCase, nproc: int | None) -> int:
    """Local processes for ``case`` under ``--nproc`` (at most that many: dp shrinks, as ``execute --nproc``)."""
    return case.processes if nproc is None else min(case.processes, nproc)


def run_case(case: SuiteCase, runs: Path, *, nproc: int | None, steps: int, warmup: int, timeout_s: float,
             backend: str | None = None, measure_s: float | None = None) -> CaseRecord:
    """Run ``case`` on local processes (its plan file must be in ``runs``); a failed run is recorded, not raised."""
    from executor import supervise
    from executor.options import options_from_args, prepare
    from executor.strategies.base import processes

    if nproc is not None and nproc < case.min_processes:
        return CaseRecord(name=case.name, processes=0, skipped=True,
                          error=f"needs {case.min_processes} processes to keep what it tests; --nproc is {nproc}")
    argv = executor_args(case, runs, steps=steps, warmup=warmup, timeout_s=timeout_s, backend=backend,
                         measure_s=measure_s)
    options = options_from_args(_namespace(argv))
    try:
        scaled, _ = prepare(options, processes_for(case, nproc) if nproc is not None else None)
    except SpecError as err:  # e.g. a shrunk dp the plan cannot take: this case is not run, the others are
        return CaseRecord(name=case.name, processes=0, skipped=True, error=f"refused: {err}")
    world = processes(scaled.run.layout())
    results_path(runs, case).unlink(missing_ok=True)
    load_1m = os.getloadavg()[0]
    busy0, own0, t0 = _machine_busy_s(), own_cpu_s(), time.perf_counter()
    outcome = supervise.supervise(argv, world, timeout_s=timeout_s, out=options.out, echo=False)
    wall = time.perf_counter() - t0
    foreign = foreign_fraction(busy0, own0, wall)
    return CaseRecord(name=case.name, processes=world, error=None if outcome.ok else outcome.error,
                      load_1m=load_1m, foreign_cpu_fraction=foreign, wall_s=wall)


def _namespace(argv: list[str]):
    import argparse

    from executor.options import add_run_arguments

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args(argv)


def host_info(backend: str) -> dict:
    """The machine the suite ran on, for the report."""
    import platform

    import torch

    from executor.measure import cpu_model

    return {"node": platform.node(), "cpu_model": cpu_model(), "cores": os.cpu_count(), "system": platform.system(),
            "torch": torch.__version__, "backend": backend}


def run_suite(cases, runs: Path, *, suite: str, cluster: str | None, cluster_notes: list[str], nproc: int | None,
              steps: int, warmup: int, timeout_s: float, backend: str, progress=None,
              measure_s: float | None = None, readings_before: tuple[float, ...] = (),
              retries: int = 0) -> SuiteRuns:
    """Write the plans, run every case (``progress(line)`` after each run), and save the manifest ``RUNS/suite.json``.

    ``retries``: most extra runs of a noisy case (module docstring; 0 runs each case once, as before val28).

    ``cluster`` is stored relative to ``runs`` when it is a file inside it (the calibrated cluster).
    ``readings_before``: the speed probe's readings taken before the calibration; with
    :data:`executor.speed_probe.REFERENCE_READINGS_AFTER` taken here, their median is the speed reference."""
    import datetime

    from executor.speed_probe import REFERENCE_READINGS_AFTER, reference_readings
    from simulator.suite_report import speed_reference

    write_plans(cases, runs)
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    readings = tuple(readings_before) + reference_readings(REFERENCE_READINGS_AFTER)
    start, records, reference = os.getloadavg(), [], speed_reference(readings)
    before = readings[-1]  # the reading right before the first case brackets it
    say = progress or (lambda line: None)
    for case in cases:
        rec, before = _attempts(case, runs, before, reference, retries, say, dict(
            nproc=nproc, steps=steps, warmup=warmup, timeout_s=timeout_s, backend=backend, measure_s=measure_s))
        records.append(rec)
    inside = Path(cluster or "")
    stored = inside.name if cluster and inside.is_file() and inside.parent.resolve() == runs.resolve() else cluster
    manifest = SuiteRuns(suite=suite, date=date, host=host_info(backend), cluster=stored, steps=steps, warmup=warmup,
                         cluster_notes=tuple(cluster_notes), load_average_start=tuple(start),
                         load_average_end=tuple(os.getloadavg()), speed_reference_s=reference,
                         speed_reference_readings_s=readings, retries=retries, cases=tuple(records))
    manifest.save(runs)
    return manifest


def _attempts(case: SuiteCase, runs: Path, before: float | None, reference_s: float | None, retries: int, say,
              run_kw: dict) -> tuple[CaseRecord, float | None]:
    """Run ``case``, bracketed by the probe, and again while the run is noisy and ``retries`` remain; the record of
    the attempt used, with every attempt, and the last reading. A retry is bracketed by a fresh reading taken right
    before it and one after it. Each attempt's results file is kept as ``<case>.attemptK.results.json``; the used
    one is copied to ``<case>.results.json``."""
    import shutil
    from dataclasses import replace

    from executor.speed_probe import probe
    from simulator.suite_report import run_drift, run_noisy, used_attempt

    tries: list[CaseRecord] = []
    files: list[str | None] = []
    while True:
        rec = run_case(case, runs, **run_kw)
        if rec.skipped:  # a skipped case ran nothing: no reading to bracket it, nothing to retry
            say(_progress_line(rec, reference_s))
            return rec, before
        after = probe()
        rec, before = replace(rec, speed_before_s=before, speed_after_s=after), after
        say(_progress_line(rec, reference_s))
        if not retries:
            return rec, before
        kept, out = runs / f"{case.name}.attempt{len(tries) + 1}.results.json", results_path(runs, case)
        files.append(out.replace(kept).name if out.exists() else None)
        tries.append(rec)
        if rec.error is not None or run_noisy(rec, reference_s) is not True or len(tries) > retries:
            break
        share, drift = rec.foreign_cpu_fraction or 0.0, run_drift(rec, reference_s) or 0.0
        say(f"  {case.name}: noisy (speed drift {drift:.0%}, other work {share:.0%} of the CPU): running it again, "
            f"retry {len(tries)} of {retries}")
        before = probe()  # a fresh reading right before the retry brackets it, not the one that flagged the last
    k = used_attempt(tries, reference_s)
    if files[k] is not None:
        shutil.copyfile(runs / files[k], results_path(runs, case))
    if len(tries) > 1:
        say(f"  {case.name}: attempt {k + 1} of {len(tries)} used"
            + (" (still noisy: the least drifted)" if run_noisy(tries[k], reference_s) else ""))
    attempts = tuple(Attempt.of(t, f) for t, f in zip(tries, files))
    return replace(tries[k], attempt=k + 1, attempts=attempts), before


def _progress_line(rec: CaseRecord, reference_s: float | None) -> str:
    from simulator.suite_report import speed_drift

    if rec.skipped:
        return f"  {rec.name}: skipped ({rec.error})"
    other = "" if rec.foreign_cpu_fraction is None else f", other work {rec.foreign_cpu_fraction:.0%} of the CPU"
    drift = speed_drift(reference_s, (rec.speed_before_s, rec.speed_after_s))
    speed = "" if drift is None else f", machine speed drift {drift:.0%}"
    state = "done" if rec.error is None else f"FAILED ({rec.error})"
    return (f"  {rec.name}: {state} on {rec.processes} processes in {rec.wall_s:.1f} s "
            f"(load {rec.load_1m:.2f}{other}{speed})")
