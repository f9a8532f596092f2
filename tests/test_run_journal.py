"""The step journal (simulator/run_journal.py, executor/run_record.py): a run writes its results file whole only
before the first step and at the end, its steps in between go to an appended journal, and a run that dies keeps
its steps through the journal (the supervisor folds it in, as does every reader of a ``running`` file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from simulator import run_journal
from simulator.run_results import Results, RunStatus, load_results

RECORDED = Path(__file__).parent / "data" / "suite_quick" / "ddp-overlap.results.json"


def _records(data: dict) -> list[list[dict]]:
    """Per step, every rank's record, from a results file's JSON (the journal's lines)."""
    ranks = data["ranks"]
    return [[{"t": r["step_time_s"][k], "loss": r["loss"][k], "phases": {p: v[k] for p, v in r["phases_s"].items()}}
             for r in ranks] for k in range(len(ranks[0]["step_time_s"]))]


def _header_and_journal(tmp_path: Path, steps: int) -> tuple[Path, dict]:
    """A recorded run rewritten as a run leaves it when killed after ``steps`` steps: the header (running, no steps)
    and the journal of its first ``steps`` steps."""
    data = json.loads(RECORDED.read_text())
    header = data | {"status": "running", "ranks": [r | {"step_time_s": [], "loss": [], "phases_s": {}}
                                                    for r in data["ranks"]]}
    out = tmp_path / "r.results.json"
    out.write_text(json.dumps(header))
    for records in _records(data)[:steps]:
        run_journal.append(run_journal.journal_path(out), records)
    return out, data


def test_a_running_file_reads_with_its_journal_steps(tmp_path):
    out, data = _header_and_journal(tmp_path, 3)
    results = load_results(out)
    assert results.status is RunStatus.RUNNING and results.completed_steps == 3
    assert list(results.ranks[1].step_time_s) == data["ranks"][1]["step_time_s"][:3]
    assert list(results.ranks[0].phases_s["forward"]) == data["ranks"][0]["phases_s"]["forward"][:3]


def test_a_torn_last_line_ends_the_journal(tmp_path):
    out, _ = _header_and_journal(tmp_path, 2)
    with open(run_journal.journal_path(out), "a") as f:
        f.write('[{"t": 0.0')  # the process killed inside the write
    assert load_results(out).completed_steps == 2


def test_a_finished_file_ignores_a_journal_beside_it(tmp_path):
    out, data = _header_and_journal(tmp_path, 2)
    out.write_text(json.dumps(data))  # complete: its own steps, whatever lies beside it
    assert load_results(out).completed_steps == len(data["ranks"][0]["step_time_s"])


def test_the_supervisor_marks_a_silent_rank_0_failed_with_the_journal_steps(tmp_path):
    from executor.supervise import Outcome, _mark_failed

    out, _ = _header_and_journal(tmp_path, 2)
    _mark_failed(str(out), Outcome(0, "killed by signal 9"))
    assert not run_journal.journal_path(out).exists()  # folded into the file, which now stands alone
    results = load_results(out)
    assert results.status is RunStatus.FAILED and results.failure.rank == 0 and results.completed_steps == 2


def test_a_run_writes_the_whole_file_only_before_its_first_step_and_at_the_end(tmp_path, monkeypatch):
    """A world of one in this process: every whole-file write and every journal line in order with the steps.
    A results rewrite between timed steps (what cost the step after it 0.1-0.9 ms, docs/validation.md cal19)
    fails this."""
    import executor.run as run
    from simulator.cluster.io import load_cluster
    from simulator.plan_file import Plan
    from simulator.strategy.flat import strategy_from_flat
    from simulator.workload import get_preset

    plan = tmp_path / "plan.json"
    Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=1,
         strategy=strategy_from_flat({"global_batch": 2, "micro_batch": 1, "dp": 1})).save(plan)
    events = []
    save, append, step_record = Results.save, run_journal.append, run._step_record
    monkeypatch.setattr(Results, "save", lambda self, path: (
        events.append(("save", self.status.value, self.completed_steps)), save(self, path))[1])
    monkeypatch.setattr(run_journal, "append", lambda path, records: (events.append(("line", len(records))),
                                                                      append(path, records))[1])
    monkeypatch.setattr(run, "_step_record", lambda ctx, runner, step: (events.append(("step", step)),
                                                                        step_record(ctx, runner, step))[1])
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")  # then deleted: undone in reverse, the variables end as they began
        monkeypatch.delenv(key)
    out = tmp_path / "r.results.json"
    threads = torch.get_num_threads()
    try:
        assert run.main([str(plan), "--scale", "tiny", "--steps", "3", "--warmup", "1", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)  # the run sets this process's threads per rank
    assert events == [("save", "running", 0), ("step", 0), ("line", 1), ("step", 1), ("line", 1), ("step", 2),
                      ("line", 1), ("save", "complete", 3)]
    assert load_results(out).completed_steps == 3 and not run_journal.journal_path(out).exists()


def test_the_rank_step_probe_runs_the_runs_own_between_step_work(tmp_path, monkeypatch):
    """The calibration's rank-step probe (executor/step_bench.py) calls the run's between-step function with a
    journal on rank 0, so its first-micro-batch excess follows the same bookkeeping as a run's step."""
    import executor.run_record as run_record
    from executor.step_bench import _between_steps

    calls = []
    monkeypatch.setattr(run_record, "between_steps", lambda *args: calls.append(args))
    _between_steps(0, 4, {"t": 1.0}, [None], str(tmp_path))
    _between_steps(1, 4, {"t": 1.0}, None, str(tmp_path))
    assert calls[0][:5] == (0, 4, {"t": 1.0}, [None], str(tmp_path))
    assert calls[0][5] == run_journal.journal_path(tmp_path / "results.json") and calls[1][5] is None


@pytest.mark.parametrize("steps", [[], [[{"t": 1.0, "loss": 2.0, "phases": {"forward": 0.5}}], []]])
def test_rank_series_keeps_the_steps_every_rank_completed(steps):
    series = run_journal.rank_series(steps)
    assert all(len(s["step_time_s"]) == len(s["loss"]) == 0 for s in series)
