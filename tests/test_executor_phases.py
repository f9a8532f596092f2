"""Measured phases of the tensor- and pipeline-parallel families (executor/phase_clock.py) on 2 gloo ranks.

Per rank and step: every phase is ≥ 0 and together they fit in the step's wall time (measured around
``train_step``; they are disjoint intervals inside it, so only timer rounding can exceed it:
tolerance 0.1 % + 0.5 ms); a tp run shows tp communication; a pipeline run shows pp communication on
every rank and, under GPipe, bubble on the first stage (it waits for the last stage's first backward, which comes
after that stage's forwards, whatever the load; interleaved 1F1B guarantees no such wait; the last stage's wait for
the first forward may be all transfer when it starts its step late, now that the clock's stamp exchange, where an
early rank waited, is check time); a run with recompute shows recompute time (the checkpointed forward rerun in backward); a run
without tp, pp or recompute records 0 for their phases. No timing is asserted beyond that.
"""

import time

import pytest

from executor.launch import run
from parallel_runs import GPT_TINY, LLAMA_TINY, context, plan_for

STEPS = 2
CONFIGS = {
    "tp": (LLAMA_TINY, {"tp": 2, "sequence_parallel": True, "recompute": "full"}),
    "pp gpipe": (GPT_TINY, {"pp": 2, "schedule": "gpipe"}),
    "pp interleaved": (LLAMA_TINY, {"pp": 2, "schedule": "interleaved", "virtual_stages": 2,
                                    "recompute": "selective"}),
    "dp": (GPT_TINY, {"dp": 2, "recompute": "full"}),  # the data-parallel family's recompute phase
}


def _phases(rank, world):
    from executor.strategies.data_parallel import DataParallelRunner
    from executor.strategies.parallel import ParallelRunner

    out = {}
    for name, (spec, flat) in CONFIGS.items():
        family = DataParallelRunner if name == "dp" else ParallelRunner
        runner = family(context(plan_for(spec, flat), rank, world))
        rows = []
        for step in range(STEPS):
            start = time.perf_counter()
            record = runner.train_step(step)
            rows.append((time.perf_counter() - start, {p.value: s for p, s in record.phases_s.items()},
                         record.check_s))
        out[name] = rows
    return out


@pytest.mark.multiproc
def test_tp_and_pipeline_phases_fit_the_step_and_show_their_communication(two_ranks):
    results = [res["phases"] for res in two_ranks]
    for rank, res in enumerate(results):
        for name, rows in res.items():
            for wall, phases, check_s in rows:
                assert all(v >= 0 for v in phases.values()), (name, rank, phases)
                assert sum(phases.values()) + check_s <= wall * 1.001 + 5e-4, (name, rank, wall, phases, check_s)
                assert {"forward", "backward", "optimizer"} <= set(phases)
                # the loss reduction (dp all-reduce, pipeline broadcast) is timed apart from every phase
                if name != "tp":  # tp alone: every rank holds the loss already (a float conversion)
                    assert check_s > 0, (name, rank, check_s)
            total = {p: sum(ph.get(p, 0.0) for _, ph, _ in rows) for p in ("tp", "pp", "bubble", "forward", "recompute")}
            assert total["forward"] > 0
            assert (total["recompute"] > 0) == ("recompute" in CONFIGS[name][1]), (name, rank, total)
            if name == "tp":
                assert total["tp"] > 0 and "pp" not in rows[0][1], (rank, total)
            elif name == "dp":
                assert "tp" not in rows[0][1] and "pp" not in rows[0][1]
            else:
                assert total["pp"] > 0 and total["tp"] == 0, (name, rank, total)
    # GPipe's first stage posts its last forward and then waits for the last stage's first backward, which can only
    # start after that forward arrives: bubble on rank 0 whatever the load. Interleaved 1F1B gives rank 0 (stages 0
    # and 2) more warm-up forwards to run before it needs a backward; when rank 0 gets less CPU than rank 1 (2 cores
    # shared with other work) every send it waits for is already posted, and its bubble is 0 (CI 2026-11-26, 5c2d60e:
    # 0.0 in both steps) — no bubble is guaranteed there, so none is asserted.
    assert results[0]["pp gpipe"] and sum(ph.get("bubble", 0.0) for _, ph, _ in results[0]["pp gpipe"]) > 0


