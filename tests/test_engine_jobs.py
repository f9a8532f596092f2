"""Several jobs on one network (simulator/engine/jobs.py, unrolled.py; cluster/placement.py).

- Unrolled pipelines (every dp replica simulated) equal the representative engine on symmetric jobs, bit
  for bit: the full play the multi-job shortcuts are checked against.
- Two identical jobs on disjoint nodes run exactly as fast as one alone, co-simulated or not.
- Two jobs sharing a leaf's uplinks each slow down by the hand-worked share: with one 2-rank all-reduce per
  bucket crossing a shared uplink of the NIC's rate, each job's flows run at half the NIC rate, so its step
  grows by exactly Σ bucket bytes / NIC bandwidth (the bandwidth term once more; latencies unchanged).
- Job isolation (a job whose footprint meets no other's is simulated alone) equals co-simulating all.
"""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiled_work import compiled, switched
from simulator.cluster.placement import PlacementPolicy, place_jobs, placed
from simulator.cluster.presets import load_preset
from simulator.cluster.spec import LeafUplinks, NetworkSpec
from simulator.compile import compile_step
from simulator.compile.costs import CostCache
from simulator.engine.jobs import Job, LinkTier, simulate_jobs, spine_footprint
from simulator.engine.step import simulate
from simulator.errors import SpecError
from simulator.strategy import Strategy, ZeroStage
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.presets import get_preset
from test_collectives_helpers import NIC

A100 = load_preset("dgx-a100")
GPT13 = get_preset("gpt3-1.3b")
NO_OVERLAP = strategy_from_flat({"global_batch": 8, "overlap_grad_reduce": False})


def spine_cluster(nodes=4, per_leaf=2, ratio=2.0, uplinks=LeafUplinks.SHARED):
    """One GPU and one NIC per node, ``per_leaf`` nodes per leaf; shared uplinks of ``per_leaf × 25 / ratio``
    GB/s: with ratio 2 and 2 nodes per leaf, exactly one NIC's rate."""
    net = NetworkSpec(link=NIC, rail_optimized=False, oversubscription=ratio, nodes_per_leaf=per_leaf,
                      leaf_uplinks=uplinks)
    return replace(switched(nodes=nodes, gpus=1, nics=1), network=net)


def _alone(cluster, nodes, strategy=NO_OVERLAP, shortcuts=False):
    view = placed(cluster, nodes)
    return simulate(compile_step(view, GPT13, strategy, memory=False), view, trace=False,
                    shortcuts=shortcuts).step_time_s


@pytest.mark.parametrize("nodes, strategy", [
    (2, Strategy(global_batch=16, tp=8, pp=2)),
    (2, Strategy(global_batch=16, tp=4, pp=2)),
    (4, Strategy(global_batch=32, tp=2, pp=2)),
    (2, Strategy(global_batch=16, tp=2, zero=ZeroStage.ZERO3)),
    (2, Strategy(global_batch=16, tp=4, zero=ZeroStage.ZERO1)),
], ids=["dp1-tp8-pp2", "dp2-tp4-pp2", "dp8-tp2-pp2", "dp8-zero3", "dp4-zero1"])
def test_unrolled_pipelines_equal_the_representative_engine(nodes, strategy):
    cluster = A100.with_nodes(nodes)
    work = compiled(cluster, strategy, GPT13, fwd_s=0.01, bwd_s=0.02)
    rep = simulate(work, cluster, trace=False, shortcuts=False)
    full = simulate(work, cluster, trace=False, shortcuts=False, unrolled=True)
    assert full.step_time_s == rep.step_time_s
    assert full.extras["events"] > rep.extras["events"] or work.layout.dp == 1  # dp pipelines, not one


@pytest.mark.parametrize("policy, uplinks", [(PlacementPolicy.PACKED, LeafUplinks.SHARED),
                                             (PlacementPolicy.SCATTERED, LeafUplinks.PER_NIC)])
@pytest.mark.parametrize("shortcuts", [True, False])
def test_two_identical_jobs_on_disjoint_links_run_as_fast_as_one_alone(policy, uplinks, shortcuts):
    cluster = spine_cluster(uplinks=uplinks)
    nodes = place_jobs(cluster, [2, 2], policy)
    result = simulate_jobs(cluster, [Job(f"j{i}", GPT13, NO_OVERLAP, n) for i, n in enumerate(nodes)],
                           shortcuts=shortcuts)
    for job, n in zip(result.jobs, nodes):
        assert job.together_step_s == job.alone_step_s == _alone(cluster, n, shortcuts=shortcuts)
        assert job.slowdown == 1.0


