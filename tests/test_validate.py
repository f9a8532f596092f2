"""``trainplan validate`` (simulator/validate.py): estimated vs measured for a results file.

Results files are built here with the simulator's own writer (``Results.save``) and hand-chosen
measurements, so every error is checked against a number worked out below; one ``multiproc`` test
runs the real chain plan -> execute -> validate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simulator.cluster.io import cluster_to_dict, load_cluster
from simulator.plan_file import Plan
from simulator.plan_scale import Scale, scale_plan
from simulator.results import Category, Engine, StepResult
from simulator.run_results import PeakMemoryKind, RankResult, Results, RunInfo, RunStatus
from simulator.strategy.flat import strategy_from_flat
from simulator.validate import compare, estimate_run
from simulator.validate_report import format_validation, validation_figure
from simulator.workload import get_preset
from trainplan.__main__ import main

# gpt3-125m at --scale tiny (simulator/plan_scale.py): hidden 32, ffn 128, vocab 128, seq 16 (learned
# positions), 2 layers, tied embedding. Per layer: ln1 64 + qkv 32·96+96 + proj 32·32+32 + ln2 64
# + fc1 32·128+128 + fc2 128·32+32 = 12,704; embeddings 128·32 + 16·32 = 4,608; final ln 64.
TINY_PARAMS = 2 * 12_704 + 4_608 + 64  # 30,080
TINY_TENSORS = 2 * 12 + 2 + 2  # 12 per layer, wte, wpe, final ln weight and bias: 28
# fp32 Adam, ZeRO-0 (every rank holds everything): 4 (params) + 4 (grads) + 8 (moments) bytes per
# parameter (Rajbhandari et al. SC'20, "ZeRO", §3.1) and one fp32 step counter per tensor (torch.optim.Adam).
TINY_STATES_BYTES = TINY_PARAMS * 16 + TINY_TENSORS * 4  # 481,392

# Slowest rank per step after one warm-up step: 0.012, 0.020, 0.040 s -> median 0.020; numpy's linear
# percentiles: p10 = 0.012 + 0.2·0.008 = 0.0136, p90 = 0.020 + 0.8·0.020 = 0.036.
STEPS = ((5.0, 0.010, 0.020, 0.030), (5.0, 0.012, 0.018, 0.040))
FORWARD = ((1.0, 0.004, 0.004, 0.004), (1.0, 0.003, 0.005, 0.002))  # slowest: 0.004, 0.005, 0.004 -> 0.004


def _results(*, states_bytes: int = TINY_STATES_BYTES, precision: str = "fp32", steps=STEPS, warmup: int = 1,
             status=RunStatus.COMPLETE, backend: str = "gloo") -> Results:
    plan = Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=2,
                strategy=strategy_from_flat({"global_batch": 4, "micro_batch": 1, "dp": 2}))
    run = scale_plan(plan, Scale.parse("tiny"), 2)
    states = {"params_bytes": TINY_PARAMS * 4, "grads_bytes": TINY_PARAMS * 4,
              "optimizer_bytes": states_bytes - TINY_PARAMS * 8,
              "buffers_bytes": 999, "host_bytes": 0}  # buffers are not model states: left out of the total
    ranks = tuple(RankResult(rank=r, step_time_s=steps[r], loss=tuple(4.0 for _ in steps[r]),
                             phases_s={"forward": FORWARD[r][:len(steps[r])]}, model_state_bytes=states,
                             peak_memory_bytes=300 * 2**20 + r, peak_memory_kind=PeakMemoryKind.CPU_MAX_RSS)
                  for r in range(2))
    info = RunInfo(plan=run.run, scale="tiny", notes=run.notes, family="data-parallel", precision=precision,
                   steps=max(len(s) for s in steps), warmup=warmup, seed=0)
    env = {"backend": backend, "device": "cpu" if backend == "gloo" else "cuda"}
    return Results(status=status, plan=plan, run=info, environment=env, ranks=ranks)


def _write(tmp_path: Path, results: Results | None = None, name: str = "r.json") -> str:
    return str((results or _results()).save(tmp_path / name))


def _json(argv, capsys) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _step(engine: Engine, step_time_s: float, **breakdown) -> StepResult:
    return StepResult(engine=engine, step_time_s=step_time_s, tokens_per_step=64, model_flops_per_step=1.0,
                      hardware_flops_per_step=1.0, world_size=2, peak_flops_per_gpu=1.0,
                      breakdown={Category(k): v for k, v in breakdown.items()})


def test_compare_signed_errors_by_hand():
    """Estimates chosen by hand: 0.030 s over a 0.020 s median is +50 %, 0.015 s is -25 %; forward
    0.003 s over 0.004 s is -25 %, 0.006 s is +50 %."""
    v = compare(_results(), _step(Engine.ANALYTICAL, 0.030, forward=0.003),
                _step(Engine.DES, 0.015, forward=0.006), "hand")
    step = v.row("step_time_s")
    assert (step.measured, step.p10, step.p90) == pytest.approx((0.020, 0.0136, 0.036))
    assert step.error_analytical == pytest.approx(0.5) and step.error_des == pytest.approx(-0.25)
    forward = v.row("forward")
    assert forward.measured == pytest.approx(0.004)
    assert forward.error_analytical == pytest.approx(-0.25) and forward.error_des == pytest.approx(0.5)
    assert v.step_time_error == pytest.approx(0.5)
    # step less forward per rank and step (after the warm-up step): rank 0 .006 .016 .026, rank 1 .009
    # .013 .038; slowest .009 .016 .038 -> median .016. Estimates: 0.030 - 0.003, 0.015 - 0.006.
    outside = v.row("outside_phases")
    assert outside.measured == pytest.approx(0.016) and (outside.p10, outside.p90) == pytest.approx((0.0104, 0.0336))
    assert (outside.analytical, outside.des) == pytest.approx((0.027, 0.009))
    text = format_validation(v)
    assert "+50.00%" in text and "-25.00%" in text and "20.000 ms" in text and "13.600 ms-36.000 ms" in text


def test_cli_json_rows_against_hand_values(tmp_path, capsys):
    """Model states: the measured total is set to 1.25 × the hand-worked 481,392 B, so the error is
    1/1.25 - 1 = -0.2 exactly; the step-time error is the engine's own estimate over the 0.020 s median."""
    measured = TINY_STATES_BYTES * 5 // 4
    path = _write(tmp_path, _results(states_bytes=measured))
    out = _json(["validate", path, "--cluster", "localhost-cpu"], capsys)
    rows = {r["name"]: r for r in out["rows"]}
    assert set(rows) == {"step_time_s", "forward", "outside_phases", "model_state_bytes", "peak_memory_bytes"}
    assert rows["model_state_bytes"]["measured"] == measured
    assert rows["model_state_bytes"]["analytical"] == TINY_STATES_BYTES
    assert out["memory_error"] == pytest.approx(-0.2, abs=1e-12)
    analytical, des = estimate_run(_results(), load_cluster("localhost-cpu"))
    assert rows["step_time_s"]["measured"] == pytest.approx(0.020)
    assert out["step_time_error"] == pytest.approx(analytical.step_time_s / 0.020 - 1, rel=1e-12)
    assert rows["step_time_s"]["error_des"] == pytest.approx(des.step_time_s / 0.020 - 1, rel=1e-12)
    assert rows["peak_memory_bytes"]["measured"] == 300 * 2**20 + 1  # the larger rank's peak
    assert any("RSS" in n for n in out["notes"])


