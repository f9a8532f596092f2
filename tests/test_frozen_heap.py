"""``frozen_heap`` (simulator/engine/gc_passes.py) around the planner's worker pools: the collector's objects are in
its permanent generation while the pools fork, moved back after, also on an error; both pools fork under it."""

import gc

import pytest

import planner
import planner.refine as refine_mod
import planner.score as score_mod
from simulator.cluster.presets import load_preset
from simulator.engine.gc_passes import frozen_heap
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.presets import get_preset

H100 = load_preset("dgx-h100").with_nodes(2)
GPT13 = get_preset("gpt3-1.3b")


def test_frozen_inside_and_moved_back_after_also_on_an_error():
    assert gc.get_freeze_count() == 0
    kept = [[] for _ in range(100)]  # tracked objects that exist before the block
    with frozen_heap():
        assert gc.get_freeze_count() >= len(kept)
    assert gc.get_freeze_count() == 0
    with pytest.raises(ZeroDivisionError), frozen_heap():
        1 / 0
    assert gc.get_freeze_count() == 0


class _Pool:
    """A stand-in for ProcessPoolExecutor that records whether the heap was frozen when it was made."""

    frozen: list = []

    def __init__(self, *args, **kwargs):
        _Pool.frozen.append(gc.get_freeze_count() > 0)
        self.initializer, self.initargs = kwargs.get("initializer"), kwargs.get("initargs", ())

    def __enter__(self):
        if self.initializer is not None:
            self.initializer(*self.initargs)
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, items):
        return map(fn, items)

    def submit(self, fn, *args):
        class Done:
            def result(_self):
                return fn(*args)
        return Done()


def test_both_pools_fork_under_a_frozen_heap(monkeypatch):
    before = gc.get_threshold()
    _Pool.frozen = []
    monkeypatch.setattr(refine_mod, "ProcessPoolExecutor", _Pool)
    monkeypatch.setattr(score_mod, "ProcessPoolExecutor", _Pool)
    monkeypatch.setattr(refine_mod, "_WORKER", {})
    try:
        strategies = [strategy_from_flat(dict(global_batch=16, tp=4, pp=2, zero=1, placement="tp-dp-pp", **extra))
                      for extra in ({}, {"bucket_bytes": 5_000_000})]
        assert len(refine_mod.refine(H100, GPT13, strategies, jobs=2)) == 2
        monkeypatch.setattr(score_mod, "RANK_PER_PROCESS", 16)  # this space splits
        result = planner.plan(GPT13, H100.with_nodes(1), gpus=8, global_batch=16, refine=0, jobs=2,
                              pins={"zero": (1,), "tp": (1, 2)})
        assert len(result.frame) > 32
    finally:
        gc.set_threshold(*before)
    assert len(_Pool.frozen) >= 2 and all(_Pool.frozen) and gc.get_freeze_count() == 0  # refine, rank (variants)
