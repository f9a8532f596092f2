"""The closed form's stages compiled once per distinct stage (:mod:`simulator.compile.shared_stages`) equal
the stages compiled one by one in everything but the groups their calls name: stage, rank and chunk
indices, every call's kind, op, bytes, transport, algorithm and seconds, in order; and their summaries
(:func:`simulator.analytical.summarize_stages`, with its sharing of per-chunk and per-stage numbers) are
equal to the bit. Generated strategies on networks where a moved group costs the same (leaf crossings
free) and where it does not (leaf groups, shared oversubscribed uplinks), with uneven layer splits."""

from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from simulator.analytical import summarize_stages
from simulator.cluster.io import load_cluster
from simulator.cluster.spec import LeafUplinks
from simulator.compile import CostCache, compile_stages
from simulator.compile.shared_stages import closed_form_stages
from simulator.errors import SpecError
from simulator.interference import cluster_sm_fraction
from simulator.strategy import (AllReduceAlgorithm, AllReduceSync, AttentionKind, Framework, Offload,
                                ParamServerSync, PlacementOrder, Recompute, ScheduleKind, Strategy, ZeroStage,
                                build_layout)
from simulator.work import CommCall
from simulator.workload import get_preset

H100, A100 = load_cluster("dgx-h100", nodes=4), load_cluster("dgx-a100", nodes=4)
CLUSTERS = {
    "h100, crossings free": H100,
    "a100, crossings free": A100,
    "a100, leaves of 2, shared oversubscribed uplinks": replace(A100, network=replace(
        A100.network, nodes_per_leaf=2, oversubscription=4.0, leaf_uplinks=LeafUplinks.SHARED)),
}
WORKLOAD = get_preset("megatron-1.7b").with_seq(1024)
ARRAYS = ("F", "B", "parts", "cf", "cb", "tail", "sync_exposed", "opt", "after", "data")
_CALL_FIELDS = tuple(f.name for f in fields(CommCall) if f.name != "group")


def _call(c):
    return None if c is None else tuple(getattr(c, name) for name in _CALL_FIELDS)


def _calls(calls):
    return tuple(map(_call, calls))


def _view(stage):
    """A stage less the groups its calls name."""
    chunks = tuple((ch.chunk, ch.layers, ch.fwd_s, ch.bwd_s, ch.recompute_s, _calls(ch.tp_fwd), _calls(ch.tp_bwd),
                    _calls(ch.zero_fwd), _calls(ch.zero_bwd), ch.zero_prefetch_calls, _call(ch.p2p_fwd),
                    _call(ch.p2p_bwd)) for ch in stage.chunks)
    return (stage.stage, stage.rank, chunks, _calls(stage.grad_sync), stage.grad_ready_fraction,
            _calls(stage.after_step), stage.optimizer_s, stage.data_s)


def _check(cluster, strategy):
    layout = build_layout(strategy, cluster, WORKLOAD)
    try:
        one_by_one = compile_stages(CostCache(cluster), WORKLOAD, layout)
    except SpecError as err:  # the same error (e.g. an algorithm the groups cannot run)
        with pytest.raises(SpecError) as shared_err:
            closed_form_stages(CostCache(cluster), WORKLOAD, layout)
        assert str(shared_err.value) == str(err)
        return None
    shared = closed_form_stages(CostCache(cluster), WORKLOAD, layout)
    assert [_view(s) for s in shared] == [_view(s) for s in one_by_one]
    f = cluster_sm_fraction(cluster)
    a, b = summarize_stages(shared, layout.v, f), summarize_stages(one_by_one, layout.v, f)
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    return shared


@st.composite
def _strategies(draw):
    pp = draw(st.sampled_from((2, 4, 8)))
    tp = draw(st.sampled_from((1, 2, 4)))
    dp = 32 // (pp * tp)
    v = draw(st.sampled_from((1, 2)))
    schedule = ScheduleKind.INTERLEAVED if v > 1 else draw(st.sampled_from((ScheduleKind.ONE_F_ONE_B,
                                                                             ScheduleKind.GPIPE)))
    zero = draw(st.sampled_from(tuple(ZeroStage)))
    split = None
    if draw(st.booleans()):  # an uneven layer split: ends heavier or lighter than the middle
        n = pp * v
        base = [24 // n] * n
        base[0] -= 1
        base[-1] += 1
        split = tuple(base) if min(base) >= 1 else None
    sync = draw(st.sampled_from((AllReduceSync(), AllReduceSync(bucket_bytes=8 << 20),
                                 AllReduceSync(algorithm=AllReduceAlgorithm.HIERARCHICAL), ParamServerSync())))
    return dict(global_batch=dp * pp * 2, dp=dp, tp=tp, pp=pp, virtual_stages=v, schedule=schedule, zero=zero,
                    layer_split=split, sequence_parallel=tp > 1 and draw(st.booleans()),
                    recompute=draw(st.sampled_from((Recompute.NONE, Recompute.FULL))),
                    offload=draw(st.sampled_from((Offload.NONE, Offload.OPTIMIZER))),
                    offload_activations=draw(st.booleans()),
                    placement=draw(st.sampled_from(tuple(PlacementOrder))),
                    framework=draw(st.sampled_from((None, Framework.MEGATRON, Framework.DEEPSPEED))),
                    attention=AttentionKind.FLASH, dp_sync=sync)


def drawn_layout(name: str, fields_: dict):
    """The drawn strategy's (cluster, layout, stages compiled one by one) on cluster ``name``; a strategy that does
    not build is skipped (``assume``)."""
    cluster = CLUSTERS[name]
    try:
        layout = build_layout(Strategy(**fields_), cluster, WORKLOAD)
        return cluster, layout, compile_stages(CostCache(cluster), WORKLOAD, layout)
    except (SpecError, ValueError):
        assume(False)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(CLUSTERS)), fields_=_strategies())
