"""A chunk pipeline's latency from a shared local schedule and one group's α (simulator/engine/plan_latency.py)
against :func:`pipeline_latency_s` on a schedule built for that group: the same floats (``==``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.facts import DegradedNic
from simulator.cluster.presets import load_preset
from simulator.collectives.algorithm import pipeline_latency_s
from simulator.collectives.base import Op
from simulator.collectives.cost import Env, Group
from simulator.collectives.registry import build_schedule
from simulator.engine.plan_latency import PipelineRows, pipeline_latency
from simulator.engine.shapes import ScheduleCache

A100 = load_preset("dgx-a100")
H100 = load_preset("dgx-h100")


def _check(cluster, groups, op, nbytes, name="tree"):
    """Every group's latency from the first group's local schedule (shared by key) equals a fresh build's, under
    every protocol; returns how many local schedules were shared."""
    cache = ScheduleCache(cluster)
    for g in groups:
        group = Group(cluster, g)
        local = cache.get(group, op, nbytes, name, lambda: build_schedule(cluster, g, op, nbytes, name))
        fresh = build_schedule(cluster, g, op, nbytes, name)
        for protocol in (None, *cluster.comm.protocols):
            env = Env(cluster, protocol, family=name)
            alphas = [env.latency_s(env.path(*link)) for link in local.links(group)]
            assert pipeline_latency(PipelineRows(local), env, alphas) == pipeline_latency_s(env, fresh)
    return len(cache._shared)


_DP = [tuple(t + 8 * s + 32 * d for d in range(12)) for s in (0, 3) for t in (0, 5)]
"""dp groups of tp 8 × pp 4 × dp 12 on 48 DGX A100 nodes (20 per leaf): stages 0 and 3 cross leaves at other places,
tp index 5 on another NIC."""


@pytest.mark.parametrize("nbytes", [12 * 2**20, 3 * 2**20 + 6, 4096])
def test_tree_groups_sharing_a_local_schedule_get_their_own_pipeline_latency(nbytes):
    assert _check(A100.with_nodes(48), _DP, Op.ALL_REDUCE, nbytes) == 1


def test_a_degraded_nic_and_two_gpus_per_node():
    sick = replace(A100.with_nodes(48), degraded_nics=(DegradedNic(node=4, nic=0, bw_fraction=0.02),))
    _check(sick, _DP + [tuple(r + 8 * n for n in range(0, 48, 4) for r in (2, 6))], Op.ALL_REDUCE, 12 * 2**20)


@pytest.mark.parametrize("op", [Op.BROADCAST, Op.REDUCE])
def test_the_chained_ring_broadcast_and_reduce(op):
    """The ring's chunk-pipelined ops (a schedule per group: no key)."""
    _check(A100.with_nodes(6), [tuple(range(0, 48, 4)), (0, 1, 8, 9, 40, 41)], op, 5 * 2**20 + 2, "ring")


@settings(max_examples=25, deadline=None)
@given(nodes=st.integers(2, 24), per_node=st.sampled_from([1, 2, 4, 8]), first=st.integers(0, 7),
       stride=st.integers(1, 3), nbytes=st.integers(1, 64 * 2**20), h100=st.booleans())
def test_hypothesis_layouts(nodes, per_node, first, stride, nbytes, h100):
    """Groups of ``per_node`` GPUs on every ``stride``-th node (from GPU ``first`` of each), trees of any size."""
    base = H100 if h100 else A100
    cluster = base.with_nodes(nodes * stride)
    gpn = cluster.node.gpus_per_node
    ranks = tuple(n * stride * gpn + (first + i) % gpn for n in range(nodes) for i in range(per_node))
    shifted = tuple(r + gpn for r in ranks) if stride > 1 else None  # the same shape one node on
    _check(cluster, [ranks] + ([shifted] if shifted else []), Op.ALL_REDUCE, nbytes)
