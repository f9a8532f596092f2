"""Paths moved by renaming (:func:`simulator.cluster.topology.renaming`): wherever the rule says a path on other
ranks is a renamed copy, it equals the path rebuilt there, on networks with and without leaf groups, shared and
per-NIC uplinks, rail-optimised or not, with and without GPUDirect RDMA, on switched, PCIe-tree and NVLink-mesh
nodes, and in a job's view of a shared cluster (ranks placed on its nodes); it refuses where a path may differ (a leaf crossed on one side only, a shared leaf link, a degraded NIC);
and the engine's replica links read through it equal those asked of the topology, as do step times."""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from simulator.cluster.facts import DegradedNic
from simulator.cluster.io import load_cluster
from simulator.cluster.placement import placed
from simulator.cluster.presets import load_preset
from simulator.cluster.spec import LeafUplinks
from simulator.cluster.topology import path, renamed, renaming, translated
from simulator.engine import step as step_engine
from simulator.engine.call_plan import CallPlanner
from simulator.engine.step import simulate
from simulator.strategy import StragglerModel, Strategy
from simulator.workload.presets import get_preset
from compiled_work import compiled


def _clusters():
    h100 = load_cluster("dgx-h100", nodes=8)
    a100 = load_cluster("dgx-a100", nodes=6)
    return {
        "a100 preset, 48 nodes, leaves of 20": load_cluster("dgx-a100", nodes=48),
        "h100, leaves of 2, shared uplinks": replace(h100, network=replace(
            h100.network, nodes_per_leaf=2, oversubscription=2.0, leaf_uplinks=LeafUplinks.SHARED)),
        "h100, leaves of 2, per-NIC uplinks, no GPUDirect": replace(h100, network=replace(
            h100.network, nodes_per_leaf=2, oversubscription=3.0, gpudirect_rdma=False)),
        "a100, leaves of 3, not rail-optimised": replace(a100, network=replace(
            a100.network, nodes_per_leaf=3, rail_optimized=False, oversubscription=4.0)),
        "pcie-a100, one leaf tier": load_cluster("pcie-a100", nodes=4),
        "dgx-v100 (NVLink mesh)": load_cluster("dgx-v100", nodes=4),
        "a job's view: 6 of 48 a100 nodes, across the leaf at 20": placed(
            load_cluster("dgx-a100", nodes=48), (3, 18, 19, 20, 21, 40)),
    }


CLUSTERS = _clusters()


