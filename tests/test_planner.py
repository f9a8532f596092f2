"""The planner: only plans that fit, pins honoured, the vectorised ranking equal to the scalar
estimate, determinism, the DES refinement, and ``trainplan plan``'s outputs and exit codes."""

from __future__ import annotations

import json

import pytest

import planner
from argv import merged
from planner.space import Problem, default_axes, degrees, enumerate_keys, pin
from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.plan_file import load_plan
from simulator.schedules import ScheduleKind
from simulator.strategy import ZeroStage
from simulator.workload import get_preset
from trainplan.__main__ import main

MODEL = get_preset("gpt3-125m").with_seq(512)
CLUSTER = load_cluster("dgx-h100")


@pytest.fixture(scope="module")
def result():
    return planner.plan(MODEL, CLUSTER, gpus=8, global_batch=16, refine=3,
                        pins={"zero": (ZeroStage.ZERO0, ZeroStage.ZERO1, ZeroStage.ZERO3)})


def test_degrees_factorise_the_gpus_within_a_node():
    """8 GPUs, 12 heads, 12 layers: tp ∈ {1, 2, 4} (8 does not divide 12 heads), pp | 8/tp."""
    p = Problem(gpus=8, global_batch=16, gpus_per_node=8, layers=12, check_tp=MODEL.check_tp)
    assert sorted(degrees(p)) == sorted([(8, 1, 1), (4, 1, 2), (2, 1, 4), (1, 1, 8), (4, 2, 1), (2, 2, 2),
                                         (1, 2, 4), (2, 4, 1), (1, 4, 2)])
    four = Problem(gpus=8, global_batch=16, gpus_per_node=2, layers=12, check_tp=MODEL.check_tp)
    assert max(tp for _, tp, _ in degrees(four)) == 2  # tp stays inside a 2-GPU node


def test_pins_restrict_the_space():
    p = Problem(gpus=8, global_batch=16, gpus_per_node=8, layers=12, check_tp=MODEL.check_tp)
    keys = list(enumerate_keys(p, pin(default_axes(p), {"tp": (2,), "schedule": (ScheduleKind.GPIPE,)})))
    assert keys and all(k["tp"] == 2 for k in keys)
    assert all(k.get("schedule", ScheduleKind.GPIPE) is ScheduleKind.GPIPE for k in keys)
    assert not any(k.get("sequence_parallel") is None and k["tp"] > 1 for k in keys)


def test_only_plans_that_fit_and_the_best_first(result):
    frame = result.frame
    assert len(frame) == result.counts.ranked > 0
    assert (frame["memory_bytes"] <= CLUSTER.device.memory_bytes).all()
    assert set(frame["strategy"].map(lambda s: s.zero)) <= {ZeroStage.ZERO0, ZeroStage.ZERO1, ZeroStage.ZERO3}
    refined = frame.head(result.counts.refined)
    assert refined["step_time_s"].is_monotonic_increasing
    assert (refined["step_time_s"] == refined["des_step_time_s"]).all()
    rest = frame.iloc[result.counts.refined:]
    assert rest["step_time_s"].is_monotonic_increasing
    assert result.best.strategy == frame["strategy"][0]


