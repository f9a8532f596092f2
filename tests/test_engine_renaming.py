"""Rates and replays do not depend on how the flow network numbers its resources.

Progressive filling breaks ties between resources of equal fair share by their first appearance in the
rating (simulator/engine/fairshare.py), not by their index; the network reads an index only as a name. So a
set of flows rated, or a call replayed, under any renaming of its resources gives the same floats, and
simulator/engine/callfold_shapes.py shares one replay between calls whose flows are renamed copies of one
another (``_signature`` numbers resources by first appearance). These tests compare with ``==``: the claim is
bit-identity, not closeness.
"""

import random

import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from simulator.engine import fairshare
from simulator.engine.call_plan import CallPlan
from simulator.engine.callfold_replay import _scratch_play
from simulator.engine.callfold_shapes import _STEP_SIGNATURES, _Shape, _signature, _step_alone
from simulator.engine.network import FlowNetwork
from simulator.engine.settle_clock import SETTLE_PRIORITY
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
    """The call on resources named ``tag + r``, with a replica on resources of its own (two plans: played
    together, signed by ``_signature``); paths made once per distinct route (as a plan shares them)."""
    made: dict = {}

    def p(name, route):
        if (name, route) not in made:
            made[(name, route)] = path(*((f"{name}{r}", caps[r] / 3) for r in route))
        return made[(name, route)]

    return [CallPlan(0.0, [[(p(name, tuple(r)), b * 1e6, 0.0) for r, b in step] for step in steps], 0.0)
            for name in (tag, tag + "'")]


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
        net.resources(path((f"b'{r}", caps[r] / 3)))
        net.resources(path((f"b{r}", caps[r] / 3)))
    a, b = _plans("a", caps, steps), _plans("b", caps, steps)
    assert _signature(net, a) == _signature(net, b)
    assert _Shape(net, a, {}).durations(net, start) == _Shape(net, b, {}).durations(net, start)
    shared: dict = {}
    assert _Shape(net, a, shared)._durations is _Shape(net, b, shared)._durations


@st.composite
def _chains(draw):
    """One plan of 1–5 steps over local resources 0..5: flows with bytes and (some) latencies; steps repeat."""
    caps = draw(st.lists(st.sampled_from([3, 6, 9, 12]), min_size=6, max_size=6))
    flow = st.tuples(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),
                     st.sampled_from([1.0, 2.0, 3.0, 7.0]), st.sampled_from([0.0, 0.0, 1e-6, 3e-5]))
    distinct = draw(st.lists(st.lists(flow, min_size=1, max_size=8), min_size=1, max_size=3))
    order = draw(st.lists(st.integers(0, len(distinct) - 1), min_size=1, max_size=5))
    pre, gamma = draw(st.sampled_from([0.0, 2e-5])), draw(st.sampled_from([0.0, 1e-5]))
    return caps, [distinct[i] for i in order], pre, gamma


def _chain_plan(tag, caps, steps, pre, gamma):
    made: dict = {}

    def p(route):
        if route not in made:
            made[route] = path(*((f"{tag}{r}", caps[r] / 3) for r in route))
        return made[route]

    built = {id(s): [(p(tuple(r)), b * 1e6, lat) for r, b, lat in s] for s in steps}  # a repeated step: one list
    return CallPlan(pre, [built[id(s)] for s in steps], gamma)


def _full_end(net, plan, start):
    env, _, players = _scratch_play(net, [plan], start)
    env.run()
    return players[0].end_s


_TIE_CHAIN = ([3] * 6, [[([0], 1.0, 0.0), ([0], 1.0, 1e-06), ([0], 1.0, 1e-06)]] * 5, 0.0, 0.0)
"""Five equal steps of 3 ms from 0: the steps from 0.009 and 0.012 s (one binade, odd and even multiples of its
spacing) end an ulp apart from what one memo would give (found by hypothesis; memos per binade alone fail it)."""


