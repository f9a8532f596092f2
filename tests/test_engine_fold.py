"""Folded compute (simulator/engine/fold.py) against the step-by-step play it replaces.

Every case runs twice, folding on and off (``Folder.enabled``), other shortcuts alike: step time, breakdown,
per-rank accounts and timeline must agree to 1e-12 relative (the clock's rounding: a settle completes every
flow due within a few ulps of it, and the two plays hold different settles). The cases are small layouts
whose TP rings share NVLink ports with the pipeline's sends (pp stages on one node), so folds are undone
mid-call (``unfolds``) as well as completed; hypothesis draws more of them.
"""

from dataclasses import replace

import pytest
import simpy
from hypothesis import HealthCheck, given, settings, strategies as st

from simulator.cluster.facts import DegradedNic
from simulator.cluster.spec import Link, LinkClass, LinkKind
from simulator.cluster.topology import Hop, Path
from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.engine.fold import Folder
from simulator.engine.network import FlowNetwork
from simulator.engine.settle_clock import alone_finishes
from simulator.engine.step import simulate
from shortcut_runs import assert_same_run, on_and_off
from simulator.strategy import Strategy
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.presets import get_preset

H100 = load_preset("dgx-h100")
GPT125 = get_preset("gpt3-125m")
GPT13 = get_preset("gpt3-1.3b")
REL = 1e-12


def _both(monkeypatch, work, cluster, **kw):
    return on_and_off(monkeypatch, Folder, work, cluster, **kw)


def _assert_same(folded, plain):
    assert_same_run(folded, plain, REL, step_abs=None)
    assert plain.extras["folds"] == 0


CASES = {
    # tp 4 × pp 2 on one node: its tp all-reduces run as NVLS (in the switch), so sends rarely meet them
    "tp4-pp2-one-node": (H100.with_nodes(1), GPT125, dict(global_batch=8, tp=4, pp=2)),
    "interleaved-sp": (H100.with_nodes(2), GPT13, dict(global_batch=16, tp=4, pp=4, schedule="interleaved",
                                                      virtual_stages=2, sequence_parallel=True)),
    "dp2-zero1": (H100.with_nodes(2), GPT125, dict(global_batch=16, tp=4, pp=2, zero=1)),
    # every block's gather is on the wire while its TP calls run (same NVLink ports): nothing folds
    "zero3-blocks": (H100.with_nodes(1), GPT125, dict(global_batch=8, tp=4, pp=1, zero=3)),
    "recompute-full": (H100.with_nodes(1), GPT125, dict(global_batch=8, tp=4, pp=2, recompute="full")),
    "stragglers": (H100.with_nodes(2), GPT125, dict(global_batch=16, tp=4, pp=2, slowdown_prob=0.4,
                                                   slowdown_factor=1.5)),
}


def _strategy(keys: dict) -> Strategy:
    return strategy_from_flat(keys)


@pytest.mark.parametrize("name", sorted(CASES))
def test_folded_steps_equal_the_step_by_step_play(monkeypatch, name):
    cluster, model, keys = CASES[name]
    work = compile_step(cluster, model, _strategy(keys), memory=False)
    folded, plain = _both(monkeypatch, work, cluster, steps=2)
    _assert_same(folded, plain)
    if name != "zero3-blocks":
        assert folded.extras["folds"] > 0
        assert folded.extras["events"] < plain.extras["events"]


def test_the_cases_undo_folds_mid_call():
    """The unfold path is exercised: a send arrives on a TP ring's port while a fold holds it (tp 4 with
    sequence parallelism runs ring all-gathers and reduce-scatters over the NVLink ports the pipeline's
    sends cross; 166 unfolds when written)."""
    cluster, model, keys = CASES["interleaved-sp"]
    res = simulate(compile_step(cluster, model, _strategy(keys), memory=False), cluster)
    assert res.extras["unfolds"] > 0


