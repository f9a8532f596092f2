"""The rank phase in several processes (planner/score.py ``score``): the candidates split between processes
(at least RANK_PER_PROCESS each) rank to the same table, cell for cell and in order, as in one process, and
the progress counter still counts the whole phase."""

import pandas as pd
import pytest

import planner
import planner.score as score_mod
from simulator.cluster.presets import load_preset
from simulator.workload.presets import get_preset

H100 = load_preset("dgx-h100").with_nodes(1)
GPT13 = get_preset("gpt3-1.3b")
PINS = {"zero": (1,)}


def _table(result) -> pd.DataFrame:
    frame = result.frame.drop(columns=["strategy"])
    frame["strategy"] = [repr(s) for s in result.frame["strategy"]]
    return frame


@pytest.mark.parametrize("jobs", [2, 3])
def test_split_ranking_equals_one_process(monkeypatch, jobs):
    monkeypatch.setattr(score_mod, "RANK_CHUNK", 16)  # small chunks and processes: this space splits
    monkeypatch.setattr(score_mod, "RANK_PER_PROCESS", 16)
    seen = []
    split = planner.plan(GPT13, H100, gpus=8, global_batch=16, refine=0, jobs=jobs, pins=PINS,
                         progress=lambda phase, done, total: seen.append((phase, done, total)))
    calls = []
    estimate = score_mod.estimates_in_chunks
    monkeypatch.setattr(score_mod, "estimates_in_chunks", lambda *a, **k: calls.append(1) or estimate(*a, **k))
    alone = planner.plan(GPT13, H100, gpus=8, global_batch=16, refine=0, jobs=1, pins=PINS)
    assert len(calls) == 2  # one process: the rank phase and the variants, each one call
    assert len(alone.frame) > jobs * 16
    pd.testing.assert_frame_equal(_table(split), _table(alone))
    assert split.counts.to_dict() | {"seconds": None} == alone.counts.to_dict() | {"seconds": None}
    ranked = [(done, total) for phase, done, total in seen if phase == "rank"]
    assert ranked and all(total == ranked[0][1] for _, total in ranked)  # the whole phase's total
    assert ranked[0][1] >= jobs * 16


def test_one_job_or_few_candidates_stay_in_this_process(monkeypatch):
    """Fewer than RANK_PER_PROCESS candidates per process: no worker (the pool would cost more than it saves)."""
    def no_pool(*args, **kwargs):
        raise AssertionError("a worker pool was started")

    monkeypatch.setattr(score_mod, "ProcessPoolExecutor", no_pool)
    result = planner.plan(GPT13, H100, gpus=8, global_batch=16, refine=0, jobs=2,
                          pins={**PINS, "tp": (1, 2)})  # < 2 × 128 fit
    assert len(result.frame) < 2 * score_mod.RANK_PER_PROCESS
