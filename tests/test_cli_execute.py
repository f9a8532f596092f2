"""``trainplan execute`` and ``torchrun -m executor.run``: the issue's done command, the results file,
failures (a rank that raises, dies or hangs) and bad input (one line, exit 2, nothing launched)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cluster.io import load_cluster
from simulator.plan_file import Plan
from simulator.run_results import RunStatus, load_results
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import get_preset
from trainplan.__main__ import main

ROOT = Path(__file__).resolve().parents[1]


def _plan(tmp_path: Path, name: str = "plan.json", **changes) -> str:
    strategy = strategy_from_flat({"global_batch": 4, "micro_batch": 1, "dp": 2} | changes)
    path = tmp_path / name
    Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=2, strategy=strategy).save(path)
    return str(path)


# --- bad input: before anything is launched -------------------------------------------------------

@pytest.mark.parametrize("extra, words", [
    (["--nproc", "3"], "--nproc: 3 exceeds the plan's 2 GPUs"),
    (["--nproc", "0"], "--nproc: must be a positive integer"),
    (["--steps", "0"], "--steps: must be a positive integer"),
    (["--warmup", "5"], "--warmup: must be in 0..4"),
    (["--scale", "big"], "--scale: unknown scale 'big'"),
    (["--timeout-s", "-1"], "--timeout-s: must be a positive number"),
    (["--measure-s", "0"], "--measure-s: must be a positive number of seconds"),
    (["--max-steps", "3"], "--max-steps: must be at least --steps (5)"),
    (["--max-steps", "50"], "--max-steps: caps the steps --measure-s adds and does nothing without it; give "
                            "--measure-s SECONDS too"),
    (["--out", "/nonexistent/dir/r.json"], "--out: folder '/nonexistent/dir' does not exist"),
    (["--trace", "/nonexistent/dir/t"], "--trace: folder '/nonexistent/dir' does not exist"),
    pytest.param(["--backend", "nccl"], "--backend: nccl needs CUDA GPUs", marks=pytest.mark.skipif(
        __import__("torch").cuda.is_available(), reason="a GPU is present")),
])
def test_bad_flags_are_one_line(tmp_path, capsys, extra, words):
    base = [] if "--scale" in extra else ["--scale", "tiny"]
    assert main(["execute", _plan(tmp_path), *base, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err


def test_bad_plans_are_one_line(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    nvme = _plan(tmp_path, "nvme.json", zero=3, offload="nvme")
    fusion = _plan(tmp_path, "fusion.json", fusion_cycle_s=0.005)
    acts = _plan(tmp_path, "acts.json", recompute="full", offload_activations=True)
    for plan, words in ((str(tmp_path / "missing.json"), "no such file"), (str(tmp_path / "bad.json"), "is not valid JSON"),
                        (nvme, "plan.strategy.offload: nvme: torch has no NVMe offload"),
                        (acts, "plan.strategy.offload_activations: true: this executor keeps activations"),
                        (fusion, "plan.strategy.fusion_cycle_s")):
        assert main(["execute", plan, "--scale", "tiny"]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1, err


def test_an_fp8_plan_is_refused_on_cpu_before_launch(tmp_path, capsys):
    """FP8 GEMMs need FP8 tensor cores: on gloo (CPU) the plan is refused, not run in another format
    (tests/test_executor_fp8.py has the rest)."""
    assert main(["execute", _plan(tmp_path, precision="fp8"), "--scale", "tiny", "--backend", "gloo"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--backend: gloo runs on CPU: FP8 needs a CUDA device with FP8 tensor cores (sm_89+)" in err, err
    assert len(err.splitlines()) == 1, err


def test_a_family_not_registered_is_refused(tmp_path, capsys, monkeypatch):
    from executor.strategies import base

    monkeypatch.setattr(base, "_REGISTRY", {})
    monkeypatch.setattr("executor.strategies.FAMILY_MODULES", ())
    assert main(["execute", _plan(tmp_path), "--scale", "tiny"]) == 2
    assert "the data-parallel family (dp=2 tp=1 pp=1) is not implemented" in capsys.readouterr().err


# --- real runs --------------------------------------------------------------------------------------

@pytest.mark.multiproc
def test_done_command_writes_a_complete_results_file(tmp_path, capfd):
    plan, out, trace = tmp_path / "plan.json", tmp_path / "results.json", tmp_path / "trace"
    # ZeRO-3 pinned: the sharded-parameter check below needs it, not whichever stage the planner ranks first
    assert main(["plan", "--model", "llama2-7b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "64",
                 "--zero", "3", "--out", str(plan)]) == 0
    assert main(["execute", str(plan), "--nproc", "4", "--scale", "tiny", "--steps", "3", "--warmup", "1",
                 "--out", str(out), "--trace", str(trace)]) == 0
    text = capfd.readouterr().out  # rank 0's line comes from its own process: capture the file descriptor
    assert "world 8→4 processes: dp 8→4" in text and "ran data-parallel on 4 rank(s)" in text
    results = load_results(out)
    assert results.status is RunStatus.COMPLETE and results.failure is None
    assert results.completed_steps == 3 and len(results.ranks) == 4
    assert results.run.plan.layout().dp == 4 and results.run.plan.model.hidden == 32
    assert results.plan.layout().dp == 8 and results.plan.model.name == "llama2-7b"
    summary = json.loads(out.read_text())["summary"]
    assert summary["measured_steps"] == 2 and summary["step_time_s"]["median_s"] > 0
    assert {"forward", "backward", "optimizer"} <= set(summary["phases_s"])
    for rank in results.ranks:
        assert rank.loss == results.ranks[0].loss and rank.peak_memory_bytes > 0
        assert rank.model_state_bytes["params_bytes"] > 0 and rank.model_state_bytes["optimizer_bytes"] > 0
    # ZeRO-3 over 4 ranks: each holds about a quarter of the fp32 parameters (FSDP2 pads dim-0 shards)
    total = results.run.plan.model.params * 4
    assert total / 4 <= results.ranks[0].model_state_bytes["params_bytes"] < total / 2
    assert {"torch", "backend", "cores", "threads_per_rank"} <= set(results.environment)
    assert sorted(p.name for p in trace.iterdir()) == [f"rank{r}.json" for r in range(4)]
    assert json.loads((trace / "rank0.json").read_text())["traceEvents"]


@pytest.fixture(scope="module")
def budget_run_with_a_teardown_abort(tmp_path_factory):
    """One run serves two tests: a time budget (--measure-s, capped by --max-steps) on a dp-2 plan whose rank 1
    aborts after the final barrier (``TRAINPLAN_FAULT=1:end:abort``). The abort comes after every step, so it
    cannot change the step count the budget decided, and the budget cannot hide the abort (rank 1 still aborts
    at the end); one launch instead of two saves a set of 2 rank start-ups (torch import, about 2 s of CPU each).
    Returns (exit code, stderr of the command, the results file's path)."""
    tmp = tmp_path_factory.mktemp("budget")
    out, err = tmp / "results.json", io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setenv("TRAINPLAN_FAULT", "1:end:abort")
        code = main(["execute", _plan(tmp), "--scale", "tiny", "--steps", "3", "--warmup", "1", "--measure-s", "30",
                     "--max-steps", "7", "--out", str(out)])
    return code, err.getvalue(), out


def test_a_time_budget_runs_more_steps_and_records_them(budget_run_with_a_teardown_abort):
    """--measure-s: every rank runs the count rank 0 decided (the run completes), capped by --max-steps."""
    code, _, out = budget_run_with_a_teardown_abort
    assert code == 0
    results = load_results(out)
    assert results.status is RunStatus.COMPLETE and results.completed_steps == 7 and results.run.steps == 7
    assert len(results.ranks) == 2 and all(len(rank.step_time_s) == 7 for rank in results.ranks)


@pytest.mark.multiproc
def test_torchrun_runs_the_same_entry_point(tmp_path):
    out = tmp_path / "r.json"
    # --standalone: torchrun binds its own free rendezvous port, so no other process can take it between a
    # free_port() probe and torchrun's bind (a race another test run on the machine could lose)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "executor.run", _plan(tmp_path), "--scale", "tiny", "--steps", "2",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    results = load_results(out)
    assert results.status is RunStatus.COMPLETE and len(results.ranks) == 2 and results.completed_steps == 2
    phases = results.ranks[0].phases_s
    assert {"forward", "backward", "dp", "optimizer", "recompute", "tp", "pp", "bubble"} == set(phases)  # DDP
    assert all(phases[p] == (0.0, 0.0) for p in ("recompute", "tp", "pp", "bubble"))  # none in a dp-only run


@pytest.mark.multiproc
@pytest.mark.parametrize("rank, kind, words", [
    (1, "raise", "RuntimeError: injected fault on rank 1 at step 1"), (1, "kill", "killed by signal 9"),
    (1, "hang", "hung: still running after its peers failed, 1 step(s) done"), (0, "kill", "killed by signal 9")])
def test_a_failing_rank_fails_the_run_and_keeps_completed_steps(tmp_path, capsys, monkeypatch, rank, kind, words):
    """Rank 0 killed: the step it completed is in its step journal only (executor/run_record.py), which the
    supervisor folds into the results file it left.

    Only the hang needs a short process-group timeout (the peer then times out, 5 s). A rank that raises or is
    killed closes its connections, so its peers fail at once; with 5 s there too, a rank started or scheduled
    more than 5 s after its peer on a loaded machine made the peer time out (in the rendezvous or a
    collective) before the fault was reached, every rank reported a peer's failure and the supervisor blamed
    the lowest rank: the flaky ``[1-raise]`` (rank 0 blamed once under load)."""
    monkeypatch.setenv("TRAINPLAN_FAULT", f"{rank}:1:{kind}")
    out = tmp_path / "r.json"
    assert main(["execute", _plan(tmp_path), "--scale", "tiny", "--steps", "3", "--out", str(out),
                 "--timeout-s", "5" if kind == "hang" else "120"]) == 1
    err = capsys.readouterr().err
    assert f"trainplan execute: rank {rank} failed: {words}" in err, err
    results = load_results(out)
    assert results.status is RunStatus.FAILED and results.failure.rank == rank and words in results.failure.error
    assert results.completed_steps == 1 and len(results.ranks[0].loss) == 1


@pytest.mark.multiproc
def test_an_abort_after_the_run_completed_is_a_warning_not_a_failure(budget_run_with_a_teardown_abort):
    """gloo's teardown sometimes aborts a rank after the final barrier (SIGABRT, seen under load): the
    steps and results are complete, so execute succeeds and says which rank exited uncleanly. A rank that
    aborts before the end still fails the run (the cases above)."""
    code, err, out = budget_run_with_a_teardown_abort
    assert code == 0, err
    assert "warning: rank 1 (signal 6) exited uncleanly after the run had completed" in err, err
    results = load_results(out)
    assert results.status is RunStatus.COMPLETE and results.completed_steps == results.run.steps > 0


@pytest.mark.parametrize("zero, framework, ran", [(3, None, "fsdp2"), (2, "deepspeed", "fsdp2"), (1, None, "torch"),
                                                   (0, None, "torch"), (3, "fsdp2", "fsdp2")])
def test_the_run_plan_names_the_framework_torch_runs(tmp_path, zero, framework, ran):
    """A plan's ZeRO-3 implies DeepSpeed in the simulator, but torch runs it as FSDP2: the run plan (what
    validation re-simulates) names what ran, with a note when that differs; never silently."""
    from executor.options import _as_torch_runs
    from simulator.strategy import Framework
    from simulator.strategy.framework import resolve_framework
    from simulator.plan_file import load_plan
    from simulator.plan_scale import Scale, scale_plan

    flat = {"zero": zero} | ({"framework": framework} if framework else {})
    scaled = _as_torch_runs(scale_plan(load_plan(_plan(tmp_path, **flat)), Scale.parse("tiny"), None))
    s = scaled.run.strategy
    assert resolve_framework(s.zero, s.partitioning, s.framework)[1].value == ran
    implied = resolve_framework(s.zero, None, None if framework is None else Framework(framework))[1].value
    changed = [n for n in scaled.notes if n.startswith("framework ")]
    assert bool(changed) == (implied != ran), changed


def _big_plan(tmp_path: Path, gpus: int) -> str:
    strategy = strategy_from_flat({"global_batch": gpus, "micro_batch": 1, "dp": gpus})
    path = tmp_path / f"plan{gpus}.json"
    Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100", nodes=gpus // 8), gpus=gpus,
         strategy=strategy).save(path)
    return str(path)


