"""The results file schema (simulator/run_results.py): round trip, the derived summary, bad files;
and the torch-free pieces of the runner contract (family of a layout, NCCL environment)."""

from __future__ import annotations

import json

import pytest

from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.plan_file import Plan
from simulator.plan_scale import Scale, scale_plan
from simulator.run_results import (Failure, PeakMemoryKind, RankResult, Results, RunInfo, RunStatus, Staleness,
                                   Stats, load_results, results_from_dict)
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import get_preset


def _results(status=RunStatus.COMPLETE, failure=None) -> Results:
    plan = Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=2,
                strategy=strategy_from_flat({"global_batch": 4, "dp": 2}))
    run = scale_plan(plan, Scale.parse("tiny"), 2)
    ranks = tuple(RankResult(rank=r, step_time_s=(9.0, 1.0 + r, 2.0, 3.0 - r), loss=(4.0, 3.9, 3.8, 3.7),
                             phases_s={"forward": (1.0, 0.5, 0.5, 0.5)}, model_state_bytes={"params_bytes": 100},
                             peak_memory_bytes=1000, peak_memory_kind=PeakMemoryKind.CPU_MAX_RSS) for r in range(2))
    info = RunInfo(plan=run.run, scale="tiny", notes=run.notes, family="data-parallel", precision="fp32", steps=4,
                   warmup=1, seed=0, components={"gradient sync": "DDP"})
    return Results(status=status, plan=plan, run=info, environment={"torch": "2.13.0"}, ranks=ranks, failure=failure)


def test_round_trip_and_summary(tmp_path):
    results = _results()
    path = results.save(tmp_path / "r.json")
    again = load_results(path)
    assert again.to_dict() == results.to_dict() and again.ranks == results.ranks
    summary = json.loads(path.read_text())["summary"]
    # slowest rank per measured step (warm-up 9.0 left out): max(1, 2), max(2, 2), max(3, 2) = 2, 2, 3
    assert summary["step_time_s"] == {"median_s": 2.0, "p10_s": 2.0, "p90_s": 2.8, "steps": 3}
    assert summary["completed_steps"] == 4 and summary["loss"] == [4.0, 3.9, 3.8, 3.7]
    assert summary["phases_s"]["forward"]["median_s"] == 0.5


def test_a_failed_run_keeps_its_steps(tmp_path):
    results = _results(RunStatus.FAILED, Failure(rank=1, error="RuntimeError: boom"))
    again = load_results(results.save(tmp_path / "r.json"))
    assert again.status is RunStatus.FAILED and again.failure.rank == 1 and again.completed_steps == 4


def test_stats_percentiles():
    """numpy's linear interpolation: p10 of 1..11 is 2, median 6, p90 10."""
    assert Stats.of(range(1, 12)) == Stats(median_s=6.0, p10_s=2.0, p90_s=10.0, steps=11)
    assert Stats.of([]) is None


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(schema="trainplan.plan"), "results.schema"),
    (lambda d: d.update(version=3), "results.version"),
    (lambda d: d.update(status="done"), "results.status"),
    (lambda d: d.update(extra=1), "results.extra"),
    (lambda d: d["ranks"][0].update(loss=[1.0]), "results.ranks[0].loss"),
    (lambda d: d["ranks"][0]["phases_s"].update(lunch=[1, 1, 1, 1]), "results.ranks[0].phases_s.lunch"),
    (lambda d: d["run"].update(colour="red"), "results.run.colour"),
    (lambda d: d["run"]["plan"]["strategy"].update(dp=3), "plan.strategy.dp"),
    (lambda d: d.update(staleness={"step_lag": [1]}), "results.staleness"),
    (lambda d: d.update(staleness={"step_lag": {"0": ["x"]}, "updates": {}}), "results.staleness"),
    (lambda d: d.update(version=1, staleness=None), "results.staleness"),  # version 1 had no such field
])
def test_bad_results_name_the_field(edit, field):
    d = _results().to_dict()
    edit(d)
    with pytest.raises(SpecError) as err:
        results_from_dict(d)
    assert err.value.field == field


def test_staleness_from_server_pushes_by_hand(tmp_path):
    """Two servers saw worker 0's steps 0, 1 and worker 1's steps 0, 1 (worker, step, updates, step lag);
    per push the larger value over the servers is kept: worker 0 lags 0, 1 and met 0, 3 updates."""
    server_a = [(0, 0, 0, 0), (1, 0, 1, 1), (1, 1, 2, 0), (0, 1, 2, 1)]
    server_b = [(1, 0, 0, 0), (0, 0, 1, 0), (0, 1, 3, 0), (1, 1, 1, 1)]
    st = Staleness.from_pushes([server_a, server_b])
    assert st.step_lag == {"0": (0, 1), "1": (1, 1)} and st.updates == {"0": (1, 3), "1": (1, 2)}
    summary = st.summary()
    assert summary["step_lag"]["histogram"] == {"0": 1, "1": 3}
    assert summary["step_lag"]["mean"] == 0.75 and summary["step_lag"]["max"] == 1
    assert summary["updates"]["per_worker"]["0"] == {"histogram": {"1": 1, "3": 1}, "mean": 2.0, "max": 3}
    from dataclasses import replace

    results = replace(_results(), staleness=st)
    path = results.save(tmp_path / "r.json")
    again = load_results(path)
    assert again.staleness == st and json.loads(path.read_text())["summary"]["staleness"] == summary


def test_a_version_1_file_is_still_read():
    d = _results().to_dict()
    d["version"] = 1
    del d["staleness"]
    assert results_from_dict(d).staleness is None and results_from_dict(d).ranks == _results().ranks


def test_family_of_a_layout_and_the_nccl_environment():
    from executor.run import nccl_environment
    from executor.strategies.base import Family, family_of

    def plan(**flat):
        return Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=8,
                    strategy=strategy_from_flat({"global_batch": 16} | flat))

    assert family_of(plan().layout()) is Family.DATA_PARALLEL
    assert family_of(plan(tp=2).layout()) is Family.TENSOR
    assert family_of(plan(pp=2).layout()) is Family.PIPELINE
    assert family_of(plan(tp=2, pp=2).layout()) is Family.PIPELINE_TENSOR
    assert nccl_environment(plan(allreduce_algorithm="ring")) == {"NCCL_ALGO": "allreduce:Ring"}
    assert nccl_environment(plan(allreduce_algorithm="tree")) == {"NCCL_ALGO": "allreduce:Tree"}
    assert nccl_environment(plan()) == {}
    assert nccl_environment(plan(allreduce_algorithm="halving_doubling")) == {}
