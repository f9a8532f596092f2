"""One play of a step alone serves both parities of its binade when it meets no rounding tie
(simulator/engine/step_ties.py). Compared with ``==``: the claim is bit-identity with a fresh replay."""

import math

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.callfold_shapes import _STEP_SIGNATURES, _Shape, _binade
from simulator.engine.network import FlowNetwork
from simulator.engine.step_ties import played_alone
from test_engine_renaming import _TIE_CHAIN, _chain_plan, _chains, _full_end


@settings(max_examples=200, deadline=None)
@given(_chains(), st.floats(0.3, 40.0), st.integers(-2**20, 2**20))
def test_a_clean_play_gives_the_replay_of_a_start_of_either_parity(chain, start, shift):
    """A play from ``start`` that met no tie (``reach`` given) ends, shifted, where a fresh play from any start
    ``start + shift·u`` of the binade (``u`` its spacing, ``shift`` odd or even) ends, while that start plus
    ``reach`` stays in the binade."""
    caps, steps, _, _ = chain
    net = FlowNetwork(simpy.Environment())
    step = _chain_plan("a", caps, steps, 0.0, 0.0).steps[0]
    end, reach = played_alone(net, step, start)
    other = start + shift * math.ulp(start)
    if end is None or reach is None or _binade(other)[0] != _binade(start)[0]:
        return
    if other + reach < math.ldexp(1.0, _binade(start)[0]):
        assert played_alone(net, step, other)[0] == other + (end - start)


@settings(max_examples=150, deadline=None)
@given(_chains(), st.floats(0.3, 40.0), st.integers(1, 2**30))
def test_durations_from_starts_of_either_parity_are_their_replays(chain, start, shift):
    """A plan's chained durations from two starts of one binade (the second read from the first's memos where
    they serve it) are the bits a replay of the whole plan from each start gives."""
    caps, steps, pre, gamma = chain
    net = FlowNetwork(simpy.Environment())
    plan = _chain_plan("a", caps, steps, pre, gamma)
    shape = _Shape(net, [plan], {})
    for t in (start, start + shift * math.ulp(start)):
        end = _full_end(net, plan, t)
        assert shape.durations(net, t) == (end - t, end - t)


def test_a_tie_is_seen_and_its_play_serves_its_own_parity_only():
    """The five 3 ms steps of ``_TIE_CHAIN``: the step from 0.009 s files its end 0.012 at a tie (0.009 + 0.003 is
    halfway between two floats), so its play gives no reach; the memo keeps it for its parity, and the step from
    0.012 s (the other parity) is played again, ending where its replay ends."""
    caps, steps, pre, gamma = _TIE_CHAIN
    net = FlowNetwork(simpy.Environment())
    plan = _chain_plan("a", caps, steps, pre, gamma)
    end, reach = played_alone(net, plan.steps[0], 0.009)
    assert end is not None and reach is None
    timings: dict = {}
    shape = _Shape(net, [plan], timings)
    assert shape.durations(net, 0.0) == (_full_end(net, plan, 0.0),) * 2
    (memo,) = timings[_STEP_SIGNATURES].values()
    assert _binade(0.009) in memo and _binade(0.012) in memo  # one binade, both parities played


def test_a_clean_play_fills_the_other_parity_so_it_is_not_played_again():
    """One step (two flows sharing a 2 GB/s link, 1 MB and 3 MB) from 20.1 s: no tie, so the memo holds both
    parities after one play; a start of the other parity is answered from it (no second play) with the bits of its
    own replay."""
    caps = [6, 6, 6, 6, 6, 6]
    plan = _chain_plan("a", caps, [[([0], 1.0, 0.0), ([0, 1], 3.0, 0.0)]], 0.0, 0.0)
    net = FlowNetwork(simpy.Environment())
    start = 20.1
    other = start + math.ulp(start) * (1 if _binade(start)[1] == 0 else -1)
    assert _binade(other)[1] != _binade(start)[1]
    end, reach = played_alone(net, plan.steps[0], start)
    assert reach is not None and reach >= end - start
    timings: dict = {}
    shape = _Shape(net, [plan], timings)
    shape.durations(net, start)
    (memo,) = timings[_STEP_SIGNATURES].values()
    assert set(memo) == {_binade(start), _binade(other)}
    played = []
    import simulator.engine.callfold_shapes as shapes
    real = shapes.played_alone
    shapes.played_alone = lambda *a: played.append(a) or real(*a)
    try:
        got = shape.durations(net, other)
    finally:
        shapes.played_alone = real
    assert played == []
    assert got == (_full_end(net, plan, other) - other,) * 2