def test_folding_is_off_without_shortcuts_and_in_unrolled_pipelines():
    cluster, model, keys = CASES["dp2-zero1"]
    work = compile_step(cluster, model, _strategy(keys), memory=False)
    assert simulate(work, cluster, shortcuts=False).extras["folds"] == 0
    assert simulate(work, cluster, unrolled=True).extras["folds"] == 0
    sick = replace(cluster, degraded_nics=(DegradedNic(node=1, nic=0, bw_fraction=0.25),))
    assert sick.varies  # a degraded part: unrolled by default, so no folding
    assert simulate(compile_step(sick, model, _strategy(keys), memory=False), sick).extras["folds"] == 0


def test_a_degraded_nic_on_the_representative_folds_exactly(monkeypatch):
    """Folding reads each call's own links (a degraded NIC's slower bottleneck), so it stays exact where
    the representative engine runs a cluster whose nodes differ (``unrolled=False``)."""
    cluster, model, keys = CASES["dp2-zero1"]
    sick = replace(cluster, degraded_nics=(DegradedNic(node=0, nic=0, bw_fraction=0.25),))
    work = compile_step(sick, model, _strategy(keys), memory=False)
    folded, plain = _both(monkeypatch, work, sick, unrolled=False)
    _assert_same(folded, plain)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([2, 4, 8]), pp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2]),
       interleaved=st.booleans(), sp=st.booleans(), mbs=st.sampled_from([1, 2]))
def test_folding_is_exact_on_small_layouts(monkeypatch, tp, pp, dp, interleaved, sp, mbs):
    gpus = tp * pp * dp
    cluster = H100.with_nodes(max(1, gpus // 8))
    keys = dict(global_batch=4 * dp * mbs, micro_batch=mbs, tp=tp, pp=pp, sequence_parallel=sp)
    if gpus < 8 * cluster.nodes:
        return  # the layout must fill the cluster
    if interleaved and pp > 1:
        keys.update(schedule="interleaved", virtual_stages=2)
    work = compile_step(cluster, GPT13, _strategy(keys), memory=False)
    folded, plain = _both(monkeypatch, work, cluster, trace=False)
    _assert_same(folded, plain)


@settings(max_examples=60, deadline=None)
@given(start=st.floats(0.0, 50.0), sizes=st.lists(st.floats(1.0, 1e9), min_size=1, max_size=5),
       bw=st.lists(st.sampled_from([25.0, 50.0, 450.0, 3.3]), min_size=5, max_size=5))
def test_alone_finishes_are_the_networks(start, sizes, bw):
    """Flows alone on disjoint links: :func:`alone_finishes` gives the completion times FlowNetwork does,
    bit for bit, started at any clock value."""
    env = simpy.Environment(initial_time=start)
    net = FlowNetwork(env)
    paths = [Path((Hop(("r", i), Link(kind=LinkKind.INFINIBAND, bw_GBps=bw[i], latency_us=0.0)),), LinkClass.NET, 0.0)
             for i in range(len(sizes))]
    done: list[float] = []

    def go():
        flows = yield net.transfer_all([(p, b, 0.0) for p, b in zip(paths, sizes)])
        done.extend(f.finish_s for f in flows)

    env.process(go())
    env.run()
    dues = [start + b / p.bottleneck_Bps for b, p in zip(sizes, paths)]
    assert alone_finishes(start, dues) == done


def test_a_ranks_sends_run_one_at_a_time_in_order():
    """The pp stream as a FIFO of callbacks (``rank._p2p``): a rank's sends never overlap, and every send
    before the last starts no later than the next."""
    cluster, model, keys = CASES["interleaved-sp"]
    timeline = simulate(compile_step(cluster, model, _strategy(keys), memory=False), cluster).timeline
    sends = timeline[timeline["stream"] == "pp"]
    assert len(sends) > 0
    for _, rows in sends.groupby("rank"):
        starts, ends = rows["start_s"].tolist(), rows["end_s"].tolist()
        assert all(ends[i] <= starts[i + 1] for i in range(len(starts) - 1))
