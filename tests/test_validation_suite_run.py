"""The quick validation suite end to end, as the issue's done command runs it: calibrate the network, plan,
run every case on gloo processes (``--scale tiny``), validate, write the report. Six runs of two or three
processes plus a 3-process calibration: about 2 minutes on the 2-core VM when it is shared (1.5 min quiet);
marked ``multiproc`` and ``suite`` (``pytest -m "not suite"`` leaves it out)."""

from __future__ import annotations

import json

import pytest

from simulator.suite_runs import load_manifest
from simulator.validation_suite import SuiteName, suite_cases
from trainplan.__main__ import main


@pytest.mark.multiproc
@pytest.mark.suite
def test_quick_suite_calibrates_runs_validates_and_reports(tmp_path, capsys):
    runs, out = tmp_path / "runs", tmp_path / "report.md"
    # --retries 0: a noisy CI machine would run every case up to three times (retries: tests/test_suite_retries.py)
    assert main(["validate", "--suite", "quick", "--calibrate", "--nproc", "3", "--retries", "0", "--runs", str(runs),
                 "--out", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    quick = suite_cases(SuiteName.QUICK)
    failed = [(r["case"], r["error"]) for r in d["rows"] if not r["ok"]]
    assert not failed and d["cases_completed"] == len(quick)
    assert isinstance(d["step_time_mape"], float) and d["step_time_mape"] > 0
    assert set(d["family_step_time_mape"]) == {c.family.value for c in quick}
    assert d["cluster"] == "localhost-cpu-calibrated" and "network calibrated now" in d["cluster_notes"][0]
    for r in d["rows"]:
        assert r["measured_s"] > 0 and r["p10_s"] <= r["measured_s"] <= r["p90_s"] and r["analytical_s"] > 0
        assert 0 <= r["foreign_cpu_fraction"] <= 1 and r["load_1m"] >= 0
        assert r["model_state_error"] is not None
        assert r["speed_before_s"] > 0 and r["speed_after_s"] > 0 and r["speed_drift"] >= 0  # the speed probe ran
    manifest = load_manifest(runs)
    assert manifest.cluster == "cluster.yaml" and (runs / "cluster.yaml").exists()
    assert d["hygiene"] in ("quiet", "noisy") and d["verdict"] in out.read_text()
    assert manifest.speed_reference_s == d["speed_reference_s"] > 0
    # the reference is the median of two readings before the calibration and three after it (docs: bias21)
    assert len(manifest.speed_reference_readings_s) == 5
    assert manifest.speed_reference_s == sorted(manifest.speed_reference_readings_s)[2]
    # the folder alone reproduces the report's figures (no run, the calibrated cluster found inside it)
    assert main(["validate", "--suite", "quick", "--runs", str(runs), "--no-run", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["step_time_mape"] == d["step_time_mape"] and again["cluster"] == d["cluster"]
