"""Sweeps over GPU counts and clusters (issue 8 §2): one row per point built from ``planner.plan``,
the scaling efficiency, time and cost to train, the figure, and ``trainplan plan``'s sweep mode."""

from __future__ import annotations

import json

import pytest

import planner
from planner.plot import sweep_figure
from planner.sweep import fastest, rows_as_dicts, sweep
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.plan_file import load_plan
from simulator.strategy import ZeroStage
from simulator.strategy.flat import FLAT
from simulator.workload import get_preset
from trainplan.__main__ import main

MODEL = get_preset("gpt3-125m").with_seq(512)
CLUSTERS = [load_cluster("dgx-h100"), load_cluster("dgx-a100")]
PINS = {"zero": (ZeroStage.ZERO1,), "recompute": (FLAT["recompute"].decl.parse("none"),)}
"""Pins that keep each search small (a few dozen candidates)."""
TOKENS, PRICE = 1e9, 2.5


@pytest.fixture(scope="module")
def frame():
    return sweep(MODEL, CLUSTERS, [16, 8], 32, tokens=TOKENS, price_per_gpu_hour=PRICE, refine=0, pins=PINS)


def test_one_row_per_point_in_order(frame):
    assert list(zip(frame["cluster"], frame["gpus"], frame["nodes"])) == [
        ("dgx-h100", 8, 1), ("dgx-h100", 16, 2), ("dgx-a100", 8, 1), ("dgx-a100", 16, 2)]
    assert frame["reason"].isna().all() and frame["strategy"].str.contains("ZeRO-1").all()


def test_each_row_is_the_best_plan_of_its_point(frame):
    row = frame.iloc[1]
    alone = planner.plan(MODEL, CLUSTERS[0].with_nodes(2), gpus=16, global_batch=32, refine=0, pins=PINS)
    assert row["step_time_s"] == pytest.approx(alone.best.estimates[0].step_time_s, rel=1e-12)
    assert row["plan"].strategy == alone.best.strategy


def test_derived_columns(frame):
    # tokens per step = 32 sequences x 512 tokens; every column follows from tokens/s
    for _, r in frame.iterrows():
        assert r["tokens_per_s"] == pytest.approx(32 * 512 / r["step_time_s"], rel=1e-12)
        assert r["tokens_per_s_per_gpu"] == pytest.approx(r["tokens_per_s"] / r["gpus"], rel=1e-12)
        assert r["time_to_train_s"] == pytest.approx(TOKENS / r["tokens_per_s"], rel=1e-12)
        assert r["gpu_hours"] == pytest.approx(r["time_to_train_s"] * r["gpus"] / 3600, rel=1e-12)
        assert r["cost"] == pytest.approx(r["gpu_hours"] * PRICE, rel=1e-12)
    for name in ("dgx-h100", "dgx-a100"):
        small, big = frame[frame["cluster"] == name].itertuples()
        assert small.scaling_efficiency == 1.0
        assert big.scaling_efficiency == pytest.approx(big.tokens_per_s_per_gpu / small.tokens_per_s_per_gpu, rel=1e-12)
        # a 125M model on 16 GPUs is communication-bound: per-GPU throughput drops
        assert 0 < big.scaling_efficiency < 1
    assert fastest(frame)["tokens_per_s"] == frame["tokens_per_s"].max()


def test_nothing_fits_keeps_the_row_with_its_reason():
    out = sweep(MODEL, CLUSTERS[:1], [8], 32, refine=0, pins=PINS | {"tp": (3,)})
    assert len(out) == 1 and "pins leave none" in out["reason"][0] and out["step_time_s"].isna().all()
    assert fastest(out) is None and rows_as_dicts(out)[0]["mfu"] is None


def test_gpu_count_not_whole_nodes_names_gpus():
    with pytest.raises(SpecError) as err:
        sweep(MODEL, CLUSTERS, [8, 12], 32, refine=0, pins=PINS)
    assert err.value.field == "gpus" and "12" in err.value.problem


def test_figure_has_one_line_per_cluster(frame):
    fig = sweep_figure(frame)
    left, right = fig.axes
    assert [line.get_label() for line in left.get_lines()] == ["dgx-h100", "dgx-a100"]
    assert "time to train" in left.get_ylabel() and right.get_ylabel() == "cost to train"
    assert left.get_xscale() == "log"


def test_cli_sweep_json_plot_out(tmp_path, capsys):
    png, out = tmp_path / "sweep.png", tmp_path / "plan.json"
    argv = ["plan", "--model", "gpt3-125m", "--seq", "512", "--cluster", "dgx-h100,dgx-a100", "--gpus", "8",
            "--gbs", "32", "--zero", "1", "--recompute", "none", "--refine", "0", "--quiet", "--json",
            "--plot", str(png), "--out", str(out)]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["cluster"], r["gpus"]) for r in rows] == [("dgx-h100", 8), ("dgx-a100", 8)]
    assert all(r["scaling_efficiency"] == 1.0 for r in rows)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    h100 = rows[0]  # H100 is faster than A100 on the same layout: its plan is the one written
    assert h100["tokens_per_s"] > rows[1]["tokens_per_s"]
    assert load_plan(out).cluster.name == "dgx-h100" and load_plan(out).gpus == 8


@pytest.mark.parametrize("extra, needle", [
    (["--gpus", "8..7"], "--gpus: a range G1..G2 runs over powers of two; 7 is not one"),
    (["--gpus", "8,12"], "--gpus: 12 is not a whole number of 8-GPU"),
    (["--gpus", "8..24"], "--gpus: a range G1..G2 runs over powers of two; 24 is not one"),
    (["--gpus", "8,16", "--nodes", "2"], "--nodes sizes one cluster"),
    (["--gpus", "8", "--plot", "x.png"], "--plot draws a sweep"),
    (["--gpus", "8,16", "--plot", "x.txt"], "--plot: 'x.txt' must end in .png")])
def test_cli_bad_sweep_is_one_line(capsys, extra, needle):
    argv = ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gbs", "16", "--quiet", "--refine", "0"]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
