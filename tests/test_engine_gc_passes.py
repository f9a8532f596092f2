"""The cyclic collector's thresholds while the DES runs (simulator.engine.gc_passes): raised for the run, restored
after it, also on an error; the simulation's result is the same under any setting of the collector."""

import gc

import pandas as pd
import pytest

from simulator.cluster.presets import load_preset
from simulator.engine import gc_passes
from simulator.engine.gc_passes import YOUNG_PASS_EVERY, fewer_young_passes
from simulator.engine.step import simulate
from simulator.strategy import Strategy
from simulator.workload.presets import get_preset
from compiled_work import compiled


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_raised_inside_and_restored_after_also_on_an_error(thresholds):
    gc.set_threshold(700, 10, 100)
    with fewer_young_passes():
        assert gc.get_threshold() == (YOUNG_PASS_EVERY, 10, 100)
    assert gc.get_threshold() == (700, 10, 100)
    with pytest.raises(ZeroDivisionError), fewer_young_passes():
        1 / 0
    assert gc.get_threshold() == (700, 10, 100)


def test_never_lowered_and_automatic_collection_off_left_off(thresholds):
    gc.set_threshold(10 * YOUNG_PASS_EVERY, 10, 10)
    with fewer_young_passes():
        assert gc.get_threshold() == (10 * YOUNG_PASS_EVERY, 10, 10)
    gc.set_threshold(0, 10, 10)
    with fewer_young_passes():
        assert gc.get_threshold() == (0, 10, 10)


def test_simulate_restores_the_thresholds_and_gives_the_same_step_under_any_setting(thresholds, monkeypatch):
    cluster = load_preset("dgx-a100").with_nodes(4)
    work = compiled(cluster, Strategy(global_batch=8, tp=8, pp=2), get_preset("gpt3-1.3b"))
    gc.set_threshold(700, 10, 10)
    default = simulate(work, cluster)
    assert gc.get_threshold() == (700, 10, 10)
    monkeypatch.setattr(gc_passes, "YOUNG_PASS_EVERY", 20)
    gc.set_threshold(20, 2, 2)  # passes all the time, full ones too
    often = simulate(work, cluster)
    assert gc.get_threshold() == (20, 2, 2)
    assert often.step_time_s == default.step_time_s
    assert often.extras["events"] == default.extras["events"] and often.extras["flows"] == default.extras["flows"]
    pd.testing.assert_frame_equal(often.timeline, default.timeline)


def test_estimate_many_compiles_its_structures_under_the_raised_threshold_and_restores_it(thresholds, monkeypatch):
    """The closed form's structure compilation runs under :func:`fewer_young_passes` (fails if it runs under the default
    threshold, or leaves it raised); the estimates are the same as under frequent passes."""
    from simulator.analytical_structures import Structures
    from simulator.analytical_vec import estimate_many

    cluster, model = load_preset("dgx-a100").with_nodes(2), get_preset("gpt3-1.3b")
    strategies = [Strategy(global_batch=32, tp=2, pp=2), Strategy(global_batch=32, tp=4, pp=1)]
    seen, add = [], Structures.add
    monkeypatch.setattr(Structures, "add", lambda self, *a, **k: seen.append(gc.get_threshold()) or add(self, *a, **k))
    gc.set_threshold(700, 10, 10)
    raised = estimate_many(cluster, model, strategies)
    assert seen and all(t == (YOUNG_PASS_EVERY, 10, 10) for t in seen)
    assert gc.get_threshold() == (700, 10, 10)
    monkeypatch.setattr(gc_passes, "YOUNG_PASS_EVERY", 20)
    gc.set_threshold(20, 2, 2)
    often = estimate_many(cluster, model, strategies)
    pd.testing.assert_frame_equal(often, raised)
