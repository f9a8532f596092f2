"""Σ step_bw_s of a plan from its pairs' paths (simulator/engine/plan_bw.py) against the cost model's own loop,
``Env.step_bw_s`` on each step's flows: the same floats (``==``), by numpy and by the plain loop."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.facts import DegradedNic
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.collectives.cost import Env, Flow, Group
from simulator.collectives.registry import build_schedule, get_algorithm
from simulator.engine import plan_bw
from simulator.engine.plan_bw import StepRows, steps_bw_sum
from simulator.engine.shapes import LocalSchedule, links_of
from simulator.errors import SpecError

A100 = load_preset("dgx-a100")
ALGORITHMS = ["ring", "tree", "halving_doubling", "recursive_doubling", "hierarchical", "direct"]
SICK = replace(A100.with_nodes(48), degraded_nics=(DegradedNic(node=4, nic=0, bw_fraction=0.02),))
GROUPS = [(A100.with_nodes(4), tuple(range(32))), (A100.with_nodes(4), (0, 8, 16, 24)),
          (A100.with_nodes(4), (0, 1, 8, 9)),
          (A100.with_nodes(48), tuple(8 * s + 32 * d for d in range(12) for s in (0,))),
          (SICK, tuple(3 + 32 * d for d in range(12))),
          (SICK, tuple(r + 8 * n for n in range(0, 48, 4) for r in (2, 6)))]
"""Every GPU of 4 nodes; one GPU per node; two GPUs on two nodes; dp groups of tp 8 × pp 4 × dp 12 on 48 nodes (20
per leaf, crossing leaves), one with a NIC at 2 % on its path, and one of two GPUs per node."""


def _reference(env, local, group) -> float:
    """call_plan's sum before plan_bw: Env.step_bw_s of each distinct step's flows, added in step order."""
    flow_steps = local.flow_steps(group)
    step_bw_s = {id(s): env.step_bw_s(s) for s in {id(s): s for s in flow_steps}.values()}
    return sum(step_bw_s[id(s)] for s in flow_steps)


def _runs(cluster, ranks, op, name) -> bool:
    """Whether ``name`` implements ``op`` on this group (the cases only hold the combinations that exist)."""
    try:
        build_schedule(cluster, ranks, op, 3 * 2**20 + 4, name)
    except SpecError:
        return False
    return True


def _cases():
    for cluster, ranks in GROUPS:
        for name in ALGORITHMS:
            for op in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER):
                if _runs(cluster, ranks, op, name):
                    yield pytest.param(cluster, ranks, name, op, id=f"{name}-{op.value}-{len(ranks)}r-{ranks[1]}"
                                       f"-{'sick' if cluster is SICK else cluster.world_size}")


@pytest.mark.parametrize("vector_min", [1, 64, 10**9], ids=["numpy", "default", "loop"])
@pytest.mark.parametrize("cluster,ranks,name,op", list(_cases()))
def test_the_sum_equals_env_step_bw_s_step_by_step(monkeypatch, cluster, ranks, name, op, vector_min):
    monkeypatch.setattr(plan_bw, "VECTOR_MIN_FLOWS", vector_min)
    schedule = build_schedule(cluster, ranks, op, 3 * 2**20 + 4, name)
    group = Group(cluster, ranks)
    local = LocalSchedule(schedule, group)
    rows = StepRows(local)
    family = get_algorithm(schedule.algorithm).family
    for protocol in (None, *cluster.comm.protocols):
        env = Env(cluster, protocol, family=family)
        paths = [env.path(*link) for link in links_of(local.pairs, group)]
        assert steps_bw_sum(rows, env, paths) == _reference(env, local, group)


_CLUSTER = A100.with_nodes(24)
_RANKS = tuple(range(0, 24 * 8, 3))


@st.composite
def _schedules(draw):
    """Steps of flows between GPUs of 24 nodes (across leaves, on any NIC) with bytes of mixed magnitudes, so a
    resource's load rounds differently if its additions are taken in another order."""
    n = len(_RANKS)
    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(0, 7)).filter(lambda p: p[0] != p[1])
    pair = st.sampled_from(draw(st.lists(pair, min_size=1, max_size=12)))  # few pairs: resources shared often
    nbytes = st.one_of(st.sampled_from([0, 1, 2, 2**53]), st.integers(0, 2**53))  # 2^53 + 1 + 1 ≠ 1 + 1 + 2^53
    contents = draw(st.lists(st.lists(st.tuples(pair, nbytes), min_size=0, max_size=100), min_size=1, max_size=4))
    node = [r // 8 for r in _RANKS]
    contents = [tuple((s, d, b, None if node[s] == node[d] else nic) for (s, d, nic), b in c) for c in contents]
    sequence = draw(st.lists(st.integers(0, len(contents) - 1), min_size=1, max_size=8))
    pairs = tuple(dict.fromkeys((s, d, n) for c in contents for s, d, b, n in c if b > 0))
    return SimpleNamespace(contents=contents, sequence=sequence, pairs=pairs)


@settings(max_examples=100, deadline=None)
@given(local=_schedules(), vector_min=st.sampled_from([1, 5, 64]))
def test_the_sum_keeps_each_resource_s_additions_in_flow_order(local, vector_min):
    """Hypothesis: arbitrary steps (a flow's GPU pair and NIC index, bytes from 0 to 2^53) give Env.step_bw_s's sum."""
    env = Env(_CLUSTER, None)
    links = {p: (_RANKS[p[0]], _RANKS[p[1]], p[2]) for p in local.pairs}
    paths = [env.path(*links[p]) for p in local.pairs]
    steps = [[Flow(_RANKS[s], _RANKS[d], b, n) for s, d, b, n in local.contents[k]] for k in local.sequence]
    saved = plan_bw.VECTOR_MIN_FLOWS
    plan_bw.VECTOR_MIN_FLOWS = vector_min
    try:
        got = steps_bw_sum(StepRows(local), env, paths)
    finally:
        plan_bw.VECTOR_MIN_FLOWS = saved
    assert got == sum(env.step_bw_s(s) for s in steps)


def test_a_resource_s_load_is_added_in_flow_order():
    """2^53 + 1 + … + 1 = 2^53 in flow order (each 1 rounds off), 2^53 + 100 the other way round: the step's term
    is the former, by numpy as by the loop (101 flows on one pair)."""
    env = Env(_CLUSTER, None)
    nbytes = (2**53,) + (1,) * 100
    local = SimpleNamespace(contents=[tuple((0, 9, b, 0) for b in nbytes)], sequence=[0], pairs=((0, 9, 0),))
    path = env.path(_RANKS[0], _RANKS[9], 0)
    in_order = reversed_order = 0.0
    for b, c in zip(nbytes, reversed(nbytes)):
        in_order, reversed_order = in_order + b, reversed_order + c
    assert in_order != reversed_order
    expected = max(in_order / env.bw_Bps(h) for h in path.hops)
    assert env.step_bw_s([Flow(_RANKS[0], _RANKS[9], b, 0) for b in nbytes]) == expected
    assert steps_bw_sum(StepRows(local), env, [path]) == expected