def test_two_jobs_sharing_a_leaf_uplink_each_slow_down_by_the_hand_worked_share():
    cluster = spine_cluster()
    nodes = place_jobs(cluster, [2, 2], PlacementPolicy.SCATTERED)
    assert nodes == [(0, 2), (1, 3)]  # each job across both leaves, both under each leaf
    result = simulate_jobs(cluster, [Job(f"j{i}", GPT13, NO_OVERLAP, n) for i, n in enumerate(nodes)])
    work = compile_step(placed(cluster, nodes[0]), GPT13, NO_OVERLAP, memory=False)
    grad_bytes = sum(c.nbytes for c in work.stages[0].grad_sync)
    # Alone each flow runs at the NIC's 25 GB/s (the shared uplink has 2 × 25 / 2 = 25); together two flows
    # share each uplink: 12.5 GB/s. A 2-rank all-reduce of b bytes moves b/2 per rank in each of its two
    # steps, so it takes b / 25e9 s more; summed over the buckets (run one after another, exposed).
    expected_s = grad_bytes / NIC.bw_Bps
    for job in result.jobs:
        assert job.alone_step_s == pytest.approx(_alone(cluster, job.nodes), rel=1e-12)
        assert job.together_step_s - job.alone_step_s == pytest.approx(expected_s, rel=1e-9)
        assert [t.tier for t in job.tiers] == [LinkTier.SPINE]
        assert job.tiers[0].together_s - job.tiers[0].alone_s == pytest.approx(2 * expected_s, rel=1e-9)
    assert result.jobs[0].shares_with == ("j1",)


def test_isolating_jobs_equals_cosimulating_all_of_them():
    cluster = spine_cluster(nodes=6)
    jobs = [Job("a", GPT13, NO_OVERLAP, (0, 2)), Job("b", GPT13, NO_OVERLAP, (1, 3)),
            Job("c", GPT13, Strategy(global_batch=8), (4, 5))]
    fast, full = simulate_jobs(cluster, jobs), simulate_jobs(cluster, jobs, shortcuts=False)
    for a, b in zip(fast.jobs[:2], full.jobs[:2]):
        assert a.together_step_s == pytest.approx(b.together_step_s, rel=1e-12)
        assert a.alone_step_s == pytest.approx(b.alone_step_s, rel=1e-12)
    c_fast, c_full = fast.jobs[2], full.jobs[2]
    assert c_fast.shares_with == () and c_full.shares_with == ("a", "b")
    assert c_fast.together_step_s == _alone(cluster, (4, 5), jobs[2].strategy, shortcuts=True)
    assert c_full.together_step_s == c_full.alone_step_s == _alone(cluster, (4, 5), jobs[2].strategy)


def test_same_inputs_give_the_same_result():
    cluster = spine_cluster()
    jobs = [Job("a", GPT13, Strategy(global_batch=8), (0, 2)), Job("b", GPT13, NO_OVERLAP, (1, 3))]
    one, two = simulate_jobs(cluster, jobs, steps=2), simulate_jobs(cluster, jobs, steps=2)
    assert [j.to_dict() for j in one.jobs] == [j.to_dict() for j in two.jobs]


def test_placement_policies():
    cluster = spine_cluster(nodes=8, per_leaf=4)
    assert place_jobs(cluster, [2, 3], PlacementPolicy.PACKED) == [(0, 1), (4, 5, 6)]
    assert place_jobs(cluster, [2, 2, 4], PlacementPolicy.SCATTERED) == [(0, 4), (1, 5), (2, 3, 6, 7)]
    assert place_jobs(cluster, [2, 2, 3], PlacementPolicy.PACKED) == [(0, 1), (2, 3), (4, 5, 6)]
    with pytest.raises(SpecError, match="job_placement: packed"):
        place_jobs(cluster, [3, 3, 2], PlacementPolicy.PACKED)  # 8 nodes, but (0-2), (4-6), then 7 and 8
    with pytest.raises(SpecError, match="nodes: the jobs need 9 nodes"):
        place_jobs(cluster, [5, 4], PlacementPolicy.SCATTERED)
    one_tier = replace(cluster, network=replace(cluster.network, nodes_per_leaf=0, leaf_uplinks=LeafUplinks.PER_NIC))
    assert place_jobs(one_tier, [2, 3], PlacementPolicy.PACKED) == [(0, 1), (2, 3, 4)]