def test_a_receive_wait_is_bubble_until_the_sender_posted():
    """Hand-worked: waits in ns; sends of stage 0 F mb 0 at 150, stage 1 B mb 1 at 50."""
    import torch

    from executor.phase_clock import split_waits

    sent = torch.zeros((2, 2, 2), dtype=torch.int64)
    sent[0, 0, 0], sent[1, 1, 1] = 150, 50
    waits = [(100, 400, (0, 0, 0)),   # 50 bubble, 250 pp
             (100, 200, (1, 1, 1)),   # posted before the wait began: 100 pp
             (100, 120, (0, 0, 0)),   # posted after the wait ended (clock skew): clamped, 20 bubble
             (0, 10, (2, 1, 0))]      # no such sending stage: 10 pp
    pp, bubble = split_waits(waits, sent, 2)
    assert pp == pytest.approx(360e-9) and bubble == pytest.approx(70e-9)


def test_phases_absent_by_layout():
    from executor.strategies.base import Phase, phases_absent

    assert phases_absent(plan_for(GPT_TINY, {"dp": 2}).layout()) == (Phase.RECOMPUTE, Phase.TP, Phase.PP,
                                                                     Phase.BUBBLE)
    assert phases_absent(plan_for(GPT_TINY, {"tp": 2, "recompute": "full"}).layout()) == (Phase.PP, Phase.BUBBLE)
    assert phases_absent(plan_for(GPT_TINY, {"pp": 2, "schedule": "gpipe"}).layout()) == (Phase.RECOMPUTE, Phase.TP)


def test_the_step_time_leaves_out_the_loss_check():
    """``executor.run._step_record`` times ``train_step`` less its ``check_s`` (the loss reduction for the
    equivalence checks): a step that sleeps 0.3 s of which 0.25 s were the check records about 0.05 s."""
    from types import SimpleNamespace

    from executor.run import _step_record
    from executor.strategies.base import Phase, StepRecord

    class Runner:
        def train_step(self, step):
            time.sleep(0.3)
            return StepRecord(loss=1.0, phases_s={Phase.FORWARD: 0.05}, check_s=0.25)

    ctx = SimpleNamespace(layout=plan_for(GPT_TINY, {"dp": 1}).layout(), synchronize=lambda: None)
    record = _step_record(ctx, Runner(), 0)
    assert 0.0 < record["t"] < 0.2, record
    assert record["phases"]["forward"] == 0.05


EXCHANGE_DELAY_S = 0.3
"""A marker delay rank 0 takes before the clock's stamp exchange (far above a tiny step's waits on a loaded VM)."""


def _delayed_exchange(rank, world):
    import time as _time

    from executor.strategies.base import Phase
    from executor.strategies.parallel import ParallelRunner

    runner = ParallelRunner(context(plan_for(GPT_TINY, {"pp": 2, "schedule": "gpipe"}), rank, world))
    split = runner.pipe_clock.split

    def late_split(group):
        if rank == 0:
            _time.sleep(EXCHANGE_DELAY_S)
        return split(group)

    runner.pipe_clock.split = late_split
    records = [runner.train_step(step) for step in range(2)]
    return [(r.check_s, r.phases_s.get(Phase.BUBBLE, 0.0)) for r in records]


def _both(rank, world):
    """``_phases`` then ``_delayed_exchange`` in one launch: each builds its own runners from fresh plans and
    the delay is taken inside the second run's own steps, so neither run sees the other; one launch instead of
    two saves a set of 2 rank start-ups (torch import, about 2 s of CPU each)."""
    return {"phases": _phases(rank, world), "delayed": _delayed_exchange(rank, world)}


@pytest.fixture(scope="module")
def two_ranks():
    return run(_both, 2, timeout_s=300)


@pytest.mark.multiproc
def test_the_stamp_exchange_is_check_time_not_bubble(two_ranks):
    """The pipeline clock's stamp exchange is the executor's own call, not training (executor/phase_clock.py
    ``PipelineClock.split``): rank 1, waiting in it for rank 0 held back by a marker delay, books that wait as
    check time (left out of the step), not as bubble."""
    results = [res["delayed"] for res in two_ranks]
    for check_s, bubble_s in results[1]:
        assert check_s >= EXCHANGE_DELAY_S * 0.9, (check_s, bubble_s)
        assert bubble_s < EXCHANGE_DELAY_S * 0.5, (check_s, bubble_s)