@st.composite
def _move(draw):
    """A link and a moved one: its nodes shifted (a replica on other nodes), its GPUs shifted on their nodes
    (a replica on other NICs), or both; now and then an arbitrary other link."""
    name = draw(st.sampled_from(sorted(CLUSTERS)))
    cluster = CLUSTERS[name]
    gpn, nodes, nics = cluster.node.gpus_per_node, cluster.nodes, cluster.node.nics_per_node
    ranks = st.integers(0, cluster.world_size - 1)
    a, b = draw(ranks), draw(ranks)
    if a == b:
        b = (a + 1) % cluster.world_size
    nic = draw(st.one_of(st.none(), st.integers(0, max(nics - 1, 0)))) if nics else None
    if draw(st.integers(0, 9)) == 0:
        a2, b2 = draw(ranks), draw(ranks)
        if a2 == b2:
            b2 = (a2 + 1) % cluster.world_size
        nic2 = nic
    else:
        dn, dl = draw(st.integers(0, nodes - 1)), draw(st.integers(0, gpn - 1))
        moved = [((r // gpn + dn) % nodes) * gpn + (r % gpn + dl) % gpn for r in (a, b)]
        a2, b2 = moved
        nic2 = None if nic is None else (nic + draw(st.integers(0, max(nics - 1, 0)))) % nics
    return name, (a, b, nic), (a2, b2, nic2)


@settings(max_examples=400, deadline=None)
@given(case=_move())
def test_a_renamed_path_equals_the_path_rebuilt_there(case):
    name, link, moved = case
    cluster = CLUSTERS[name]
    p = translated(cluster, path(cluster, *link), link, moved)
    if p is not None:
        assert p == path(cluster, *moved)


A100_48 = CLUSTERS["a100 preset, 48 nodes, leaves of 20"]


def test_the_rule_applies_to_replicas_and_refuses_where_paths_differ():
    gpn = 8
    inside, across = (3, 5, None), (0, 8 * gpn, None)  # GPUs 3 → 5 of node 0; node 0 → node 8 on GPU 0
    assert translated(A100_48, path(A100_48, *inside), inside, (8 * 7 + 3, 8 * 7 + 5, None)) is not None
    assert translated(A100_48, path(A100_48, *inside), inside, (8 * 7 + 4, 8 * 7 + 5, None)) is None  # other GPU
    # across nodes: another rail (tp replica), other nodes in the same leaf relation (dp replica)
    assert translated(A100_48, path(A100_48, *across), across, (5, 8 * gpn + 5, None)) is not None
    assert translated(A100_48, path(A100_48, *across), across, (gpn, 9 * gpn, None)) is not None
    # nodes 15 → 23 cross the leaf boundary at 20 where nodes 0 → 8 do not: the path gains a leaf uplink
    assert translated(A100_48, path(A100_48, *across), across, (15 * gpn, 23 * gpn, None)) is None
    shared = CLUSTERS["h100, leaves of 2, shared uplinks"]
    crossing = (0, 2 * gpn, None)  # nodes 0 → 2, leaves 0 → 1: shared leaf links, named by leaf
    assert translated(shared, path(shared, *crossing), crossing, (2 * gpn, 4 * gpn, None)) is None
    sick = replace(A100_48, degraded_nics=(DegradedNic(node=40, nic=0, bw_fraction=0.5),))
    assert translated(sick, path(sick, *across), across, (gpn, 9 * gpn, None)) is None


def test_a_renaming_must_send_each_node_and_nic_to_one_place():
    links = [(0, 8, None), (8, 16, None)]  # nodes 0 → 1 → 2 on rail 0
    ok = renaming(A100_48, links, [(24, 32, None), (32, 40, None)])
    assert ok is not None
    assert set(renamed({h.resource for ln in links for h in path(A100_48, *ln).hops}, ok)) == \
        {h.resource for ln in [(24, 32, None), (32, 40, None)] for h in path(A100_48, *ln).hops}
    assert renaming(A100_48, links, [(24, 32, None), (40, 48, None)]) is None  # node 1 sent to nodes 4 and 5


def _work():
    """tp 8, pp 4, dp 12 on 48 DGX A100 nodes (leaves of 20): dp groups and pipeline sends whose replicas cross
    leaf boundaries at other places than their representatives."""
    cluster = A100_48
    work = compiled(cluster, Strategy(global_batch=24, tp=8, pp=4), get_preset("gpt3-1.3b"), fwd_s=0.01, bwd_s=0.02)
    return cluster, work


@pytest.mark.parametrize("degraded", [False, True], ids=["uniform", "degraded-nic"])
def test_replica_links_renamed_equal_those_asked_of_the_topology(monkeypatch, degraded):
    cluster, work = _work()
    if degraded:
        cluster = replace(cluster, degraded_nics=(DegradedNic(node=9, nic=0, bw_fraction=0.25),))
    runs = {}
    for translate in (True, False):
        monkeypatch.setattr(CallPlanner, "translate", translate)
        ctx = step_engine._Ctx(work, cluster, False, True, unrolled=False)
        runner = ctx.runner
        links = {key: runner._resources.get(key) for key in runner._resources}
        runs[translate] = (dict(runner._replicas), links, len(runner._env(None)._paths), runner.isolated)
    assert runs[True][0] == runs[False][0]  # the same replicas kept
    assert runs[True][1] == runs[False][1]  # every replica's links
    assert runs[True][3] == runs[False][3]
    if degraded:
        assert runs[True][2] == runs[False][2]  # nothing renamed: every path asked
    else:
        assert runs[True][2] < runs[False][2] / 2  # most replicas' paths never asked


@pytest.mark.parametrize("slow", [None, 1.5], ids=["uniform", "straggler"])
def test_step_times_with_and_without_renaming_are_the_same(monkeypatch, slow):
    """A straggler changes no path: replicas are kept by their links either way (its pipeline is timed alone)."""
    cluster, work = _work()
    if slow is not None:
        model = StragglerModel(speed_factors=tuple(slow if r == 100 else 1.0 for r in range(cluster.world_size)))
        work = replace(work, strategy=replace(work.strategy, stragglers=model))
    on = simulate(work, cluster, trace=False, unrolled=False)
    monkeypatch.setattr(CallPlanner, "translate", False)
    off = simulate(work, cluster, trace=False, unrolled=False)
    assert on.step_time_s == off.step_time_s
    assert on.extras["flows"] == off.extras["flows"] and on.extras["events"] == off.extras["events"]
