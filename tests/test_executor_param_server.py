"""Parameter-server family on gloo (2 workers + 2 server ranks): synchronous training equals the
single-process model; asynchronous training with a staleness bound learns, and its measured staleness
stays within the bound."""

import math

import pytest

from executor.launch import run
from parallel_runs import GPT_TINY, LLAMA_TINY, STEPS, context, plan_for, sgd, sgd_reference

TOL = 1e-5
ASYNC_STEPS = 8
BOUND = 1


def _ps_plan(spec, **flat):
    return plan_for(spec, {"dp": 2, "dp_sync": "param-server", **flat}, cluster="localhost-cpu")


def _memorise(ctx, step):
    """The same batch every step: a task the model can learn (uniform random tokens cannot be)."""
    from executor.data import batch_for

    return batch_for(ctx, 0)


def _both(rank, world):
    """Sync then async, 2 workers + 2 server ranks, in one process group (one launch for both)."""
    import torch

    from executor.strategies.param_server import ParamServerRunner

    plan = _ps_plan(LLAMA_TINY, ps_mode="sync", ps_shards=2)
    runner = ParamServerRunner(context(plan, rank, world), optimizer=sgd)
    sync = ([runner.train_step(step).loss for step in range(STEPS)], runner.measured_staleness())
    plan = _ps_plan(GPT_TINY, ps_mode="async", ps_shards=2, staleness_steps=BOUND)
    runner = ParamServerRunner(context(plan, rank, world),
                               optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-2), batch_fn=_memorise)
    losses = [runner.train_step(step).loss for step in range(ASYNC_STEPS)]
    return sync, (losses, runner.measured_staleness(), runner.components())


@pytest.mark.multiproc
def test_sync_equals_reference_and_async_learns_within_staleness_bound():
    results = run(_both, 4, timeout_s=300)
    want = sgd_reference(LLAMA_TINY)
    for rank, ((losses, staleness), _) in enumerate(results):
        assert losses == pytest.approx(want, abs=TOL), f"sync rank {rank}"
        if rank >= 2:
            assert staleness == {"pushes": 2 * STEPS, "max_updates": 0, "mean_updates": 0, "max_clock_gap": 0}
    for losses, _, _ in (r[1] for r in results[:2]):
        assert all(math.isfinite(x) for x in losses)
        assert sum(losses[-2:]) / 2 < 0.92 * losses[0]  # memorising one batch: 4.16 -> 3.3..3.6 seen
    for _, staleness, components in (r[1] for r in results[2:]):
        assert staleness["pushes"] == 2 * ASYNC_STEPS
        assert staleness["max_clock_gap"] <= BOUND
        assert staleness["max_updates"] <= (2 - 1) * (2 * BOUND + 1)  # (dp − 1)·(2s + 1); 2 and 3 seen
        assert "measured staleness" in components


def test_shards_cover_the_vector_evenly_and_ps_with_tp_is_refused():
    from executor.strategies.base import processes
    from executor.strategies.param_server import check, shard_bounds
    from simulator.errors import SpecError

    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    plan = _ps_plan(LLAMA_TINY, ps_mode="async", ps_shards=2, staleness_steps=1)
    assert processes(plan.layout()) == 4
    check(plan, plan.layout())
    tp_plan = plan_for(LLAMA_TINY, {"dp": 1, "tp": 2, "dp_sync": "param-server"}, cluster="localhost-cpu")
    with pytest.raises(SpecError, match="tp=2"):
        check(tp_plan, tp_plan.layout())


@pytest.mark.multiproc
def test_trainplan_execute_starts_the_server_ranks(tmp_path, capsys):
    """Through the plan runner: dp workers + k servers are started, and the results hold every rank."""
    from simulator.run_results import RunStatus, load_results
    from trainplan.__main__ import main

    plan = tmp_path / "ps.json"
    _ps_plan(GPT_TINY, ps_mode="sync", ps_shards=1).save(plan)
    out = tmp_path / "results.json"
    assert main(["execute", str(plan), "--steps", "2", "--warmup", "0", "--out", str(out)]) == 0
    results = load_results(out)
    assert results.status is RunStatus.COMPLETE and len(results.ranks) == 3
    assert results.ranks[0].loss == results.ranks[2].loss  # the server reports the workers' mean loss


@pytest.mark.multiproc
def test_async_staleness_in_the_results_file_and_beside_the_des(tmp_path, capsys):
    """Asynchronous, bound 1, 2 workers + 1 server, 6 steps: the results file holds one step lag and one
    update staleness per push and worker; a worker's next step starts at most s ahead of the slowest, so
    it finishes at most s + 1 ahead: step lag ≤ s + 1 (the DES's bound too). validate shows both."""
    import json

    from simulator.run_results import load_results
    from trainplan.__main__ import main

    steps, plan, out = 6, tmp_path / "ps.json", tmp_path / "results.json"
    _ps_plan(GPT_TINY, ps_mode="async", ps_shards=1, staleness_steps=BOUND).save(plan)
    assert main(["execute", str(plan), "--steps", str(steps), "--warmup", "0", "--precision", "fp32",
                 "--out", str(out)]) == 0
    st = load_results(out).staleness
    assert set(st.step_lag) == set(st.updates) == {"0", "1"}
    assert all(len(v) == steps for v in (*st.step_lag.values(), *st.updates.values()))
    assert max(max(v) for v in st.step_lag.values()) <= BOUND + 1
    assert max(max(v) for v in st.updates.values()) <= (2 - 1) * (2 * BOUND + 1)
    capsys.readouterr()
    assert main(["validate", str(out), "--cluster", "localhost-cpu", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["staleness"]
    assert sum(shown["measured"]["step_lag"]["histogram"].values()) == 2 * steps
    assert sum(shown["des"]["histogram"].values()) == 2 * steps and shown["des"]["max"] <= BOUND + 1
    assert set(shown["des"]["per_worker"]) == {"0", "1"}
    assert main(["validate", str(out), "--cluster", "localhost-cpu"]) == 0
    text = capsys.readouterr().out
    assert "staleness, steps behind" in text and "worker 1" in text
