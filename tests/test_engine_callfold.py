"""Folded collective calls (simulator/engine/callfold.py) against playing every call on the flow network.

Every case runs twice, ``CallFolder.enabled`` on and off, other shortcuts alike: step time, breakdown, per-rank
accounts and timeline must agree. The fixed cases are compared bit for bit (what they give); the hypothesis
layouts to 1e-12 relative, the clock's rounding (a wake-up another flow's settle plans can land an ulp from the
one a call alone plans). The cases have calls whose links other classes use (a tp-dp-pp placement whose pp sends
cross the dp rings' NICs, sends riding on NICs of gradient all-reduces, ZeRO-1 gathers), so calls are folded and
put back on the network mid-replay (``call_unfolds``), as well as played alone to their end.
"""

import functools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from simulator.cluster.facts import DegradedNic
from simulator.cluster.presets import load_preset
from simulator.cluster.spec import LeafUplinks
from simulator.compile import compile_step
from simulator.engine import step as step_engine
from simulator.engine.callfold import CallFolder, _Shape
from simulator.engine.jobs import Job, simulate_jobs
from simulator.engine.step import simulate
from shortcut_runs import assert_same_run, on_and_off
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.presets import get_preset

H100 = load_preset("dgx-h100")
A100 = load_preset("dgx-a100")
GPT125 = get_preset("gpt3-125m")
GPT13 = get_preset("gpt3-1.3b")
REL = 1e-12


def _both(monkeypatch, work, cluster, **kw):
    folded, plain = on_and_off(monkeypatch, CallFolder, work, cluster, **kw)
    assert plain.extras["call_folds"] == 0
    return folded, plain


def _assert_same(folded, plain, rel=REL):
    assert_same_run(folded, plain, rel)


CASES = {
    # two dp replicas per node, the pp sends cross nodes on the NICs the dp rings use (issue 8's best plans)
    "tp-dp-pp": (H100.with_nodes(4), GPT13, dict(global_batch=16, tp=4, pp=4, placement="tp-dp-pp")),
    "tp-dp-pp-interleaved": (H100.with_nodes(4), GPT13, dict(global_batch=32, tp=4, pp=4, placement="tp-dp-pp",
                                                             schedule="interleaved", virtual_stages=2,
                                                             sequence_parallel=True, zero=1)),
    # dp 4 over 4 nodes: sends of pp 2 ride on the NICs of the gradient all-reduce (issue 12's shape, small)
    "a100-tree": (A100.with_nodes(8), GPT13, dict(global_batch=32, tp=8, pp=2, recompute="full",
                                                  allreduce_algorithm="tree")),
    "a100-ring-small-buckets": (A100.with_nodes(8), GPT13, dict(global_batch=32, tp=8, pp=2,
                                                                bucket_bytes=5_000_000)),
    # slow pipelines are timed alone (network=False: delays); the base one folds on the network
    "stragglers": (H100.with_nodes(4), GPT13, dict(global_batch=16, tp=4, pp=4, placement="tp-dp-pp",
                                                  slowdown_prob=0.4, slowdown_factor=1.5)),
}


def _work(name, cluster=None):
    base, model, keys = CASES[name]
    cluster = base if cluster is None else cluster
    return cluster, compile_step(cluster, model, strategy_from_flat(keys), memory=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_folded_calls_equal_the_network_play(monkeypatch, name):
    cluster, work = _work(name)
    folded, plain = _both(monkeypatch, work, cluster, steps=2)
    _assert_same(folded, plain)
    assert folded.extras["call_folds"] > 0
    assert folded.extras["flows"] < plain.extras["flows"]


def test_the_cases_put_calls_back_on_the_network_mid_replay():
    """The unfold path is exercised: another flow arrives on a folded call's links before it ends."""
    unfolds = {name: simulate(*reversed(_work(name))).extras["call_unfolds"] for name in CASES}
    assert sum(unfolds.values()) > 0, unfolds


def test_the_cases_fold_a_calls_rest_again():
    """The rest path is exercised: a call on the network (unfolded, or started on busy links) folds its
    remaining steps once the flow that kept it there has left (``CallFolder.rest``); the equality of those
    cases with the network play is :func:`test_folded_calls_equal_the_network_play`'s."""
    refolds = {name: simulate(*reversed(_work(name)), steps=2).extras["call_refolds"] for name in CASES}
    assert sum(refolds.values()) > 0, refolds


def test_a_rest_of_a_call_equals_its_network_play(monkeypatch):
    """Only the rest folds (no call is folded at its start): the steps after the flow that made a call play on
    the network give the same floats as playing them there."""
    cluster, work = _work("a100-tree")
    monkeypatch.setattr(CallFolder, "start", lambda self, key, plans: None)
    folded, plain = _both(monkeypatch, work, cluster, steps=2)
    assert folded.extras["call_refolds"] > 0
    assert folded.extras["flows"] < plain.extras["flows"]
    _assert_same(folded, plain)


def test_a_degraded_nic_on_the_representative_folds_exactly(monkeypatch):
    """The durations are per group, from a replay on the group's own links: a NIC at 25 % on the
    representative's node (the representative engine, ``unrolled=False``) is in them."""
    base, _, _ = CASES["tp-dp-pp"]
    sick = replace(base, degraded_nics=(DegradedNic(node=0, nic=0, bw_fraction=0.25),))
    cluster, work = _work("tp-dp-pp", sick)
    folded, plain = _both(monkeypatch, work, cluster, unrolled=False)
    _assert_same(folded, plain)
    assert folded.extras["call_folds"] > 0


def test_folding_calls_is_off_without_shortcuts_and_in_unrolled_pipelines():
    cluster, work = _work("tp-dp-pp")
    assert simulate(work, cluster, shortcuts=False).extras["call_folds"] == 0
    assert simulate(work, cluster, unrolled=True).extras["call_folds"] == 0


def test_two_jobs_equal_with_and_without_folded_calls(monkeypatch):
    """Jobs alone in their component run the step engine (folded calls on); jobs sharing a leaf's uplinks are
    co-simulated unrolled (off): every job's alone and together times are those of the unfolded play."""
    cluster = replace(A100.with_nodes(6), network=replace(A100.network, nodes_per_leaf=2, oversubscription=2.0,
                                                         leaf_uplinks=LeafUplinks.SHARED))
    strategy = strategy_from_flat({"global_batch": 8, "tp": 8})
    jobs = [Job("a", GPT13, strategy, (0, 2)), Job("b", GPT13, strategy, (1, 3)), Job("c", GPT13, strategy, (4, 5))]
    folded = simulate_jobs(cluster, jobs)
    monkeypatch.setattr(CallFolder, "enabled", False)
    plain = simulate_jobs(cluster, jobs)
    for a, b in zip(folded.jobs, plain.jobs):
        assert (a.alone_step_s, a.together_step_s) == (b.alone_step_s, b.together_step_s)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([2, 4, 8]), pp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2, 4]),
       placement=st.sampled_from(["tp-pp-dp", "tp-dp-pp"]), interleaved=st.booleans(), zero=st.sampled_from([0, 1]),
       bucket_mb=st.sampled_from([5, 25]))
