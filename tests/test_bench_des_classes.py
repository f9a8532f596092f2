"""The colour refinement of ``benchmarks/bench_des_classes.py``: hand-worked partitions, and the property its
measurement rests on: flows of one cell of the coarsest equitable partition get the same rate, to the bit, from
progressive filling level by level (:func:`simulator.engine.fairshare._max_min_levels`, the filler of large sets)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmark_modules import load_benchmark
from simulator.engine import fairshare

classes = load_benchmark("bench_des_classes")


def test_two_renamed_copies():
    """Two disjoint copies of {a: (shared, private_a), b: (shared, private_b)}, capacities alike: uncoloured, the four
    flows are one cell and the resources two (shared: two flows, private: one); coloured a ≠ b (their bytes left),
    two flow cells and three resource cells (shared, a's private, b's private)."""
    routes = [(0, 1), (0, 2), (3, 4), (3, 5)]
    caps = dict.fromkeys(range(6), 25e9)
    assert classes.coarsest_equitable([0, 0, 0, 0], routes, caps) == (1, 2)
    assert classes.coarsest_equitable(["a", "b", "a", "b"], routes, caps) == (2, 3)
    assert classes.coarsest_equitable(["a", "b", "b", "b"], routes, caps) == (3, 5)


def test_a_chain_needs_rounds():
    """f1..f4 on r1–r2, r2–r3, r3–r4, r4–r5 (hand-worked): round 1 splits the resources into ends and middles, round 2
    the flows into {f1, f4} and {f2, f3} and the middles into {r2, r4} and {r3}, round 3 splits nothing: (2, 3)."""
    routes = [(1, 2), (2, 3), (3, 4), (4, 5)]
    fcol, rcol = classes.stable_colours([0] * 4, routes, dict.fromkeys(range(1, 6), 1.0))
    assert fcol[0] == fcol[3] != fcol[1] == fcol[2]
    assert rcol[1] == rcol[5] and rcol[2] == rcol[4] and len({rcol[1], rcol[2], rcol[3]}) == 3


def test_capacity_splits():
    """The same chain with r1 slower than r5: nothing is symmetric any more (4 flow cells, 5 resource cells)."""
    caps = {1: 10e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 25e9}
    assert classes.coarsest_equitable([0] * 4, [(1, 2), (2, 3), (3, 4), (4, 5)], caps) == (4, 5)


class _Flow:
    __slots__ = ("res", "bottleneck_Bps", "rate")

    def __init__(self, res, cap):
        self.res, self.bottleneck_Bps, self.rate = res, min(cap[r] for r in res), 0.0


@st.composite
def _copies(draw):
    """A random component (flows over a few resources, capacities from few values so shares tie), renamed into
    several disjoint copies, plus a few flows across copies that break some of the symmetry."""
    n_res = draw(st.integers(2, 6))
    comp = draw(st.lists(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=3, unique=True).map(tuple),
                         min_size=1, max_size=8))
    caps_one = draw(st.lists(st.sampled_from([10e9, 12.5e9, 25e9, 50e9]), min_size=n_res, max_size=n_res))
    copies = draw(st.integers(1, 6))
    routes = [tuple(k * n_res + r for r in route) for k in range(copies) for route in comp]
    extra = draw(st.lists(st.lists(st.integers(0, copies * n_res - 1), min_size=1, max_size=3, unique=True)
                          .map(tuple), max_size=3))
    cap = [caps_one[r % n_res] for r in range(copies * n_res)]
    return routes + extra, cap


@settings(max_examples=200, deadline=None)
@given(_copies())
def test_one_cell_one_rate(case):
    """Flows of one cell get bit-equal rates from the level-by-level filler: its loads and shares are constant on the
    cells of an equitable partition, pass by pass (the same float operations on equal operands)."""
    routes, cap = case
    flows = [_Flow(route, cap) for route in routes]
    hops = sum(map(len, routes))
    fairshare._max_min_levels(flows, cap, hops)
    fcol, _ = classes.stable_colours([0] * len(flows), routes, {r: cap[r] for route in routes for r in route})
    rate_of = {}
    for f, c in zip(flows, fcol):
        assert rate_of.setdefault(c, f.rate) == f.rate
