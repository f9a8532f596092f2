"""The closed form reads a structure's distinct stages and which rank is which
(:func:`simulator.compile.shared_stages.closed_form_models`, ``summarize_stages(..., classes=)``) without relabelled
copies: the arrays equal, to the bit, those of the relabelled stages (:func:`closed_form_stages`) and of the stages
compiled one by one, whether ranks share stages or not (uneven layer splits, interleaving, placements)."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
from test_shared_stages import ARRAYS, CLUSTERS, WORKLOAD, _strategies, drawn_layout

from simulator.analytical import summarize_stages
from simulator.compile import CostCache, compile_stages
from simulator.compile.shared_stages import closed_form_models, closed_form_stages
from simulator.interference import cluster_sm_fraction
from simulator.strategy import Strategy, build_layout


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
# most drawn strategies build (test_shared_stages draws them), but the ones that do not are skipped by assume
@given(name=st.sampled_from(sorted(CLUSTERS)), fields_=_strategies())
def test_summaries_from_the_models_equal_the_relabelled_stages(name, fields_):
    cluster, layout, one_by_one = drawn_layout(name, fields_)
    cache, f = CostCache(cluster), cluster_sm_fraction(cluster)
    models, classes = closed_form_models(cache, WORKLOAD, layout)
    assert len(classes) == layout.pp and all(classes[j] == j and models[j] is not None for j in classes)
    got = summarize_stages(models, layout.v, f, kept={}, classes=classes)
    for stages in (closed_form_stages(cache, WORKLOAD, layout), one_by_one):
        want = summarize_stages(stages, layout.v, f)
        for name_ in ARRAYS:
            np.testing.assert_array_equal(getattr(got, name_), getattr(want, name_))


def test_middle_stages_are_read_from_one_model():
    """Megatron's order on free crossings, pp 8 interleaved: ranks share models, and the arrays still equal."""
    from simulator.schedules import ScheduleKind
    from simulator.strategy import PlacementOrder, ZeroStage

    cluster = CLUSTERS["h100, crossings free"]
    layout = build_layout(Strategy(global_batch=16, dp=1, tp=4, pp=8, placement=PlacementOrder.TP_DP_PP,
                                   schedule=ScheduleKind.INTERLEAVED, virtual_stages=2, zero=ZeroStage.ZERO1,
                                   sequence_parallel=True), cluster, WORKLOAD)
    models, classes = closed_form_models(CostCache(cluster), WORKLOAD, layout)
    assert len(set(classes)) < 8 and sum(m is None for m in models) == 8 - len(set(classes))
    f = cluster_sm_fraction(cluster)
    got = summarize_stages(models, layout.v, f, classes=classes)
    want = summarize_stages(compile_stages(CostCache(cluster), WORKLOAD, layout), layout.v, f)
    for name_ in ARRAYS:
        np.testing.assert_array_equal(getattr(got, name_), getattr(want, name_))
