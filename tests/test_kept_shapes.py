"""The kept stage shapes (:func:`simulator.memory.shapes.kept_stage_param_shapes`) are :func:`stage_param_shapes`'
own, in order, for every stage of uneven and interleaved splits, tp, ep; the same object when asked again (kept), and
the stage's SpecError when the stage is outside the pipeline (not kept)."""

import pytest
from hypothesis import given, settings, strategies as st

from simulator.errors import SpecError
from simulator.memory.shapes import kept_stage_param_shapes, stage_param_shapes
from simulator.workload import get_preset

MODELS = [get_preset("gpt3-1.3b"), get_preset("llama2-7b")]


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS), tp=st.sampled_from((1, 2, 4)), pp=st.integers(1, 6), data=st.data())
def test_kept_equals_built(model, tp, pp, data):
    stage = data.draw(st.integers(0, pp - 1))
    layers = tuple(sorted(data.draw(st.sets(st.integers(0, model.layers - 1), max_size=6))))
    kept = kept_stage_param_shapes(model, tp, pp, stage, layers)
    assert kept == tuple(stage_param_shapes(model, tp=tp, pp=pp, stage=stage, layers=layers))
    assert kept_stage_param_shapes(model, tp, pp, stage, layers) is kept


def test_outside_the_pipeline_is_the_error():
    with pytest.raises(SpecError, match="stage"):
        kept_stage_param_shapes(MODELS[0], 1, 2, 2, ())
