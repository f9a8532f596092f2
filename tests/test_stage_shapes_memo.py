"""A stage's parameter shapes remembered per what they read (:func:`simulator.compile.comm_part.stage_shapes`: tp, pp,
the layer split, ep, the stage) are each layout's own: one cache asked for layouts that differ in one of those fields
at a time gives what :func:`simulator.memory.stage_param_shapes` names for each. Fails if the key drops a field the
shapes read (the second layout then gets the first's shapes)."""

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.compile.comm_part import stage_shapes
from simulator.memory import stage_param_shapes
from simulator.schedules import ScheduleKind
from simulator.strategy import Strategy, build_layout
from simulator.workload import get_preset

CLUSTER = load_preset("dgx-h100", 2)
DENSE, MOE = get_preset("gpt3-1.3b"), get_preset("mixtral-8x7b")
BASE = Strategy(global_batch=64, tp=2, pp=2)
CHANGES = {
    "tp": dict(tp=4),
    "pp": dict(pp=4),
    "virtual_stages": dict(pp=2, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2),
    "layer_split": dict(layer_split=(10, 14)),
}


def _shapes(cache, model, s, stage):
    layout = build_layout(s, CLUSTER, model)
    direct = tuple(stage_param_shapes(model, tp=layout.tp, pp=layout.pp, stage=stage,
                                      layers=layout.layer_indices(stage), ep=layout.ep))
    return stage_shapes(cache, model, layout, stage), direct


@pytest.mark.parametrize("field", list(CHANGES))
def test_layouts_differing_in_one_field_get_their_own_shapes(field):
    cache = CostCache(CLUSTER)
    answers = []
    for s in (BASE, replace(BASE, **CHANGES[field])):
        for stage in range(2):
            kept, direct = _shapes(cache, DENSE, s, stage)
            assert kept == direct, (field, stage)
            answers.append(kept)
    assert answers[:2] != answers[2:]  # the field changes the shapes: the check above can fail


def test_expert_parallel_degrees_get_their_own_shapes():
    cache = CostCache(CLUSTER)
    base = Strategy(global_batch=64, tp=1, pp=2, ep=2)
    seen = []
    for s in (base, replace(base, ep=4)):
        kept, direct = _shapes(cache, MOE, s, 1)
        assert kept == direct
        seen.append(kept)
    assert seen[0] != seen[1]


def test_stages_get_their_own_shapes():
    cache = CostCache(CLUSTER)
    layout = build_layout(BASE, CLUSTER, DENSE)
    assert stage_shapes(cache, DENSE, layout, 0) != stage_shapes(cache, DENSE, layout, 1)