def test_matching_states_give_zero_memory_error(tmp_path, capsys):
    out = _json(["validate", _write(tmp_path), "--cluster", "localhost-cpu"], capsys)
    assert out["memory_error"] == 0.0


def test_a_slower_device_raises_the_estimate_and_the_error(tmp_path, capsys):
    """Half the fp32 peak: compute takes longer, so the estimate and its signed error both rise."""
    path = _write(tmp_path)
    base = _json(["validate", path, "--cluster", "localhost-cpu"], capsys)
    spec = cluster_to_dict(load_cluster("localhost-cpu"))
    spec["device"]["peak_tflops"] = {k: v / 2 for k, v in spec["device"]["peak_tflops"].items()}
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(spec))
    slower = _json(["validate", path, "--cluster", str(slow)], capsys)
    by_name = lambda out: {r["name"]: r for r in out["rows"]}  # noqa: E731
    assert by_name(slower)["step_time_s"]["analytical"] > by_name(base)["step_time_s"]["analytical"]
    assert by_name(slower)["forward"]["analytical"] > by_name(base)["forward"]["analytical"]
    assert slower["step_time_error"] > base["step_time_error"]
    assert slower["memory_error"] == base["memory_error"]  # memory does not depend on speed


def test_text_output_and_plot(tmp_path, capsys):
    plot = tmp_path / "v.png"
    assert main(["validate", _write(tmp_path), "--cluster", "localhost-cpu", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    for word in ("step_time_s", "forward", "model_state_bytes", "peak_memory_bytes", "step_time_error",
                 "memory_error +0.00%"):
        assert word in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_has_the_measured_bar_above_the_estimate():
    fig = validation_figure(compare(_results(), _step(Engine.ANALYTICAL, 0.030, forward=0.003, backward=0.02),
                                    _step(Engine.DES, 0.03, forward=0.003), "hand"))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["estimated (analytical)", "measured (median)"]
    # measured: forward 4 ms + the 16 ms the phases do not cover; estimated: forward 3 ms + backward 20 ms
    widths = sorted(round(p.get_width(), 9) for p in ax.patches)
    assert widths == sorted([4.0, 16.0, 3.0, 20.0])


def _fail(argv, capsys) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err
    return captured.err


@pytest.mark.parametrize("make, extra, words", [
    (lambda p: str(p / "missing.json"), ["--cluster", "localhost-cpu"], "RESULTS.json: results"),
    (lambda p: str(Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=2,
                        strategy=strategy_from_flat({"global_batch": 4, "dp": 2})).save(p / "plan.json")),
     ["--cluster", "localhost-cpu"], "is this a results file?"),
    (lambda p: (p / "bad.json").write_text("{not json") and str(p / "bad.json"), [], "not valid JSON"),
    (lambda p: _write(p, _results(steps=((), ()), status=RunStatus.FAILED)), ["--cluster", "localhost-cpu"],
     "completed no step"),
    (lambda p: _write(p, _results(steps=((5.0,), (5.0,)))), ["--cluster", "localhost-cpu"], "all warm-up"),
    (lambda p: _write(p), [], "--cluster: this run used gloo on CPUs"),
    (lambda p: _write(p, _results(precision="bf16-autocast")), ["--cluster", "localhost-cpu"],
     "--cluster: localhost-cpu lists no bf16 peak"),
    (lambda p: _write(p), ["--cluster", "no-such-preset"], "--cluster: no-such-preset"),
    (lambda p: _write(p), ["--cluster", "localhost-cpu", "--plot", "/nonexistent/dir/v.png"], "--plot"),
    (lambda p: _write(p), ["--cluster", "localhost-cpu", "--plot", "v.txt"], "--plot"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, make, extra, words):
    err = _fail(["validate", make(tmp_path), *extra], capsys)
    assert err.startswith("trainplan validate: error: ") and words in err, err
    assert "calibrate" in err or "--cluster: this run" not in words


def test_a_gpu_run_defaults_to_the_plans_cluster(tmp_path, capsys):
    """An NCCL run ran on the plan's own cluster (dgx-h100 here): no --cluster needed."""
    out = _json(["validate", _write(tmp_path, _results(backend="nccl"))], capsys)
    assert out["cluster"] == "dgx-h100" and out["step_time_error"] is not None


@pytest.mark.multiproc
def test_real_chain_plan_execute_validate(tmp_path, capsys):
    """plan -> execute (2 gloo processes, tiny, 2 steps) -> validate: the JSON is complete and finite.
    No tolerance on the error: CPU timing on a shared machine is noisy (docs/validation.md)."""
    plan, results = tmp_path / "p.json", tmp_path / "r.json"
    assert main(["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "2", "--gbs", "4",
                 "--out", str(plan)]) == 0
    assert main(["execute", str(plan), "--nproc", "2", "--scale", "tiny", "--steps", "2", "--precision", "fp32",
                 "--out", str(results)]) == 0
    capsys.readouterr()
    out = _json(["validate", str(results), "--cluster", "localhost-cpu"], capsys)
    names = {r["name"] for r in out["rows"]}
    assert {"step_time_s", "forward", "backward", "optimizer", "model_state_bytes", "peak_memory_bytes"} <= names
    for key in ("step_time_error", "memory_error"):
        assert isinstance(out[key], float) and math.isfinite(out[key])
    for row in out["rows"]:
        absent = row["name"] in ("recompute", "tp", "pp", "bubble")  # dp only, no recompute: 0 by construction
        assert math.isfinite(row["measured"]) and (row["measured"] == 0 if absent else row["measured"] > 0)
        assert math.isfinite(row["analytical"])
        if row["unit"] == "s":
            assert math.isfinite(row["des"])
    assert {"recompute", "tp", "pp", "bubble"} <= names


@pytest.mark.multiproc
def test_pipeline_run_validates_pp_and_bubble_against_the_engines(tmp_path, capsys):
    """A pp 2 plan executed (2 gloo processes, tiny, 1F1B): the results file carries tp, pp and bubble,
    and validate puts each beside the same category of both engines' breakdown."""
    from simulator.run_results import load_results

    plan, results = tmp_path / "p.json", tmp_path / "r.json"
    Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=2,
         strategy=strategy_from_flat({"global_batch": 4, "micro_batch": 1, "pp": 2, "schedule": "1f1b"})).save(plan)
    assert main(["execute", str(plan), "--scale", "tiny", "--steps", "2", "--warmup", "0", "--precision", "fp32",
                 "--out", str(results)]) == 0
    capsys.readouterr()
    rows = {r["name"]: r for r in _json(["validate", str(results), "--cluster", "localhost-cpu"], capsys)["rows"]}
    assert rows["pp"]["measured"] > 0 and rows["bubble"]["measured"] > 0 and rows["tp"]["measured"] == 0
    from simulator.validate import estimate_compiled
    from simulator.validate_phases import loop_moves

    work, analytical, des = estimate_compiled(load_results(results), load_cluster("localhost-cpu"))
    moves = loop_moves(work)  # the runtime's posts into pp, its actions out of forward and backward (val32)
    for name in ("pp", "bubble", "tp", "forward", "backward"):
        moved = moves.get(name, 0.0)
        assert rows[name]["analytical"] == pytest.approx(analytical.breakdown[Category(name)] + moved, rel=1e-12)
        assert rows[name]["des"] == pytest.approx(des.breakdown[Category(name)] + moved, rel=1e-12)


def test_a_one_machine_cluster_holds_every_process():
    """4 gloo processes on one machine, validated on localhost-cpu (2 per node, no inter_node section):
    one node of 4, as the run was; it used to ask for 2 nodes and fail on the missing network."""
    from dataclasses import replace

    from simulator.validate import run_cluster

    plan4 = Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=4,
                 strategy=strategy_from_flat({"global_batch": 8, "micro_batch": 1, "dp": 4}))
    base = _results()
    results = replace(base, plan=plan4, run=replace(base.run, plan=scale_plan(plan4, Scale.parse("tiny"), 4).run))
    cluster = run_cluster(results, "localhost-cpu")
    assert (cluster.nodes, cluster.node.gpus_per_node, cluster.network) == (1, 4, None)
    assert run_cluster(results, "dgx-a100").nodes == 1  # a multi-node cluster keeps its own node size
