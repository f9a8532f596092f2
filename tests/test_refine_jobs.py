"""The refinement in several processes (planner/refine.py): the same results, to the bit and in the input order, as
in one process; each worker shares its call plans between the candidates it plays; the CLI's default ``--jobs`` is
one process per core, at most the candidates to refine."""

import gc

import pytest

import planner
import planner.refine as refine_mod
from planner.refine import default_jobs, refine
from simulator.cluster.presets import load_preset
from simulator.engine.call_plan import CallPlanner
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.presets import get_preset
from trainplan.__main__ import main

H100 = load_preset("dgx-h100").with_nodes(2)
GPT13 = get_preset("gpt3-1.3b")
BASE = dict(global_batch=16, tp=4, pp=2, placement="tp-dp-pp", zero=1)
CANDIDATES = [strategy_from_flat({**BASE, **extra}) for extra in (
    {}, {"bucket_bytes": 5_000_000}, {"allreduce_algorithm": "tree"}, {"tp": 2, "pp": 4})]


def _facts(result):
    return (result.step_time_s, result.tokens_per_s, result.mfu, sorted((c.value, v) for c, v in result.breakdown.items()),
            result.per_rank.to_dict("list"), result.extras["events"], result.extras["flows"])


def test_two_processes_give_the_results_of_one_in_order():
    ticks = []
    two = refine(H100, GPT13, CANDIDATES, jobs=2, tick=lambda done, total: ticks.append((done, total)))
    one = refine(H100, GPT13, CANDIDATES, jobs=1)
    assert [_facts(r) for r in two] == [_facts(r) for r in one]
    assert ticks == [(k, len(CANDIDATES)) for k in range(1, len(CANDIDATES) + 1)]
    assert refine(H100, GPT13, CANDIDATES[:1], jobs=4)[0].step_time_s == one[0].step_time_s  # one candidate: no pool
    assert refine(H100, GPT13, [], jobs=2) == []


def test_a_worker_shares_its_plans_between_its_candidates(monkeypatch):
    """A worker's state (set by the pool's initializer) keeps one CallPlanner: its second candidate builds fewer
    plans than it would alone, and gets the same result as alone."""
    built = []
    build = CallPlanner._build
    monkeypatch.setattr(CallPlanner, "_build", lambda self, call, group: built.append(1) or build(self, call, group))
    monkeypatch.setattr(refine_mod, "_WORKER", {})
    before = gc.get_threshold()
    try:
        refine_mod._start_worker(H100, GPT13, None, True)
        first = refine_mod._worker_step(CANDIDATES[0])
        built.clear()
        second = refine_mod._worker_step(CANDIDATES[1])
        shared_builds = len(built)
    finally:
        gc.set_threshold(*before)
    built.clear()
    alone = refine(H100, GPT13, CANDIDATES[1:2], jobs=1, share_plans=False)[0]
    assert 0 <= shared_builds < len(built)
    assert _facts(second) == _facts(alone)
    assert _facts(first) == _facts(refine(H100, GPT13, CANDIDATES[:1], jobs=1)[0])


@pytest.mark.parametrize("cores", [1, 2, 16])
def test_default_jobs_is_a_process_per_core(monkeypatch, cores):
    monkeypatch.setattr(refine_mod.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert default_jobs() == cores


@pytest.mark.parametrize("argv, jobs", [([], 6), (["--jobs", "1"], 1), (["--jobs", "3"], 3), (["--refine", "0"], 6)])
def test_the_cli_asks_default_jobs_unless_given(monkeypatch, argv, jobs):
    seen = {}

    def fake_plan(workload, cluster, **kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(refine_mod.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    monkeypatch.setattr(planner, "plan", fake_plan)
    with pytest.raises(SystemExit):
        main(["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16", "--quiet", *argv])
    assert seen["jobs"] == jobs


def test_more_jobs_than_candidates_run_one_process_each():
    """Four jobs for two candidates: two results, those of one process."""
    assert [_facts(r) for r in refine(H100, GPT13, CANDIDATES[:2], jobs=4)] == \
        [_facts(r) for r in refine(H100, GPT13, CANDIDATES[:2], jobs=1)]


def test_jobs_zero_is_refused(capsys):
    assert main(["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16", "--quiet",
                 "--jobs", "0"]) == 2
    err = capsys.readouterr().err
    assert "--jobs" in err and len(err.strip().splitlines()) == 1
