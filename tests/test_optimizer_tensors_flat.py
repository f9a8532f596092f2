""":func:`simulator.host_overhead.optimizer_tensors` returns 0 for a flat-buffer framework without naming the stage's
tensors (:func:`simulator.memory.states.steps_per_tensor`): equal, for every framework and ZeRO stage it implements,
tp, pp and stage, to :func:`simulator.memory.step_tensors` of the named shapes (fails if the short cut drops a
framework that keeps per-tensor steps, or keeps one that does not)."""

import pytest

from simulator.cluster.presets import load_preset
from simulator.host_overhead import optimizer_tensors
from simulator.memory import stage_param_shapes, step_tensors
from simulator.strategy import Framework, Strategy, ZeroStage, build_layout
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-a100", 2), get_preset("gpt3-1.3b")
CASES = [(f, z, tp, pp) for f in Framework for z in f.zero_stages for tp, pp in ((1, 1), (2, 2), (2, 4))
         if z < ZeroStage.ZERO2 or pp == 1]


@pytest.mark.parametrize("framework, zero, tp, pp", CASES)
def test_flat_frameworks_count_none_as_the_shapes_say(framework, zero, tp, pp):
    layout = build_layout(Strategy(global_batch=64, tp=tp, pp=pp, zero=zero, framework=framework), CLUSTER, MODEL)
    for stage in range(pp):
        shapes = stage_param_shapes(MODEL, tp=tp, pp=pp, stage=stage, layers=layout.layer_indices(stage))
        full = step_tensors(shapes, layout.dp_cp, zero, layout.framework)[0]
        assert optimizer_tensors(MODEL, layout, stage) == full
        assert (full == 0) == (framework in (Framework.DEEPSPEED, Framework.MEGATRON))
