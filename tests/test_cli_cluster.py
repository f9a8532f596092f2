"""``trainplan cluster list|show``: output, --json, --nodes, and one-line errors with exit code 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cluster.presets import preset_names
from trainplan.__main__ import main

ROOT = Path(__file__).resolve().parents[1]

MINIMAL_YAML = (Path(__file__).parent / "data" / "minimal_cluster.yaml").read_text()
"""The issue's minimal cluster file, verbatim (it must load)."""


def run_cli(*args):
    """``python -m trainplan ...`` from the worktree root, as a user would run it."""
    return subprocess.run([sys.executable, "-m", "trainplan", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_list_shows_every_preset_with_a_description(capsys):
    assert main(["cluster", "list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == preset_names()
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_list_json(capsys):
    assert main(["cluster", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == preset_names()
    assert "PLACEHOLDER" in next(r["description"] for r in rows if r["name"] == "localhost-cpu")


def test_show_preset_with_nodes(capsys):
    assert main(["cluster", "show", "dgx-h100", "--nodes", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 nodes × 8 GPUs = world size 32" in out
    assert "450 GB/s per GPU per direction × 0.82 = 369 GB/s achievable" in out  # 450 × 0.82
    assert "8 NICs per node" in out and "nccl" in out and "[src: nccl-tuning, nccl-topo]" in out


def test_show_localhost_says_placeholders(capsys):
    assert main(["cluster", "show", "localhost-cpu"]) == 0
    out = capsys.readouterr().out
    assert "PLACEHOLDER" in out and "trainplan calibrate" in out and "gloo" in out


def test_show_file_json(tmp_path, capsys):
    path = tmp_path / "mine.yaml"
    path.write_text(MINIMAL_YAML)
    assert main(["cluster", "show", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["world_size"] == 32 and d["comm"]["library"] == "ideal"
    assert d["intra_node"]["achievable_GBps"] == 450 and d["inter_node"]["nics_per_node"] == 8


@pytest.mark.parametrize("args, message", [
    (["cluster", "show", "dgx-h10"], "unknown preset 'dgx-h10'; known: dgx-a100"),
    (["cluster", "show", "dgx-h100", "--nodes", "0"], "nodes: must be a positive integer, got 0"),
    (["cluster", "show", "localhost-cpu", "--nodes", "2"], "inter_node: a cluster of 2 nodes needs"),
    (["cluster", "show", "no/such/file.yaml"], "no/such/file.yaml: no such file"),
])
def test_bad_input_in_process_is_one_line_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("trainplan cluster: error: ")


def test_bad_file_in_process(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(MINIMAL_YAML.replace("bw_GBps: 450", "bw_GBps: -3"))
    assert main(["cluster", "show", str(path)]) == 2
    assert "intra_node.bw_GBps: must be a positive number, got -3" in capsys.readouterr().err


def test_subprocess_success_and_errors(tmp_path):
    ok = run_cli("cluster", "show", "dgx-a100", "--nodes", "2")
    assert ok.returncode == 0 and "world size 16" in ok.stdout and ok.stderr == ""
    for args in (["cluster", "show", "dgx-h10"],          # unknown preset (SpecError)
                 ["cluster", "show", "dgx-a100", "--nodes", "abc"],  # argparse
                 ["cluster"]):                            # missing subcommand
        bad = run_cli(*args)
        assert bad.returncode == 2, args
        assert bad.stdout == "" and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr, args


@pytest.mark.parametrize("name", preset_names())
def test_export_loads_back_as_the_same_cluster(name, tmp_path, capsys):
    """`cluster export` is an editable copy of a preset (issue 15 §5): it loads back equal, nodes included,
    from --out and from standard output alike."""
    from simulator.cluster.io import load_cluster

    nodes = ["--nodes", "3"] if load_cluster(name).network is not None else []  # localhost-cpu is one machine
    out = tmp_path / f"{name}.yaml"
    assert main(["cluster", "export", name, *nodes, "--out", str(out)]) == 0
    assert load_cluster(str(out)) == load_cluster(name, nodes=3 if nodes else None)
    capsys.readouterr()
    assert main(["cluster", "export", name]) == 0
    piped = tmp_path / "piped.yaml"
    piped.write_text(capsys.readouterr().out)
    assert load_cluster(str(piped)) == load_cluster(name)


@pytest.mark.parametrize("out, needle", [("x.txt", "--out"), ("/nonexistent/dir/x.yaml", "--out")])
def test_export_output_is_checked_first(out, needle, capsys):
    assert main(["cluster", "export", "dgx-h100", "--out", out]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
