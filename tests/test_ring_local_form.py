"""The ring's local form against the schedule it stands in for (des25, issue 12).

``Ring.local_steps`` gives the reduce-scatter / all-gather / all-reduce steps the engine used to read from
:meth:`Algorithm.schedule` (group indices, NICs by index in the sender node's set) without listing the
``2(p−1)·p·C`` ``Transfer`` objects of :func:`ring_transfers`: one ring step's content per distinct rotation of
the slice lengths, the same tuple for every step when the bytes divide evenly. It must give the same contents,
step sequence, pairs and ``reduce_bytes_per_rank`` (==) on every group shape and byte count (uneven slices and
empty ones included: 9 bytes over 4 ranks are 4, 4, 0 and 1 bytes), and a plan built from it must equal one
built from the schedule. ``LocalSchedule.fused`` now builds each distinct content's row once; it must give the
lists the per-step loop gave (the reference below).

des26: when every transfer has bytes (uneven splits included) the steps are ``RotatedStep``s sharing one links tuple
and length array, one object per distinct rotation; the same checks hold (contents compare equal to the tuples), and
``plan_bw.steps_bw_sum`` over ``StepRows`` of the local form equals the one over the localised schedule's.
"""

import numpy as np
import pytest
from hypothesis import assume, example, given, settings, strategies as st

from simulator.cluster.presets import load_preset
import simulator.collectives.chain as chain
from simulator.collectives.algorithm import sub_slices
from simulator.collectives.base import Op
from simulator.collectives.chain import chain_latency_s, chain_latency_steps_s
from simulator.collectives.cost import Env, Group
from simulator.collectives.registry import get_algorithm
from simulator.collectives.rotated import RotatedStep
import simulator.engine.plan_bw as plan_bw
from simulator.engine.plan_bw import StepRows, steps_bw_sum
from simulator.engine.shapes import LocalSchedule
from simulator.work import CollectiveAlgorithm

from local_form_plans import assert_local_form_plans_equal

A100 = load_preset("dgx-a100")
RING = get_algorithm("ring")
FAST = settings(max_examples=30, deadline=None)
OPS = (Op.ALL_REDUCE, Op.REDUCE_SCATTER, Op.ALL_GATHER)


def _group(nodes: int, per_node: int, first_gpu: int) -> Group:
    gpus = [(first_gpu + 3 * i) % 8 for i in range(per_node)]
    return Group(A100.with_nodes(nodes), tuple(8 * n + g for n in range(nodes) for g in gpus))


def _old_fused(local: LocalSchedule, wire: float, fuse: bool) -> list:
    """``LocalSchedule.fused`` as it was before des25: every step's row built again in the loop."""
    out, last = [], None
    for k in local.sequence:
        content = [t for t in local.contents[k] if t[2] > 0]
        if not content:
            continue
        shape = tuple((s, d, n) for s, d, _, n in content)
        nbytes = np.array([float(b) for _, _, b, _ in content])
        if fuse and shape == last:
            out[-1] = (shape, out[-1][1] + nbytes * wire)
        else:
            out.append((shape, nbytes * wire))
            last = shape
    return [(shape, b.tolist()) for shape, b in out]


@FAST
@given(nodes=st.integers(1, 24), per_node=st.sampled_from([1, 2, 3, 8]), first_gpu=st.integers(0, 7),
       op=st.sampled_from(OPS),
       nbytes=st.one_of(st.integers(0, 64), st.integers(1, 2**31), st.sampled_from([12 * 2**20, 2**30 + 3])))
