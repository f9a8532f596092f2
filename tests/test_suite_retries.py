"""``validate --suite --retries N`` (issue 11, measurement hygiene; docs/validation.md ``### val28``): a case the
report flags noisy (``simulator.suite_report.run_noisy``) is run again, up to N more times, and reports the first
quiet attempt, else the least drifted; every attempt is kept. The case runner and the speed probe are stubbed (as
in tests/test_speed_drift.py): nothing here runs a case or asserts a time. The recorded results are
tests/data/suite_quick (2026-11-24)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.suite_markdown import markdown
from simulator.suite_report import (COLUMNS, SPEED_DRIFT_MAX, Hygiene, SuiteReport, columns, format_table,
                                    used_attempt)
from simulator.suite_runs import Attempt, CaseRecord, load_manifest, suite_rows
from simulator.validation_suite import SuiteName, suite_cases

DATA = Path(__file__).parent / "data" / "suite_quick"
QUICK = suite_cases(SuiteName.QUICK)
REF_S = 0.030
REFERENCE = [REF_S] * 3  # the three readings at the start of the runs


def _stub(monkeypatch, readings, foreign=None):
    """``run_suite`` with ``readings`` as the probe's and a case runner that writes ``attempt K`` as the results
    file; ``foreign[name]``: the CPU shares of that case's attempts (default 0). The runner's calls, by name."""
    import executor.speed_probe
    import executor.suite_run as suite_run

    it, calls = iter(readings), []

    def run_case(case, runs, **_):
        calls.append(case.name)
        n = calls.count(case.name)
        suite_run.results_path(runs, case).write_text(f"attempt {n}")
        share = (foreign or {}).get(case.name, (0.0,) * 9)[n - 1]
        return CaseRecord(name=case.name, processes=case.processes, load_1m=0.1, foreign_cpu_fraction=share,
                          wall_s=1.0)

    monkeypatch.setattr(executor.speed_probe, "probe", lambda: next(it))
    monkeypatch.setattr(suite_run, "run_case", run_case)
    return suite_run, calls


def _run(suite_run, runs, cases=QUICK[:2], retries=2, lines=None):
    return suite_run.run_suite(cases, runs, suite="quick", cluster="localhost-cpu", cluster_notes=[], nproc=None,
                               steps=3, warmup=1, timeout_s=60.0, backend="gloo", retries=retries,
                               progress=None if lines is None else lines.append)


def _report(manifest) -> SuiteReport:
    """The recorded quick suite's results, with ``manifest``'s records of the cases it ran (the others quiet)."""
    m = load_manifest(DATA)
    quiet = {c.name: replace(c, foreign_cpu_fraction=0.0, speed_before_s=REF_S, speed_after_s=REF_S) for c in m.cases}
    m = replace(m, cases=tuple(quiet[c.name] if manifest.record(c.name) is None else manifest.record(c.name)
                               for c in m.cases), speed_reference_s=REF_S, retries=manifest.retries)
    return SuiteReport(suite="quick", cluster="localhost-cpu", manifest=m,
                       rows=tuple(suite_rows(QUICK, DATA, "localhost-cpu", m)))


def test_a_drifted_case_is_run_again_and_its_quiet_attempt_reported(tmp_path, monkeypatch):
    # case 0: 50 % slow after its first run; a fresh reading, then a quiet second run; case 1 quiet at once
    suite_run, calls = _stub(monkeypatch, REFERENCE + [0.045, 0.031, 0.031, 0.030])
    lines = []
    m = _run(suite_run, tmp_path, lines=lines)
    first, second = QUICK[0].name, QUICK[1].name
    assert calls == [first, first, second] and m.retries == 2
    a = m.cases[0]
    assert a.attempt == 2 and len(a.attempts) == 2
    assert (a.speed_before_s, a.speed_after_s) == (0.031, 0.031)  # the quiet attempt's readings are the case's
    assert [(t.speed_before_s, t.speed_after_s) for t in a.attempts] == [(REF_S, 0.045), (0.031, 0.031)]
    assert (tmp_path / f"{first}.results.json").read_text() == "attempt 2"  # the used attempt's file is validated
    assert [t.results for t in a.attempts] == [f"{first}.attempt1.results.json", f"{first}.attempt2.results.json"]
    assert (tmp_path / a.attempts[0].results).read_text() == "attempt 1"  # and the other one is kept
    b = m.cases[1]
    assert b.attempt == 1 and len(b.attempts) == 1 and (b.speed_before_s, b.speed_after_s) == (0.031, 0.030)
    assert any(f"{first}: noisy (speed drift 50%" in x and "retry 1 of 2" in x for x in lines)
    assert f"  {first}: attempt 2 of 2 used" in lines
    report = _report(m)
    assert report.hygiene is Hygiene.QUIET and "1 case(s) re-run, 1 extra run(s)" in report.verdict()
    assert columns(report)[-1] == "attempts" and "2/2: 50% 3%" in format_table(report)
    row = next(r for r in report.to_dict()["rows"] if r["case"] == first)
    assert row["attempt"] == 2 and [t["speed_drift"] for t in row["attempts"]] == pytest.approx([0.5, 1 / 30])
    assert [t["noisy"] for t in row["attempts"]] == [True, False] and not row["noisy"]
    assert "`attempts` (`--retries 2`)" in markdown(report)


def test_no_retries_runs_each_case_once_as_before(tmp_path, monkeypatch):
    suite_run, calls = _stub(monkeypatch, REFERENCE + [0.045, 0.030])
    lines = []
    m = _run(suite_run, tmp_path, retries=0, lines=lines)
    assert calls == [c.name for c in QUICK[:2]] and m.retries == 0
    assert [(c.speed_before_s, c.speed_after_s, c.attempt, c.attempts) for c in m.cases] == [
        (REF_S, 0.045, None, ()), (0.045, 0.030, None, ())]
    assert len(lines) == 2 and not any("again" in x for x in lines)  # one progress line per case, as before
    assert (tmp_path / f"{QUICK[0].name}.results.json").read_text() == "attempt 1"
    assert not list(tmp_path.glob("*.attempt*.results.json"))
    report = _report(m)
    before = _report(replace(m, retries=None))  # a manifest written before --retries existed
    assert report.hygiene is Hygiene.NOISY and columns(report) == COLUMNS
    assert format_table(report) == format_table(before) and markdown(report) == markdown(before)
    assert "re-run" not in report.verdict()


def test_the_manifest_keeps_every_attempt_through_a_round_trip(tmp_path, monkeypatch):
    suite_run, _ = _stub(monkeypatch, REFERENCE + [0.045, 0.030, 0.031, 0.030, 0.030, 0.030],
                         foreign={QUICK[1].name: (0.5, 0.0)})  # case 1: busy (half the CPU), then quiet
    m = _run(suite_run, tmp_path)
    assert [len(c.attempts) for c in m.cases] == [2, 2]
    assert m.cases[1].attempts[0].foreign_cpu_fraction == 0.5 and m.cases[1].foreign_cpu_fraction == 0.0
    assert load_manifest(tmp_path) == m
    old = replace(m, retries=None, cases=tuple(replace(c, attempt=None, attempts=()) for c in m.cases))
    old.save(tmp_path)  # a manifest without the new fields still loads
    assert load_manifest(tmp_path) == old


def test_a_case_noisy_on_every_attempt_keeps_its_least_drifted_and_is_flagged(tmp_path, monkeypatch):
    # drifts 60 %, 40 %, 50 %: each retry bracketed by a fresh reference-speed reading and its own after
    suite_run, calls = _stub(monkeypatch, REFERENCE + [0.048, REF_S, 0.042, REF_S, 0.045])
    lines = []
    m = _run(suite_run, tmp_path, cases=QUICK[:1], lines=lines)
    a = m.cases[0]
    assert len(calls) == 3 and a.attempt == 2 and a.speed_after_s == 0.042
    assert (tmp_path / f"{a.name}.results.json").read_text() == "attempt 2"
    assert f"  {a.name}: attempt 2 of 3 used (still noisy: the least drifted)" in lines
    report = _report(m)
    assert report.hygiene is Hygiene.NOISY
    assert (f"drifted by more than {SPEED_DRIFT_MAX:.0%} from the calibration's during 1 of {len(report.done)} cases, "
            "after up to 2 re-run(s) of a noisy case (1 case(s) re-run, 2 extra run(s))") in report.verdict()
    assert "2/3: 60% 40% 50%" in format_table(report)


def test_the_attempt_used_is_the_first_quiet_completed_one_else_the_least_drifted():
    def run(after, share=0.0, error=None):
        return Attempt(speed_before_s=REF_S, speed_after_s=after, foreign_cpu_fraction=share, error=error)

    assert used_attempt([run(0.045), run(0.031), run(0.030)], REF_S) == 1
    assert used_attempt([run(0.031, share=0.5), run(0.045), run(0.040)], REF_S) == 0  # busy, but least drifted
    assert used_attempt([run(0.045), run(0.030, error="timed out")], REF_S) == 0  # a failed run is no measurement
    assert used_attempt([run(0.045, share=0.3), run(0.045, share=0.2)], REF_S) == 1  # a tie: the less busy
    assert used_attempt([run(None, share=0.0)], None) == 0  # no readings: quiet by the CPU share
