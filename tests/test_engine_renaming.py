"""Rates and replays do not depend on how the flow network numbers its resources.

Progressive filling breaks ties between resources of equal fair share by their first appearance in the
rating (simulator/engine/fairshare.py), not by their index; the network reads an index only as a name. So a
set of flows rated, or a call replayed, under any renaming of its resources gives the same floats, and
simulator/engine/callfold_replay.py shares one replay between calls whose flows are renamed copies of one
another (``_signature`` numbers resources by first appearance). These tests compare with ``==``: the claim is
bit-identity, not closeness.
"""

import random

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import fairshare
from simulator.engine.call_plan import CallPlan
from simulator.engine.callfold_replay import _Shape, _signature
from simulator.engine.network import FlowNetwork
from test_engine_network import GBps, path


class _Rated:
    def __init__(self, res, cap):
        self.res, self.bottleneck_Bps, self.rate = res, min(cap[r] for r in res), 0.0


_routes = st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True), min_size=2, max_size=40)
_caps = st.lists(st.sampled_from([3, 5, 6, 7, 10]), min_size=8, max_size=8)  # few values: many equal shares


@settings(max_examples=300, deadline=None)
@given(_routes, _caps, st.randoms(use_true_random=False))
def test_rates_are_the_same_bits_under_any_numbering_of_the_resources(routes, caps, rnd):
    """Both fillers: the flows rated with resource ``r`` renamed ``perm[r]`` (capacities moved along) get the
    same rates to the bit. Breaking ties by the lower index instead fails this (a tie between two resources
    that share a flow: fixing one first moves the other's share by an ulp)."""
    cap = [c * GBps / 3 for c in caps]
    perm = list(range(8))
    rnd.shuffle(perm)
    cap2 = [0.0] * 8
    for r, q in enumerate(perm):
        cap2[q] = cap[r]
    for fill in (fairshare.max_min, _levels):
        one = [_Rated(tuple(r), cap) for r in routes]
        two = [_Rated(tuple(perm[q] for q in r), cap2) for r in routes]
        fill(one, cap)
        fill(two, cap2)
        assert [f.rate for f in one] == [f.rate for f in two]


def _levels(flows, cap):
    fairshare._max_min_levels(flows, cap, sum(len(f.res) for f in flows))


@st.composite
def _calls(draw):
    """A call of 1–3 steps over local resources 0..5 (capacities from a few values), each flow's bytes."""
    caps = draw(st.lists(st.sampled_from([3, 6, 9, 12]), min_size=6, max_size=6))
    steps = draw(st.lists(st.lists(st.tuples(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),
                                             st.sampled_from([1.0, 2.0, 3.0, 7.0])),
                                   min_size=1, max_size=12), min_size=1, max_size=3))
    return caps, steps


def _plans(tag: str, caps, steps):
    """The call on resources named ``tag + r``; paths made once per distinct route (as a plan shares them)."""
    made: dict = {}

    def p(route):
        if route not in made:
            made[route] = path(*((f"{tag}{r}", caps[r] / 3) for r in route))
        return made[route]

    return [CallPlan(0.0, [[(p(tuple(r)), b * 1e6, 0.0) for r, b in step] for step in steps], 0.0)]


@settings(max_examples=150, deadline=None)
@given(_calls(), st.randoms(use_true_random=False), st.sampled_from([0.0, 0.37, 3.0]))
def test_calls_equal_up_to_a_renaming_replay_to_the_same_bits(call, rnd, start):
    """Two copies of a call on disjoint resources that the network numbered in another relative order (the
    second's resources registered in a shuffled order first): one signature, and each copy's own replay gives
    the same durations to the bit, so sharing the replay between them is exact."""
    caps, steps = call
    net = FlowNetwork(simpy.Environment())
    order = list(range(6))
    rnd.shuffle(order)
    for r in order:  # number b's resources first, in a shuffled order
        net.resources(path((f"b{r}", caps[r] / 3)))
    a, b = _plans("a", caps, steps), _plans("b", caps, steps)
    assert _signature(net, a) == _signature(net, b)
    assert _Shape(net, a, {}).durations(net, start) == _Shape(net, b, {}).durations(net, start)
    shared: dict = {}
    _Shape(net, a, shared)
    _Shape(net, b, shared)
    assert len(shared) == 1
