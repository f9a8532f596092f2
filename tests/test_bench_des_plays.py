"""``benchmarks/bench_des_plays.py``: the components of a step (hand-worked), its kinds (equal up to a renaming of
the resources, unequal when a capacity, a route's shape, bytes or a latency differ), and one component of each kind
played together against the whole step (hypothesis: des20's conjecture, the filler chosen by the weighted count)."""

from types import SimpleNamespace

import simpy
from benchmark_modules import load_benchmark
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_engine_network import path

from simulator.engine.network import FlowNetwork

plays = load_benchmark("bench_des_plays")


def test_components_hand_worked():
    """Routes 0: (a, b), 1: (c,), 2: (b, d), 3: (d, e), 4: (f,): 0, 2, 3 are joined through b and d (3 only through
    2); 1 and 4 stand alone. Groups in index order, by their first index."""
    a, b, c, d, e, f = range(6)
    assert plays.components([(a, b), (c,), (b, d), (d, e), (f,)]) == [[0, 2, 3], [1], [4]]


def test_kinds_equal_up_to_renaming_only():
    """Two copies of a two-flow chain on other resources are one kind; a copy with another capacity, another route
    shape (the second flow's resources swapped), other bytes or another latency is not."""
    main = SimpleNamespace(_cap=[10.0, 20.0, 30.0, 10.0, 20.0, 30.0, 10.0, 99.0, 30.0])
    path = SimpleNamespace(latency_s=1e-6)
    step = [(path, 5.0, None)] * 2
    kind = plays.kind

    def of(routes, nbytes=5.0, latency=None):
        return kind(main, [(path, nbytes, latency)] * 2, routes, [0, 1])

    base = kind(main, step, [(0, 1), (1, 2)], [0, 1])
    assert of([(3, 4), (4, 5)]) == base
    assert of([(6, 7), (7, 8)]) != base  # capacity 99 where 20 was
    assert of([(3, 4), (5, 4)]) != base  # the second flow crosses its resources the other way round
    assert of([(3, 4), (4, 5)], nbytes=6.0) != base
    assert of([(3, 4), (4, 5)], latency=2e-6) != base


@st.composite
def _repeated(draw):
    """Capacities of local resources 0..5, and 1–3 kinds of component (1–6 flows each over those resources: bytes,
    latencies), each with 1–40 copies on resources of their own, and a start time."""
    caps = draw(st.lists(st.sampled_from([3, 7, 11, 13]), min_size=6, max_size=6))
    flow = st.tuples(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),
                     st.sampled_from([1.0, 2.5, 3.3, 7.1]), st.sampled_from([0.0, 1e-6, 3e-5]))
    kinds = draw(st.lists(st.tuples(st.lists(flow, min_size=1, max_size=6), st.integers(1, 40)), min_size=1,
                          max_size=3))
    return caps, kinds, draw(st.sampled_from([0.0, 0.37, 3.0, 31.9999]))


_SWITCH = ([3, 7, 3, 3, 3, 3], [([([0, 1], 1.0, 0.0)], 28),
                                ([([0, 1], 1.0, 0.0), ([0, 1, 2], 1.0, 0.0), ([0, 1, 3], 1.0, 0.0), ([1, 2], 1.0, 0.0),
                                  ([1, 2], 1.0, 0.0)], 38)], 0.0)
"""28 copies of a one-flow kind and 38 of a five-flow kind: 512 pairs in the whole step (the level filler), 14 in one
of each (the heap filler, unless chosen by the weighted count): found by hypothesis, the plain choice fails it."""


@settings(max_examples=200, deadline=None)
@example(_SWITCH)
@given(_repeated())
def test_one_component_of_each_kind_played_together_gives_the_whole_plays_finishes(case):
    """The conjecture des20 measured on the benchmark's steps, on random steps of repeated components (copies
    interleaved flow by flow, as a tree step lists them; enough copies to cross the filler switch): every flow of
    the first component of each kind finishes, to the bit, where it does in the whole step's play."""
    caps, kinds, start = case
    made: dict = {}

    def p(tag, route):
        key = (tag, tuple(route))
        if key not in made:
            made[key] = path(*((f"{tag}.{r}", caps[r] / 3) for r in route))
        return made[key]

    step = []
    for k, (flows, copies) in enumerate(kinds):
        for j, (route, nbytes, latency) in enumerate(flows):
            step += [(p(f"k{k}c{c}", route), nbytes * 1e6, latency) for c in range(copies)]
    net = FlowNetwork(simpy.Environment())
    flows, _, _, _ = plays.play_flows(net, step, start)
    routes = [f.res for f in flows]
    _, keep = plays.one_of_each(net, step, routes, plays.components(routes))
    assert plays.reduced_same(net, step, start, flows, keep)
