"""The plan file: round trips for every kind of model and cluster reference, the executable layout
kept apart from the what-if scenario, and one-line errors naming the field for every bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.plan_file import SCHEMA, VERSION, Plan, load_plan, plan_from_dict, with_estimates
from simulator.strategy import FailureModel, StragglerModel, Strategy, ZeroStage
from simulator.workload import get_preset, load_model
from trainplan.__main__ import main

DATA = Path(__file__).parent / "data"


def _plan(**kw) -> Plan:
    model = kw.pop("model", get_preset("llama2-7b").with_seq(2048))
    cluster = kw.pop("cluster", load_cluster("dgx-h100"))
    strategy = kw.pop("strategy", Strategy(global_batch=16, micro_batch=2, zero=ZeroStage.ZERO3))
    return Plan(model=model, cluster=cluster, gpus=kw.pop("gpus", 8), strategy=strategy, **kw)


def test_preset_plan_round_trips_with_its_estimate(tmp_path):
    plan = _plan()
    plan = with_estimates(plan, [estimate(plan.cluster, plan.model, plan.strategy)])
    path = plan.save(tmp_path / "plan.json")
    data = json.loads(path.read_text())
    assert data["model"] == {"preset": "llama2-7b", "seq": 2048}
    assert data["cluster"] == {"preset": "dgx-h100", "nodes": 1}
    assert data["schema"] == SCHEMA and data["version"] == VERSION and data["strategy"]["zero"] == 3
    assert load_plan(path) == plan
    assert list(tmp_path.iterdir()) == [path]  # the atomic write leaves no temporary file behind


def test_full_shapes_round_trip(tmp_path):
    """A config.json model and an edited cluster are written in full, so the file stands alone."""
    model = load_model(str(DATA / "gpt2.config.json"))
    cluster = load_cluster("dgx-a100")
    edited = cluster.with_nodes(1)
    from dataclasses import replace
    edited = replace(edited, name="my-a100")
    plan = _plan(model=model, cluster=edited, strategy=Strategy(global_batch=8))
    data = json.loads(plan.save(tmp_path / "p.json").read_text())
    assert "transformer" in data["model"] and "spec" in data["cluster"]
    assert load_plan(tmp_path / "p.json") == plan


def test_layer_list_round_trips(tmp_path):
    model = load_model(str(DATA / "small-mlp.layers.json"))
    plan = _plan(model=model, cluster=load_cluster("dgx-a100"), strategy=Strategy(global_batch=8))
    assert load_plan(plan.save(tmp_path / "p.json")) == plan


def test_scenario_is_kept_apart_from_the_executable_layout(tmp_path):
    s = Strategy(global_batch=16, stragglers=StragglerModel(speed_factors=(1.0,) * 7 + (1.5,), seed=2),
                 failures=FailureModel(mtbf_gpu_hours=5e4, checkpoint_interval_steps=100, checkpoint_cost_s=30.0,
                                       restart_cost_s=600.0))
    plan = _plan(strategy=s)
    data = json.loads(plan.save(tmp_path / "p.json").read_text())
    assert "speed_factors" not in data["strategy"] and data["scenario"]["speed_factors"][-1] == 1.5
    assert data["scenario"]["mtbf_gpu_hours"] == 5e4
    loaded = load_plan(tmp_path / "p.json")
    assert loaded.strategy == s
    assert loaded.executable_strategy() == Strategy(global_batch=16)


def _estimate(**change) -> dict:
    return {"engine": "analytical", "step_time_s": 1.0, "tokens_per_s": 1e5, "mfu": 0.4, "breakdown": {"forward": 0.3},
            "memory": {"total_bytes": 1e9, "fits": True}} | change


def _base() -> dict:
    return _plan().to_dict()


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(version=2), "plan.version"),
    (lambda d: d.update(schema="other"), "plan.schema"),
    (lambda d: d.update(extra=1), "plan.extra"),
    (lambda d: d["model"].update(seqq=1), "plan.model.seqq"),
    (lambda d: d["model"].update(transformer={}), "plan.model"),
    (lambda d: d["cluster"].update(spec={}), "plan.cluster"),
    (lambda d: d["strategy"].update(tp=3), "plan.strategy.tp"),
    (lambda d: d["strategy"].update(tpp=2), "plan.strategy.tpp"),
    (lambda d: d["strategy"].update(seed=1), "plan.strategy.seed"),  # a scenario key in the layout
    (lambda d: d["scenario"].update(slowdown_prob=2.0), "plan.scenario.slowdown_prob"),
    (lambda d: d.update(gpus=0), "plan.gpus"),
    (lambda d: d.pop("strategy"), "plan.strategy"),
    (lambda d: d.update(estimates=[{"engine": "x"}]), "plan.estimates[0]"),
    # found in review (issue 15): wrong types in estimates, and model/cluster errors without the plan prefix
    (lambda d: d.update(estimates=[_estimate(step_time_s="fast")]), "plan.estimates[0].step_time_s"),
    (lambda d: d.update(estimates=[_estimate(mfu=float("nan"))]), "plan.estimates[0].mfu"),
    (lambda d: d.update(estimates=[_estimate(engine="magic")]), "plan.estimates[0].engine"),
    (lambda d: d.update(estimates=[_estimate(breakdown=[1, 2])]), "plan.estimates[0].breakdown"),
    (lambda d: d.update(estimates=[_estimate(memory={"total_bytes": 1, "fits": "yes"})]),
     "plan.estimates[0].memory.fits"),
    (lambda d: d["cluster"].update(preset="dgx-h10"), "plan.cluster.preset"),
    (lambda d: d["cluster"].update(nodes=0), "plan.cluster.nodes"),
    (lambda d: d["model"].update(preset="gpt3-12"), "plan.model.preset"),
    (lambda d: d["model"].update(seq=-1), "plan.model.seq"),
])
def test_bad_plans_name_the_field(edit, field):
    d = _base()
    edit(d)
    with pytest.raises(SpecError) as err:
        plan_from_dict(d)
    assert err.value.field == field, str(err.value)


@pytest.mark.parametrize("content", [b"\xff\xfe junk", b"{not json", b"[1, 2]", b""])
def test_unreadable_files_are_one_error(tmp_path, content):
    path = tmp_path / "p.json"
    path.write_bytes(content)
    with pytest.raises(SpecError) as err:
        load_plan(path)
    assert err.value.field == "plan"


def test_missing_file_and_directory(tmp_path):
    for path in (tmp_path / "none.json", tmp_path):
        with pytest.raises(SpecError, match="^plan: "):
            load_plan(path)


def test_cli_save_plan_then_simulate_plan_gives_the_same_estimate(tmp_path, capsys):
    flags = ["--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--dp", "2", "--tp", "2", "--pp", "2",
             "--gbs", "16", "--layer-split", "2,10", "--json"]
    path = tmp_path / "plan.json"
    assert main(["simulate", *flags, "--save-plan", str(path)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["simulate", "--plan", str(path), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert first["step_time_s"] == second["step_time_s"] and first["memory"] == second["memory"]
    assert load_plan(path).estimates[0].step_time_s == first["step_time_s"]


@pytest.mark.parametrize("extra, flag", [(["--tp", "2"], "--tp"), (["--gpus", "8"], "--gpus"),
                                         (["--cluster", "dgx-a100"], "--cluster")])
def test_cli_plan_with_other_flags_is_refused(tmp_path, capsys, extra, flag):
    path = _plan().save(tmp_path / "p.json")
    assert main(["simulate", "--plan", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trainplan simulate: error: {flag}:") and len(err.strip().splitlines()) == 1


def test_cli_unwritable_save_plan_fails_before_the_work(capsys):
    assert main(["simulate", "--model", "gpt3-125m", "--gpus", "8", "--gbs", "8", "--save-plan",
                 "/nonexistent/dir/p.json"]) == 2
    assert "--save-plan: folder '/nonexistent/dir' does not exist" in capsys.readouterr().err


def test_plan_file_has_the_usual_mode(tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        path = _plan().save(tmp_path / "p.json")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_layout_error_in_the_scenario_names_the_scenario():
    d = _base()
    d["scenario"]["speed_factors"] = [1.0, 2.0]  # 2 entries for 8 ranks
    with pytest.raises(SpecError) as err:
        plan_from_dict(d)
    assert err.value.field == "plan.scenario.speed_factors"


def test_cli_plan_with_a_scenario_needs_the_des(tmp_path, capsys):
    s = Strategy(global_batch=16, stragglers=StragglerModel(slowdown_prob=0.1, slowdown_factor=2.0))
    path = _plan(strategy=s).save(tmp_path / "p.json")
    assert main(["simulate", "--plan", str(path)]) == 2
    assert "add --engine des" in capsys.readouterr().err
    assert main(["simulate", "--plan", str(path), "--engine", "des"]) == 0


@pytest.mark.parametrize("argv, needle", [
    (["simulate", "--model", "gpt3-125m", "--gpus", "8", "--gbs", "8", "--engine", "des", "--plot", "t.txt"],
     "--plot"),
    (["simulate", "--model", "gpt3-125m", "--gpus", "8", "--gbs", "8", "--save-plan", "p.yaml"], "--save-plan"),
    (["plan", "--model", "gpt3-125m", "--gpus", "8", "--gbs", "8", "--out", "p.txt"], "--out"),
    (["plan", "--model", "gpt3-125m", "--gpus", "8", "--gbs", "8", "--csv", "all.json"], "--csv"),
])
def test_output_suffixes_are_checked_first(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{needle}:" in err and "must end in" in err and not list(tmp_path.iterdir())


def test_plan_without_global_batch_and_plan_with_profile(tmp_path, capsys):
    d = _base()
    d["strategy"].pop("global_batch")
    with pytest.raises(SpecError) as err:
        plan_from_dict(d)
    assert err.value.field == "plan.strategy.global_batch"
    path = _plan().save(tmp_path / "p.json")
    assert main(["simulate", "--plan", str(path), "--profile", "megatron"]) == 2
    assert "--profile: the plan file already gives" in capsys.readouterr().err


def test_infinite_straggler_factor_is_refused(capsys):
    assert main(["simulate", "--model", "gpt3-125m", "--gpus", "8", "--gbs", "8", "--engine", "des",
                 "--straggler", "rank=0,factor=inf"]) == 2
    assert "--straggler: must be a number > 0, got inf" in capsys.readouterr().err


def test_a_parameter_server_plan_checks_its_gpus(tmp_path, capsys):
    """A PS layout runs on every worker node (16 A100s on 2 colocated nodes); a plan that says 3 GPUs was
    accepted (issue 15 review) and is now refused naming plan.gpus and the value to write."""
    path = tmp_path / "ps.json"
    assert main(["simulate", "--model", "gpt3-1.3b", "--cluster", "dgx-a100", "--nodes", "2", "--gpus", "16",
                 "--gbs", "256", "--param-server", "sync", "--servers", "4", "--save-plan", str(path)]) == 0
    d = json.loads(path.read_text())
    assert plan_from_dict(d).gpus == 16
    d["gpus"] = 3
    with pytest.raises(SpecError, match=r"^plan\.gpus: the parameter-server layout runs on 16 worker GPUs"):
        plan_from_dict(d)
