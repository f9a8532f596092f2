"""A structure's closed-form arrays read once per distinct stage (:func:`simulator.analytical_models.summarize_models`)
equal, to the bit, :func:`simulator.analytical.summarize_stages` of the same models and classes, of the relabelled
stages and of the stages compiled one by one: generated strategies (uneven layer splits, interleaving, placements,
ZeRO, buckets, parameter servers) on networks where moved groups cost the same and where they do not, with the
rows kept across calls as a search keeps them. Fails if a rank's chunk is read at ``r·v + k`` instead of ``k·p + r``,
if a p2p send off the pipeline's ends is kept, or if a kept row is read for another chunk tuple."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
from test_shared_stages import ARRAYS, CLUSTERS, WORKLOAD, _strategies, drawn_layout

from simulator.analytical import summarize_stages
from simulator.analytical_models import summarize_models
from simulator.compile import CostCache, compile_stages
from simulator.compile.shared_stages import closed_form_models, closed_form_stages
from simulator.interference import cluster_sm_fraction
from simulator.schedules import ScheduleKind
from simulator.strategy import AllReduceSync, PlacementOrder, Strategy, ZeroStage, build_layout
from simulator.units import MiB

_KEPT: dict = {}
"""Rows kept across the examples (one per cluster's cache below), as a search keeps them between structures."""
_CACHES = {name: CostCache(cluster) for name, cluster in CLUSTERS.items()}


def _equal(got, want):
    assert (got.p, got.v) == (want.p, want.v)
    for name in ARRAYS:
        a, b = getattr(got, name), getattr(want, name)
        assert a.shape == b.shape, name
        np.testing.assert_array_equal(a, b)
        assert np.array_equal(np.signbit(a), np.signbit(b)), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CLUSTERS)), fields_=_strategies())
def test_models_summary_equals_the_stages_summary(name, fields_):
    cluster, layout, one_by_one = drawn_layout(name, fields_)
    cache, f = _CACHES[name], cluster_sm_fraction(cluster)
    models, classes = closed_form_models(cache, WORKLOAD, layout)
    got = summarize_models(models, classes, layout.v, f, kept=_KEPT.setdefault(name, {}))
    _equal(got, summarize_stages(models, layout.v, f, classes=classes))
    _equal(got, summarize_stages(closed_form_stages(cache, WORKLOAD, layout), layout.v, f))
    _equal(got, summarize_stages(one_by_one, layout.v, f))


def test_shared_models_interleaved():
    """pp 8, v 2 on Megatron's order: ranks share models, every chunk has its own place, and the ends drop their
    sends; the rows of the 25 MiB buckets' structure are kept and read again by the 100 MiB one (ZeRO-1's chunks do
    not read the buckets: the same chunk tuples)."""
    cluster = CLUSTERS["h100, crossings free"]
    cache, kept, f = CostCache(cluster), {}, cluster_sm_fraction(cluster)
    for bucket_MiB in (25, 100):
        strategy = Strategy(global_batch=16, dp=1, tp=4, pp=8, placement=PlacementOrder.TP_DP_PP,
                            schedule=ScheduleKind.INTERLEAVED, virtual_stages=2, zero=ZeroStage.ZERO1,
                            sequence_parallel=True, dp_sync=AllReduceSync(bucket_bytes=bucket_MiB * MiB))
        layout = build_layout(strategy, cluster, WORKLOAD)
        models, classes = closed_form_models(cache, WORKLOAD, layout)
        assert len(set(classes)) < 8
        got = summarize_models(models, classes, layout.v, f, kept=kept)
        _equal(got, summarize_stages(compile_stages(CostCache(cluster), WORKLOAD, layout), layout.v, f))
        assert got.cf.shape == (1, 15) and got.cb.shape == (1, 15) and (got.cf > 0).all() and (got.cb > 0).all()
    assert sum(1 for key in kept if key[0] == "chunk rows") == len(set(classes))  # the second read the first's rows
