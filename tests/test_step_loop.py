"""The training loop's own host time per step (simulator/step_loop.py): ``host.step_loop_us`` and
``host.first_microbatch_cold_us`` read from a cluster file, charged once per step in both engines, refused when
negative, absent from every preset, localhost-cpu included; the retired ``host.step_after_save_us`` of older files
read and ignored (cal19: the executor no longer rewrites the results file between steps).

Hand-worked: the recorded quick suite's ddp-overlap case (2 processes on localhost-cpu's 2 cores: share 1) on
localhost-cpu with 300 + 150 µs gets exactly 450 µs more step time in the closed form and in the DES."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from recorded_step import recorded_step, with_host
from simulator.cluster.io import cluster_to_dict, load_cluster, save_cluster
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.spec import KernelDispatch
from simulator.errors import SpecError, SpecNote
from simulator.run_results import load_results
from simulator.step_loop import step_loop_s
from simulator.validate import run_cluster

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "tests" / "data" / "suite_quick"


def _with_loop(cluster, loop_us: float, cold_us: float):
    return with_host(cluster, step_loop_us=loop_us, first_microbatch_cold_us=cold_us)


def _step(case: str, cluster):
    work, _, analytical, des = recorded_step(case, cluster)
    return work, analytical, des


def _base(case: str = "ddp-overlap"):
    return run_cluster(load_results(RUNS / f"{case}.results.json"), "localhost-cpu")


def test_terms_read_from_the_file_and_written_back(tmp_path):
    d = cluster_to_dict(_base())
    d["host"].update(step_loop_us=300.0, first_microbatch_cold_us=150.0)
    cluster = cluster_from_dict(d)
    h = cluster.node.host
    assert (h.step_loop_us, h.first_microbatch_cold_us) == (300.0, 150.0)
    again = load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml")))
    assert again.node.host == cluster.node.host


@pytest.mark.parametrize("case", ["ddp-overlap", "pp-1f1b"])
def test_each_step_grows_by_exactly_the_two_terms_in_both_engines(case):
    """share 1 (2 processes, 2 cores): 300 + 150 µs = 450 µs per step, once, whatever the micro-batch count."""
    base = _base(case)
    bare, analytical0, des0 = _step(case, base)
    work, analytical1, des1 = _step(case, _with_loop(base, 300.0, 150.0))
    assert work.micro_batches > 1
    assert work.stages[0].optimizer_s == pytest.approx(bare.stages[0].optimizer_s + 450e-6, rel=1e-12)
    assert analytical1 - analytical0 == pytest.approx(450e-6, rel=1e-6)
    assert des1 - des0 == pytest.approx(450e-6, rel=1e-6)


@pytest.mark.parametrize("case", ["ddp-overlap", "pp-1f1b"])
def test_an_older_file_with_the_retired_rewrite_term_loads_and_charges_nothing_for_it(case, tmp_path):
    """Cluster files calibrated before cal19 state ``host.step_after_save_us`` (the step after the executor's
    between-step results rewrite, which it no longer does): they load, and the value moves no estimate."""
    d = cluster_to_dict(_with_loop(_base(case), 300.0, 150.0))
    plain = cluster_from_dict(d)
    d["host"]["step_after_save_us"] = 420.0
    with pytest.warns(SpecNote, match=r"host\.step_after_save_us: retired .* ignored"):
        older = cluster_from_dict(d)
    assert older == plain and step_loop_s(older) == pytest.approx(450e-6, rel=1e-12)
    assert _step(case, older)[1:] == _step(case, plain)[1:]
    assert "step_after_save_us" not in cluster_to_dict(older)["host"]  # not written back


def test_the_cli_says_once_that_a_retired_key_is_ignored(tmp_path):
    """A user with an older file is told in one line (not a traceback, not silence), and the command runs."""
    d = cluster_to_dict(_base())
    d["host"]["step_after_save_us"] = 420.0
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "trainplan", "cluster", "show", str(path)], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr
    notes = [ln for ln in out.stderr.splitlines() if ln.startswith("trainplan: note: host.step_after_save_us")]
    assert len(notes) == 1 and "Traceback" not in out.stderr


def test_time_sharing_scales_the_term():
    """4 processes on 2 cores: share 2, so 2 × (100 + 50) µs."""
    cluster = _with_loop(_base(), 100.0, 50.0)
    assert step_loop_s(cluster, share=2.0) == pytest.approx(300e-6, rel=1e-12)


def test_async_device_and_presets_charge_nothing():
    cluster = _with_loop(_base(), 300.0, 150.0)
    gpu_like = dataclasses.replace(cluster, device=dataclasses.replace(cluster.device,
                                                                       kernel_dispatch=KernelDispatch.ASYNC))
    assert step_loop_s(gpu_like) == 0.0
    for name in ("dgx-h100", "dgx-a100", "dgx-b200", "dgx-v100", "hgx-h200", "h100-roce", "pcie-a100", "pcie-l40s",
                 "localhost-cpu"):
        host = load_cluster(name).node.host
        assert host is None or (host.step_loop_us, host.first_microbatch_cold_us) == (0.0, 0.0), name


@pytest.mark.parametrize("field", ["step_loop_us", "first_microbatch_cold_us"])
def test_negative_value_is_refused_by_name(field):
    d = cluster_to_dict(_base())
    d["host"][field] = -1
    with pytest.raises(SpecError, match=field):
        cluster_from_dict(d)


def test_bad_value_exits_2_with_one_line(tmp_path):
    d = cluster_to_dict(_base())
    d["host"]["step_loop_us"] = -5
    path = tmp_path / "bad.yaml"
    import yaml

    path.write_text(yaml.safe_dump(d))
    out = subprocess.run([sys.executable, "-m", "trainplan", "validate", str(RUNS / "ddp-overlap.results.json"),
                          "--cluster", str(path)], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "step_loop_us" in lines[0] and "Traceback" not in out.stderr
