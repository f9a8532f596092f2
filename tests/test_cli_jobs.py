"""``trainplan simulate --jobs``: the example prints its saved output (also shown in docs/engine.md), and every
bad jobs file or flag is one line naming the key, exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import simulator.engine.jobs  # noqa: F401  (the end-to-end tests need the engine: fail, never skip)
from simulator.cluster.placement import PlacementPolicy
from simulator.errors import SpecError
from simulator.jobs_file import jobs_from_dict
from trainplan.__main__ import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "jobs.yaml")


@pytest.mark.parametrize("policy", ["packed", "scattered"])
def test_the_example_prints_its_saved_output(policy, capsys):
    argv = ["simulate", "--jobs", EXAMPLE] + (["--job-placement", policy] if policy != "packed" else [])
    assert main(argv) == 0
    out = capsys.readouterr().out
    saved = (ROOT / "examples" / f"jobs.{policy}.txt").read_text()
    assert out == saved
    assert saved in (ROOT / "docs" / "engine.md").read_text()


def test_json_output(capsys):
    assert main(["simulate", "--jobs", EXAMPLE, "--job-placement", "scattered", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["placement"] == "scattered" and [j["nodes"] for j in out["jobs"]] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert out["jobs"][0]["slowdown"] > 1 and set(out["jobs"][0]["link_time_by_tier"]) == {"intra_node", "nic", "spine"}  # torch tp's logits all-gather (NVLink)


def _file(tmp_path, text: str) -> str:
    p = tmp_path / "jobs.yaml"
    p.write_text(text)
    return str(p)


GOOD = """cluster: dgx-h100
nodes: 4
jobs:
  - {name: a, model: gpt3-125m, nodes: 2, global_batch: 16, tp: 8}
  - {name: b, model: gpt3-125m, nodes: 2, global_batch: 16, tp: 8}
"""


@pytest.mark.parametrize("text, field", [
    (GOOD.replace("nodes: 4\n", "nodes: 4\nnodez: 1\n"), "--jobs"),
    (GOOD.replace("tp: 8}\n", "tpp: 8}\n", 1), "jobs[0].tpp"),
    (GOOD.replace("model: gpt3-125m, nodes: 2, global", "nodes: 2, global", 1), "jobs[0].model"),
    (GOOD.replace("model: gpt3-125m", "model: gpt9", 1), "jobs[0].model"),
    (GOOD.replace("nodes: 2, global", "nodes: [0, 1], global", 1), "jobs[].nodes"),
    (GOOD.replace("nodes: 2, global", "nodes: [0, 0], global", 1), "jobs[0].nodes"),
    (GOOD.replace("nodes: 2, global", "nodes: 3, global", 1), "nodes"),
    (GOOD.replace("nodes: 4\n", "nodes: 4\nnetwork: {oversubscription: 0.5}\n"),
     "network.oversubscription"),
    (GOOD.replace("nodes: 4\n", "nodes: 4\nnetwork: {leaf_uplinks: shared, nodes_per_leaf: 0}\n"),
     "network.leaf_uplinks"),
    (GOOD.replace("nodes: 4\n", "nodes: 4\njob_placement: spread\n"), "job_placement"),
    (GOOD.replace("tp: 8}\n", "tp: 16}\n", 1), "jobs[0].tp"),
    ("jobs: []\ncluster: dgx-h100\n", "jobs"),
    ("cluster: dgx-h100\njobs: [3]\n", "jobs[0]"),
])
def test_bad_jobs_files_name_the_key(text, field, tmp_path, capsys):
    path = _file(tmp_path, text)
    assert main(["simulate", "--jobs", path]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"--jobs: {path}: {field}:" in err if field != "--jobs" else "unknown key 'nodez'" in err


@pytest.mark.parametrize("argv, flag", [
    (["--model", "gpt3-125m"], "--model"),
    (["--tp", "2"], "--tp"),
    (["--engine", "analytical"], "--engine"),
    (["--trace", "t.json"], "--trace"),
])
def test_flags_that_the_jobs_file_replaces_are_refused(argv, flag, tmp_path, capsys):
    assert main(["simulate", "--jobs", _file(tmp_path, GOOD), *argv]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_job_placement_needs_jobs(capsys):
    assert main(["simulate", "--model", "gpt3-125m", "--gpus", "8", "--gbs", "8", "--job-placement", "packed"]) == 2
    assert "--job-placement" in capsys.readouterr().err


def test_listed_nodes_and_relative_paths(tmp_path):
    (tmp_path / "m.json").write_text((ROOT / "examples" / "llama-2-7b.config.json").read_text())
    data = {"cluster": "dgx-h100", "nodes": 4,
            "jobs": [{"name": "a", "model": "m.json", "nodes": [3, 1], "global_batch": 16, "tp": 8}]}
    spec = jobs_from_dict(data, tmp_path)
    assert spec.placement is None and spec.jobs[0].nodes == (3, 1) and spec.jobs[0].workload.layers == 32
    with pytest.raises(SpecError, match="--job-placement"):
        jobs_from_dict(data, tmp_path, PlacementPolicy.PACKED)
