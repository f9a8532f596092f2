"""The default suite's 21 cases validated from recorded results files with both engines (tests/data/suite_default:
the lead's first of three consecutive ``trainplan validate --suite default --calibrate`` runs on this project's
2-core VM, 2026-11-25 06:54 UTC, quiet: other work at most 10 % of the CPU; its calibrated cluster.yaml beside
them). No process is launched; every figure is recomputed from the files, so it is deterministic."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from simulator.run_results import PeakMemoryKind, load_results
from simulator.suite_report import SuiteReport
from simulator.suite_runs import load_manifest, suite_rows
from simulator.validate import run_cluster, validate
from simulator.validation_suite import CASES, Family, SuiteName, suite_cases
from trainplan.__main__ import main

DATA = Path(__file__).parent / "data" / "suite_default"
CLUSTER = str(DATA / "cluster.yaml")
DEFAULT = suite_cases(SuiteName.DEFAULT)


def _validations() -> dict:
    out = {}
    for case in DEFAULT:
        results = load_results(DATA / f"{case.name}.results.json")
        out[case.name] = (results, validate(results, run_cluster(results, CLUSTER)))
    return out


def test_every_case_is_recorded_and_validates_with_both_engines():
    assert {c.name for c in DEFAULT} == {c.name for c in CASES}
    for name, (results, v) in _validations().items():
        step = v.row("step_time_s")
        assert step.measured > 0 and step.analytical > 0 and step.des > 0, name
        assert math.isfinite(step.error_analytical) and math.isfinite(step.error_des), name
        for row in v.rows:
            if row.unit == "s":
                assert math.isfinite(row.analytical) and math.isfinite(row.des), (name, row.name)


def test_recorded_peaks_are_rss_and_say_so():
    """These files predate the allocated-bytes measurement (executor/measure.py): their peaks are the process's
    RSS, which validate flags instead of reading as the model's allocated bytes."""
    for name, (results, v) in _validations().items():
        assert {r.peak_memory_kind for r in results.ranks} == {PeakMemoryKind.CPU_MAX_RSS}, name
        assert any("RSS" in n for n in v.notes), name


def test_pipelines_engines_agree_where_the_sends_pace_gpipe():
    """GPipe's closed form and the DES play its sends one at a time on each rank's p2p stream: equal (they were
    6.67 vs 14.80 ms); 1F1B and interleaved stay at or below the DES."""
    v = _validations()
    gpipe = v["pp-gpipe"][1].row("step_time_s")
    assert gpipe.analytical == pytest.approx(gpipe.des, rel=1e-9)
    for name in ("pp-1f1b", "pp-interleaved", "pp-dp", "3d"):
        row = v[name][1].row("step_time_s")
        assert row.analytical <= row.des * (1 + 1e-9), name


def test_suite_table_from_the_recorded_folder(capsys):
    """``--no-run`` recomputes the table from the folder and its cluster.yaml: 21 of 21 cases, each family."""
    manifest = load_manifest(DATA)
    report = SuiteReport(suite="default", cluster=CLUSTER, manifest=manifest,
                         rows=tuple(suite_rows(DEFAULT, DATA, CLUSTER, manifest)))
    assert len(report.done) == 21 and set(report.family_mape()) == set(Family)
    assert main(["validate", "--suite", "default", "--no-run", "--runs", str(DATA)]) == 0
    assert "over 21 of 21 cases" in capsys.readouterr().out