def test_a_job_sees_its_own_nodes():
    cluster = spine_cluster(nodes=8, per_leaf=4)
    view = placed(cluster, (5, 1))
    assert view.world_size == 2 and view.place(0) == (5, 0) and view.place(1) == (1, 0)
    assert CostCache(view)._translated((1,)) == (1,)  # no move by leaf groups: the map is arbitrary
    assert spine_footprint(cluster, (0, 1)) == frozenset()  # one leaf group, not rail-optimised
    assert spine_footprint(cluster, (0, 4)) == {(0,), (1,)}


@pytest.mark.parametrize("jobs, field", [
    ([], "jobs"),
    ([Job("a", GPT13, NO_OVERLAP, (0, 1)), Job("b", GPT13, NO_OVERLAP, (1, 2))], "jobs[1].nodes"),
    ([Job("a", GPT13, NO_OVERLAP, (0, 9))], "jobs[0].nodes"),
    ([Job("a", GPT13, NO_OVERLAP, (0,)), Job("a", GPT13, NO_OVERLAP, (1,))], "jobs[1].name"),
    ([Job("a", GPT13, Strategy(global_batch=8, tp=4), (0, 1))], "jobs[0].tp"),
])
def test_bad_jobs_name_the_field(jobs, field):
    with pytest.raises(SpecError) as err:
        simulate_jobs(spine_cluster(), jobs)
    assert err.value.field == field


def test_shared_uplinks_are_one_resource_per_leaf_and_direction():
    from simulator.cluster.topology import path

    cluster = spine_cluster(ratio=4.0)  # a leaf's uplinks: 2 ports × 25 / 4 = 12.5 GB/s
    cross = path(cluster, 0, 2)
    assert [h.resource for h in cross.hops] == [("nic_tx", 0, 0), ("leaf_up", 0), ("leaf_down", 1), ("nic_rx", 2, 0)]
    assert cross.bottleneck_Bps == 12.5e9
    assert path(cluster, 1, 3).hops[1].resource == ("leaf_up", 0)  # another node under the same leaf: shared
    assert path(cluster, 0, 1).bottleneck_Bps == 25e9  # within a leaf: the NICs only
    per_nic = path(spine_cluster(ratio=4.0, uplinks=LeafUplinks.PER_NIC), 0, 2)
    assert per_nic.hops[1].resource == ("leaf_up", 0, 0) and per_nic.bottleneck_Bps == 6.25e9
    with pytest.raises(SpecError, match="inter_node.leaf_uplinks"):
        NetworkSpec(link=NIC, leaf_uplinks=LeafUplinks.SHARED)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(perm=st.permutations(range(6)), split=st.integers(1, 3), shared=st.booleans())
def test_isolation_equals_cosimulating_all_on_any_placement(perm, split, shared):
    """Two or three one-GPU-per-node jobs on any nodes: isolating the jobs that meet no other changes no
    co-simulated job's times, and an isolated job runs in the full play exactly as alone."""
    cluster = spine_cluster(nodes=6, uplinks=LeafUplinks.SHARED if shared else LeafUplinks.PER_NIC)
    cuts = [(0, 2), (2, 2 + split), (2 + split, 6)]
    strategy = strategy_from_flat({"global_batch": 12, "overlap_grad_reduce": False})  # dp 2 or 3
    jobs = [Job(f"j{i}", GPT13, strategy, tuple(perm[a:b])) for i, (a, b) in enumerate(cuts) if b - a >= 2]
    fast, full = simulate_jobs(cluster, jobs), simulate_jobs(cluster, jobs, shortcuts=False)
    for a, b in zip(fast.jobs, full.jobs):
        assert b.together_step_s == pytest.approx(b.alone_step_s if not a.shares_with else a.together_step_s,
                                                  rel=1e-12)
        if not shared:
            assert a.shares_with == ()