def test_ranking_equals_the_scalar_estimate(result):
    rest = result.frame.iloc[result.counts.refined:]
    for _, row in rest.iloc[:: max(1, len(rest) // 6)].iterrows():
        assert row["step_time_s"] == pytest.approx(estimate(CLUSTER, MODEL, row["strategy"]).step_time_s, rel=1e-9)


def test_counts_add_up(result):
    c = result.counts.to_dict()
    assert c["enumerated"] == c["invalid"] + c["infeasible"] + c["ranked"]


def test_same_inputs_same_ranking(result):
    again = planner.plan(MODEL, CLUSTER, gpus=8, global_batch=16, refine=3,
                         pins={"zero": (ZeroStage.ZERO0, ZeroStage.ZERO1, ZeroStage.ZERO3)})
    assert list(again.frame["strategy"]) == list(result.frame["strategy"])


def test_explain_names_the_families(result):
    from planner.explain import explain

    lines = explain(result.frame)
    assert lines[0].startswith("Best: ") and "runner-up" in lines[1]
    assert any("pipeline heavy" in line for line in lines)


def test_cli_json_out_and_simulate_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    argv = ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16", "--seq", "512",
            "--tp", "1,2", "--zero", "1", "--refine", "0", "--json", "--quiet", "--out", str(out), "--csv",
            str(tmp_path / "all.csv")]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"candidates", "best", "top"}
    best = data["best"]
    assert best["strategy"]["tp"] in (1, 2) and best["strategy"]["zero"] == 1 and best["memory"]["total_bytes"] > 0
    assert {"dp", "tp", "pp", "zero", "offload", "micro_batch", "schedule", "recompute"} <= set(best["strategy"])
    plan = load_plan(out)
    assert plan.estimates[0].step_time_s == pytest.approx(best["step_time_s"], rel=1e-12)
    assert main(["simulate", "--plan", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-12)
    assert (tmp_path / "all.csv").read_text().count("\n") == data["candidates"]["ranked"] + 1


def test_cli_nothing_fits_exits_1(capsys):
    assert main(["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus", "8", "--gbs", "8", "--zero", "0",
                 "--refine", "0", "--quiet"]) == 1
    assert capsys.readouterr().out.startswith("nothing fits")


@pytest.mark.parametrize("extra, needle", [(["--tp", "3"], "pins leave no candidate"),
                                           (["--zero", "7"], "--zero: unknown ZeRO stage '7'"),
                                           (["--gpus", "12"], "--gpus: 12 is not a whole number of 8-GPU"),
                                           (["--out", "/nonexistent/x.json"],
                                            "--out: folder '/nonexistent' does not exist")])
def test_cli_bad_input_is_one_line(capsys, extra, needle):
    argv = ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16", "--quiet",
            "--refine", "0"]
    assert main(merged(argv, extra)) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_analytical_top1_is_the_exhaustive_des_best_on_a_small_space():
    """Every candidate of a small space simulated by the DES: the closed form's first choice is the
    DES's (benchmarks/plan_quality.py reports larger spaces; docs/planner.md)."""
    import numpy as np

    from planner.refine import des_step
    from simulator.strategy import Recompute

    pins = {"zero": (ZeroStage.ZERO1,), "recompute": (Recompute.NONE,), "micro_batch": (1, 2),
            "schedule": (ScheduleKind.ONE_F_ONE_B,)}
    ranked = planner.plan(MODEL, CLUSTER, gpus=8, global_batch=16, pins=pins, refine=0).frame
    des = np.array([des_step(CLUSTER, MODEL, s).step_time_s for s in ranked["strategy"]])
    assert len(des) >= 10 and int(np.argmin(des)) == 0


def test_memory_shared_across_the_search_equals_a_fresh_report():
    """The planner's memory cache (batch capped where in-flight micro-batches stop growing) gives the most
    loaded rank and reasons memory_report gives on the full layout, interleaved with v = 1 included (counted
    as the 1F1B it is)."""
    from planner.search import _memory
    from simulator.memory import memory_report
    from simulator.strategy import Strategy, build_layout

    cache, states = {}, {}
    for schedule, v in ((ScheduleKind.INTERLEAVED, 1), (ScheduleKind.INTERLEAVED, 2), (ScheduleKind.ONE_F_ONE_B, 1),
                        (ScheduleKind.GPIPE, 1)):
        s = Strategy(global_batch=64, dp=2, pp=4, schedule=schedule, virtual_stages=v, zero=ZeroStage.ZERO1)
        fresh = memory_report(MODEL, CLUSTER, build_layout(s, CLUSTER, MODEL))
        shared = _memory(cache, states, MODEL, CLUSTER, s)
        assert (shared.total_bytes, shared.stage, shared.reasons) == (fresh.worst.total_bytes, fresh.worst.stage,
                                                                      fresh.reasons), (schedule, v)


@pytest.mark.parametrize("pins, key", [({"recompute": (planner.space.Recompute.SELECTIVE,)}, "recompute"),
                                       ({"virtual_stages": (4,), "schedule": (ScheduleKind.ONE_F_ONE_B,)},
                                        "virtual_stages")])
def test_a_pin_that_reaches_no_candidate_is_an_error(pins, key):
    from simulator.errors import SpecError

    with pytest.raises(SpecError) as err:
        planner.plan(MODEL, CLUSTER, gpus=8, global_batch=16, pins=pins, refine=0)
    assert err.value.field == key and "applies to no candidate" in err.value.problem


@pytest.mark.parametrize("extra, needle", [
    (["--reserve-gb", "nan"], "--reserve-gb: must be a finite number >= 0"),  # NaN once let every plan fit
    (["--refine=-3"], "--refine: must be a finite number >= 0"),
    (["--tokens", "nan"], "--tokens: must be a finite positive number"),
    (["--price-per-gpu-hour", "3"], "--price-per-gpu-hour: prices the GPU-hours to train --tokens")])
def test_cli_search_numbers_are_checked(capsys, extra, needle):
    assert main(["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16", "--quiet",
                 *extra]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("extra, needle", [(["--tp", "0"], "--tp: must be a positive integer, got 0"),
                                           (["--tp", "1,0"], "--tp: must be a positive integer, got 0"),
                                           (["--max-pp", "0"], "--max-pp: must be a positive integer, got 0")])
def test_cli_pins_pass_their_fields_own_checks(capsys, extra, needle):
    """--tp 0 said "the pins leave no candidate (tp)" (issue 15 review): a value no strategy can hold is
    refused by the field's own check, naming the flag."""
    assert main(["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16", "--quiet",
                 *extra]) == 2
    assert needle in capsys.readouterr().err