def test_shared_stages_equal_the_stages_one_by_one(name, fields_):
    try:
        strategy = Strategy(**fields_)
        build_layout(strategy, CLUSTERS[name], WORKLOAD)
    except (SpecError, ValueError):
        assume(False)
    _check(CLUSTERS[name], strategy)


def test_middle_stages_are_shared():
    """Megatron's order on free crossings: the middle stages of a pp 8 pipeline are compiled once."""
    strategy = Strategy(global_batch=16, dp=1, tp=4, pp=8, placement=PlacementOrder.TP_DP_PP,
                        zero=ZeroStage.ZERO1, sequence_parallel=True)
    shared = _check(CLUSTERS["h100, crossings free"], strategy)
    assert len({id(s.grad_sync) for s in shared}) < 8
    assert [s.stage for s in shared] == list(range(8))
    assert [ch.chunk for s in shared for ch in s.chunks] == list(range(8))


def test_shared_stages_check_the_fetch():
    layout = build_layout(Strategy(global_batch=16, dp=16, pp=2), H100, WORKLOAD)
    with pytest.raises(SpecError) as err:
        closed_form_stages(CostCache(H100), WORKLOAD, layout, fetch="infinity")
    assert err.value.field == "fetch"


def test_stages_whose_p2p_crosses_leaf_groups_are_compiled_apart():
    """Leaves of two nodes behind shared oversubscribed uplinks, one stage per node: the send from stage 1 to
    stage 2 crosses leaf groups and costs more than the one from stage 0 to 1, although the two stages agree on
    everything else; each is compiled on its own."""
    cluster = CLUSTERS["a100, leaves of 2, shared oversubscribed uplinks"]
    strategy = Strategy(global_batch=16, dp=2, tp=4, pp=4, placement=PlacementOrder.TP_DP_PP, zero=ZeroStage.ZERO1)
    shared = _check(cluster, strategy)
    sends = [s.chunks[0].p2p_fwd.time_s for s in shared[:3]]
    assert sends[1] > sends[0] == sends[2]


_CHANGES = st.fixed_dictionaries({}, optional={
    "zero": st.sampled_from(tuple(ZeroStage)), "recompute": st.sampled_from((Recompute.NONE, Recompute.FULL)),
    "placement": st.sampled_from(tuple(PlacementOrder)), "micro_batch": st.sampled_from((1, 2)),
    "dp_sync": st.sampled_from((AllReduceSync(), AllReduceSync(bucket_bytes=8 << 20))),
    "layer_split": st.none(), "offload": st.sampled_from((Offload.NONE, Offload.OPTIMIZER))})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
# many drawn strategies do not fit the cluster or divide its ranks (skipped by the assume below): the health check
# fired on CI for 50 of 57 draws; every pair that does build is still compared stage by stage
@given(name=st.sampled_from(sorted(CLUSTERS)), fields_=_strategies(), changes=st.lists(_CHANGES, min_size=1, max_size=3))
def test_one_cache_over_many_structures_gives_each_its_own_stages(name, fields_, changes):
    """A search compiles its structures with one cache: the stages' placed part (``shared_stages._placed``,
    remembered by ``placed_key``) shared between structures that differ elsewhere gives every structure the
    stages it compiles one by one on a cache of its own."""
    cluster, cache, checked = CLUSTERS[name], CostCache(CLUSTERS[name]), 0
    for change in [{}] + changes:
        try:
            strategy = Strategy(**{**fields_, **change})
            layout = build_layout(strategy, cluster, WORKLOAD)
            one_by_one = compile_stages(CostCache(cluster), WORKLOAD, layout)
        except (SpecError, ValueError):
            continue
        shared = closed_form_stages(cache, WORKLOAD, layout)
        assert [_view(s) for s in shared] == [_view(s) for s in one_by_one]
        checked += 1
    assume(checked > 1)


def test_structures_differing_off_the_placement_share_the_placed_stages():
    """Two structures that differ in ZeRO stage and recompute only: one ``placed stages`` answer in the cache."""
    cache = CostCache(H100)
    for zero, recompute in ((ZeroStage.ZERO1, Recompute.NONE), (ZeroStage.ZERO0, Recompute.FULL)):
        layout = build_layout(Strategy(global_batch=16, dp=2, tp=4, pp=4, zero=zero, recompute=recompute), H100,
                              WORKLOAD)
        closed_form_stages(cache, WORKLOAD, layout)
    assert sum(1 for key in cache._memo if key[0] == "placed stages") == 1


def test_a_cache_keeps_the_placed_stages_of_each_placement_apart():
    """tp 4, pp 4 on A100s: Megatron's order (tp-dp-pp) shares its middle stages, tp-pp-dp does not; compiled in
    that order on one cache, the second still gets its own stages (the placement is in ``placed_key``)."""
    cluster, cache = CLUSTERS["a100, crossings free"], CostCache(CLUSTERS["a100, crossings free"])
    for placement in (PlacementOrder.TP_DP_PP, PlacementOrder.TP_PP_DP):
        layout = build_layout(Strategy(global_batch=16, dp=2, tp=4, pp=4, placement=placement, zero=ZeroStage.ZERO1),
                              cluster, WORKLOAD)
        shared = closed_form_stages(cache, WORKLOAD, layout)
        assert [_view(s) for s in shared] == [_view(s) for s in compile_stages(CostCache(cluster), WORKLOAD, layout)]