@settings(max_examples=150, deadline=None)
@example(_TIE_CHAIN, 0.0)
@given(_chains(), st.sampled_from([0.0, 0.37, 3.0, 31.9999]))
def test_a_plan_chained_from_its_steps_ends_where_its_replay_ends(chain, start):
    """A single plan's durations chained step by step (each step played alone, memoised per step signature
    and binade, shared with another plan of the same steps on other resources) are the bits a replay of the
    whole plan gives; the start near 32 s makes steps cross a binade."""
    caps, steps, pre, gamma = chain
    net = FlowNetwork(simpy.Environment())
    a, b = _chain_plan("a", caps, steps, pre, gamma), _chain_plan("b", caps, steps, pre, gamma)
    timings: dict = {}
    signed = []
    for plan in (a, b):
        shape = _Shape(net, [plan], timings)
        got = shape.durations(net, start)
        end = _full_end(net, plan, start)
        assert got == (end - start, end - start)
        signed.append(len(timings[_STEP_SIGNATURES]))
    assert signed[0] == signed[1] <= len({id(s) for s in a.steps})  # b's steps share a's memos


def _state(env, scratch, players, now):
    """What an unfold moves: unfinished flows (relative order, progress, filed finishes, pending arrivals), the
    wake-up, each player's phase and step."""
    due = sorted((f.fid, t) for t, bucket in scratch._due.items() for f, v in bucket if f.active and f.version == v)
    first = min([fid for fid, _ in due] + [f.fid for fl in scratch._arrivals.values() for f in fl], default=0)
    flows = sorted([(f.fid - first, id(f.path), f.nbytes, f.remaining, f.rate, f.t_last, f.active_s, f.active)
                    for t, bucket in scratch._due.items() for f, v in bucket if f.active and f.version == v]
                   + [(f.fid - first, id(f.path), f.nbytes, f.remaining, f.rate, f.t_last, f.active_s, f.active, t)
                      for t, fl in scratch._arrivals.items() for f in fl])
    wake = [t for t, _, _, event in env._queue if event is scratch._wake]
    return (flows, [(fid - first, t) for fid, t in due], scratch._wake_at, wake,
            [(p.phase, p.i, p.plan is players[0].plan) for p in players])


@settings(max_examples=150, deadline=None)
@given(_chains(), st.sampled_from([0.0, 0.37, 3.0]), st.floats(0.0, 1.2))
def test_an_unfold_replays_only_the_step_in_flight_and_finds_the_same_state(chain, start, at):
    """``_Shape.scratch_at`` (what an unfold moves onto the main network) from the step in flight at ``now``
    gives the state a replay of the whole plan from its start stopped there gives."""
    caps, steps, pre, gamma = chain
    net = FlowNetwork(simpy.Environment())
    plan = _chain_plan("a", caps, steps, pre, gamma)
    shape = _Shape(net, [plan], {})
    now = start + at * shape.durations(net, start)[0]
    got = shape.scratch_at(net, start, now)
    env, scratch, players = _scratch_play(net, [plan], start)
    queue = env._queue
    while queue and (queue[0][0] < now or (queue[0][0] == now and queue[0][1] < SETTLE_PRIORITY)):
        env.step()
    assert _state(*got, now) == _state(env, scratch, players, now)


def test_a_step_that_leaves_a_wake_up_behind_is_not_chained():
    """A on r0 (1 GB/s, 1 MB, no latency) files a wake-up at +1 ms; B on r1 (2 GB/s, 1 MB, 1 µs) arrives and files
    an earlier one (+0.501 ms), after which A's end is filed again: two wake-ups for A's end, one left in the
    queue after the step ends. The step is not chained (``_step_alone`` says None) and the plan's durations are
    those of its whole replay."""
    caps = [3, 6, 3, 3, 3, 3]
    first = [([0], 1.0, 0.0), ([1], 1.0, 1e-6)]
    plan = _chain_plan("a", caps, [first, [([0], 2.0, 0.0)]], 0.0, 0.0)
    net = FlowNetwork(simpy.Environment())
    assert _step_alone(net, plan.steps[0], 0.37) is None
    end = _full_end(net, plan, 0.37)
    assert _Shape(net, [plan], {}).durations(net, 0.37) == (end - 0.37, end - 0.37)