def test_folding_calls_is_exact_on_small_layouts(monkeypatch, tp, pp, dp, placement, interleaved, zero, bucket_mb):
    gpus = tp * pp * dp
    if gpus % 8:
        return  # whole nodes
    cluster = H100.with_nodes(gpus // 8)
    keys = dict(global_batch=4 * dp, tp=tp, pp=pp, placement=placement, zero=zero, bucket_bytes=bucket_mb * 10**6)
    if interleaved and pp > 1:
        keys.update(schedule="interleaved", virtual_stages=2)
    work = compile_step(cluster, GPT13, strategy_from_flat(keys), memory=False)
    folded, plain = _both(monkeypatch, work, cluster, trace=False)
    _assert_same(folded, plain, rel=REL)


@functools.cache
def _one_shape():
    """The gradient all-reduce with the most flows that runs on the network in the interleaved tp-dp-pp case,
    its plans (representative and replicas), and the network they run on."""
    cluster, work = _work("tp-dp-pp-interleaved")
    ctx = step_engine._Ctx(work, cluster, False, True)
    launched = [ctx.runner.launch(c, (r, "dp")) for r, sw in enumerate(work.stages) for c in sw.grad_sync]
    plans = max((plans for delay_s, plans in launched if delay_s is None),
                key=lambda ps: sum(len(step) for p in ps for step in p.steps))
    return ctx.net, plans


@settings(max_examples=40, deadline=None)
@given(exponent=st.integers(-6, 6), a=st.floats(1.0, 2.0, exclude_max=True), b=st.floats(1.0, 2.0, exclude_max=True))
def test_durations_are_the_same_bits_from_any_start_in_one_binade(exponent, a, b):
    """The shift argument of ``_Shape.durations``: a replay from ``t`` ends at ``t + (E0 − t0)`` exactly, for
    ``t0`` and ``t`` in one binade (ends in it too) and, for the cache to serve it, of one parity on its grid
    (``_binade``), against a fresh replay from ``t``."""
    net, plans = _one_shape()
    t0, t = a * 2.0**exponent, b * 2.0**exponent
    shape = _Shape(net, plans, {})
    first = shape.durations(net, t0)
    fresh = _Shape(net, plans, {}).durations(net, t)
    reused = shape.durations(net, t)
    assert fresh[1] > 0
    assert (t + reused[0], t + reused[1]) == (t + fresh[0], t + fresh[1])
    if t0 + first[1] < 2.0 ** (exponent + 1) and t + first[1] < 2.0 ** (exponent + 1):
        assert reused == first  # taken from the cache, and right


def test_shapes_of_one_signature_replay_to_the_same_bits():
    """Calls on other groups share their durations when their signatures are equal (same delays, bytes,
    latencies, capacities, and resources equal up to a renaming): each one's own replay gives those bits."""
    cluster, work = _work("a100-tree")
    ctx = step_engine._Ctx(work, cluster, False, True)
    timings: dict = {}
    shapes = []
    for r, sw in enumerate(work.stages):
        for call in sw.grad_sync:
            delay_s, plans = ctx.runner.launch(call, (r, "dp"))
            if delay_s is None:
                shapes.append(_Shape(ctx.net, plans, timings))
    assert len(timings) < len(shapes)  # some are shared
    for start in (0.0, 0.37, 3.0):
        for shape in shapes:
            assert shape.durations(ctx.net, start) == _Shape(ctx.net, shape.plans, {}).durations(ctx.net, start)