def _no_launch(*args, **kwargs):
    raise AssertionError("launched processes past the per-core limit")


@pytest.mark.parametrize("extra", [[], ["--nproc", "64"]])
def test_processes_past_the_per_core_limit_are_refused_before_launching(tmp_path, capsys, monkeypatch, extra):
    """Issue 15 §2: `execute` uses the guard of `collective --measure` and `calibrate`
    (executor.launch.check_local_processes): 64 processes on 2 cores (32 per core) is past 8 per core,
    whether the count is the plan's GPUs or --nproc; one line naming --nproc, nothing started."""
    from executor import supervise
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(supervise, "supervise", _no_launch)
    assert main(["execute", _big_plan(tmp_path, 64), "--scale", "tiny", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "--nproc: 64 processes on 2 cores is past the 8 per core" in err and len(err.splitlines()) == 1, err


def test_processes_past_one_per_core_run_with_a_warning(tmp_path, capsys, monkeypatch):
    from executor import supervise
    launched = []
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setattr(supervise, "supervise",
                        lambda argv, nproc, **kw: launched.append(nproc) or supervise.Outcome(rank=None, error=""))
    assert main(["execute", _plan(tmp_path), "--scale", "tiny"]) == 0
    assert launched == [2] and "warning: 2 processes on 1 cores time-share them" in capsys.readouterr().err