@example(nodes=4, per_node=1, first_gpu=0, op=Op.ALL_REDUCE, nbytes=9)  # slices of 4, 4, 0 and 1 bytes
@example(nodes=3, per_node=8, first_gpu=0, op=Op.ALL_REDUCE, nbytes=24 * 2**20)  # even: one content
@example(nodes=2, per_node=1, first_gpu=0, op=Op.REDUCE_SCATTER, nbytes=0)  # no bytes: no steps
@example(nodes=8, per_node=8, first_gpu=0, op=Op.ALL_REDUCE, nbytes=9_844_736 + 4)  # uneven, 512 flows a step
@example(nodes=7, per_node=3, first_gpu=3, op=Op.ALL_REDUCE, nbytes=14_137_344)  # uneven over 21 ranks, 3 channels
def test_local_steps_are_the_schedules_steps_in_local_form(nodes, per_node, first_gpu, op, nbytes):
    if nodes * per_node < 2:
        return  # a group needs two ranks
    assume(nodes * per_node <= 128)  # the reference schedule lists 2(p-1)·p·C transfers: 192 ranks took 9 s an example
    group = _group(nodes, per_node, first_gpu)
    schedule = RING.schedule(group, op, nbytes)
    built = LocalSchedule(schedule, group)
    direct = LocalSchedule.of_local("ring", group, RING.local_steps(group, op, nbytes))
    for name in ("algorithm", "reduce_bytes_per_rank", "contents", "sequence", "pairs"):
        assert getattr(direct, name) == getattr(built, name), name
    assert len(direct.sequence) == schedule.num_steps and direct.schedule is None
    assert len(direct.contents) <= group.p  # one per distinct rotation at most, not one per step
    if all(n > 0 for sl in sub_slices(nbytes, group.p, group.channels) for _, n in sl):  # des26: rotated, shared
        assert all(isinstance(c, RotatedStep) for c in direct.contents)
        assert len({id(c.links) for c in direct.contents}) == 1  # one links tuple; contents == built's: one per content
    env = Env(group.cluster, None, group.paths, family="ring", group=group)
    paths = [env.path(*link) for link in built.links(group)]
    reference = steps_bw_sum(StepRows(built), env, paths)
    small = group.p * group.channels < plan_bw.VECTOR_MIN_FLOWS
    for floor in (plan_bw.VECTOR_MIN_FLOWS, 0) if small else (plan_bw.VECTOR_MIN_FLOWS,):  # small: numpy rows too
        saved, plan_bw.VECTOR_MIN_FLOWS = plan_bw.VECTOR_MIN_FLOWS, floor
        try:
            assert steps_bw_sum(StepRows(direct), env, paths) == reference  # Σ step_bw_s, ==
        finally:
            plan_bw.VECTOR_MIN_FLOWS = saved
    for protocol in (None, *group.cluster.comm.protocols):  # the chain from step shapes: the float of every step's flows
        env = Env(group.cluster, protocol, group.paths, family="ring", group=group)
        assert env.chain_latency_s(direct.chain_flow_steps(group)) == env.chain_latency_s(built.flow_steps(group))
    for wire in (1.0, 1 / 0.7):
        for fuse in (False, True):
            assert direct.fused(wire, fuse) == _old_fused(built, wire, fuse)


def _period(group: Group, nbytes: int) -> int:
    """Distinct rotations of the per-position slice lengths, by brute force."""
    lengths = [tuple(n for _, n in sub_slices(nbytes, group.p, group.channels)[i]) for i in group.order]
    return len({tuple(lengths[(i - r) % group.p] for i in range(group.p)) for r in range(group.p)})


def test_rotations_repeat_with_the_lengths_period():
    # an all-reduce uses every rotation: as many step objects as distinct rotations of the lengths (brute force), on
    # a few shapes and every remainder of the bytes, so equal rotations are one object (LocalSchedule dedups by id)
    for nodes, per_node, first_gpu in ((4, 2, 0), (3, 3, 1), (6, 1, 0), (2, 8, 5)):
        group = _group(nodes, per_node, first_gpu)
        for nbytes in (4 * group.p * group.channels * 7 + 4 * k for k in range(group.p * group.channels)):
            steps = RING.local_steps(group, Op.ALL_REDUCE, nbytes).steps
            assert len({id(s) for s in steps}) == _period(group, nbytes)
            assert len({tuple(s) for s in steps}) == _period(group, nbytes)


def test_broadcast_and_reduce_have_no_local_form():
    group = _group(2, 2, 0)
    assert RING.local_steps(group, Op.BROADCAST, 64) is None and RING.local_steps(group, Op.REDUCE, 64) is None


@pytest.mark.parametrize("nbytes", [12 * 2**20, 3 * 2**20 + 6, 4100])
@pytest.mark.parametrize("sick", [False, True], ids=["uniform", "degraded-nic"])
def test_plans_from_the_local_form_equal_plans_from_the_schedule(nbytes, sick, monkeypatch):
    assert_local_form_plans_equal(CollectiveAlgorithm.RING, nbytes, sick, monkeypatch)


edge = st.tuples(st.integers(0, 40), st.integers(0, 40), st.floats(0.0, 1e-3, allow_nan=False))


@FAST
@given(distinct=st.lists(st.lists(edge, max_size=300), min_size=1, max_size=4),
       order=st.lists(st.integers(0, 3), max_size=40))
@example(distinct=[[(i, (i + 1) % 64, 1e-6 * (1 + i % 3)) for i in range(64)]], order=[0] * 126)  # a ring
def test_vectorised_chain_is_the_loops_float(distinct, order):
    # chain.py's numpy path (large schedules) against its loop, ==, on steps repeated in any order
    order = [k % len(distinct) for k in order]
    loop = chain_latency_s(distinct[k] for k in order)
    assert chain_latency_steps_s(distinct, order) == loop
    saved, chain.VECTOR_MIN_EDGES = chain.VECTOR_MIN_EDGES, 0  # the numpy path on every size
    try:
        assert chain_latency_steps_s(distinct, order) == loop
    finally:
        chain.VECTOR_MIN_EDGES = saved
