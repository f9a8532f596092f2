"""The refinement runs the DES with the cyclic collector's full passes rarer (planner/refine.py,
``simulator.engine.gc_passes.FULL_COLLECTION_EVERY``): raised while the candidates play, the process's thresholds
as they were after it (also when a candidate fails), and the results those of the DES run alone, to the bit."""

import gc

import pytest

from planner.refine import des_step, refine
from simulator.cluster.presets import load_preset
from simulator.engine.gc_passes import FULL_COLLECTION_EVERY
from simulator.errors import SpecError
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.presets import get_preset

H100 = load_preset("dgx-h100").with_nodes(2)
GPT13 = get_preset("gpt3-1.3b")
CANDIDATES = [strategy_from_flat({"global_batch": 16, "tp": 4, "pp": 2, "zero": 1, **extra})
              for extra in ({}, {"placement": "tp-dp-pp"})]


def _facts(r):
    return r.step_time_s, sorted((c.value, v) for c, v in r.breakdown.items()), r.per_rank.to_dict("list")


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's defaults, whatever the test run set
    yield
    gc.set_threshold(*before)


def test_full_passes_are_rarer_during_the_refinement_only(thresholds):
    seen = []
    results = refine(H100, GPT13, CANDIDATES, tick=lambda done, total: seen.append(gc.get_threshold()))
    assert seen == [(700, 10, FULL_COLLECTION_EVERY)] * len(CANDIDATES)
    assert gc.get_threshold() == (700, 10, 10)
    assert [_facts(r) for r in results] == [_facts(des_step(H100, GPT13, s)) for s in CANDIDATES]


def test_the_thresholds_come_back_when_a_candidate_fails(thresholds):
    bad = strategy_from_flat({"global_batch": 16, "tp": 3})  # 3 does not divide the heads: build_layout refuses it
    with pytest.raises(SpecError):
        refine(H100, GPT13, [CANDIDATES[0], bad])
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_is_kept(thresholds):
    gc.set_threshold(700, 10, 10 * FULL_COLLECTION_EVERY)
    seen = []
    refine(H100, GPT13, CANDIDATES[:1], tick=lambda done, total: seen.append(gc.get_threshold()))
    high = (700, 10, 10 * FULL_COLLECTION_EVERY)
    assert seen == [high] and gc.get_threshold() == high
