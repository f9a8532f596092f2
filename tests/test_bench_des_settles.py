"""``benchmarks/bench_des_settles.py`` and ``settle_arrays.py``: the registry counts (hand-worked), the frontier walk
against a depth-first one, the array progress and level filling against the engine's scalar lines and
``_max_min_levels`` to the bit (hypothesis), and the order facts they lean on: the level filler gives the same bits in
any order of the flows, the heap filler does not (a case found by a random search)."""

import numpy as np
from benchmark_modules import load_benchmark
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import fairshare
from simulator.engine import settle_arrays as arrays
from simulator.engine.network import REL_BYTES_TOL

settles = load_benchmark("bench_des_settles")
BIG = fairshare.VECTOR_MIN_HOPS


def test_registry_counts_hand_worked():
    """Settle 1 (big, arrivals only) keeps {1, 2, 3}; settle 2 (big) walks {1, 2, 3}: one record, the same flows; it
    ends 3 and keeps {1, 2}; settle 3 (big) walks {1, 2}: settle 2's kept flows: same; settle 4 (big) walks {1, 5}: 5
    was never kept: no record; settle 5 (small) walks {1}: counted in walked flows only; settle 6 (big) walks {2}:
    last kept by settle 3, whose {1, 2} still has 1 active: one record walked in part, not the same."""
    k = frozenset
    log = [(k(), k({1, 2, 3}), BIG), (k({1, 2, 3}), k({1, 2}), BIG), (k({1, 2}), k({1, 2}), BIG),
           (k({1, 5}), k({1, 5}), BIG), (k({1}), k({1}), BIG - 1), (k({2}), k({2}), BIG)]
    assert settles.registry_counts(log) == {"settles": 6, "walked": 9, "big": 5, "big_walked": 8, "one": 3,
                                            "one_walked": 6, "same": 2, "same_walked": 5}


def test_frontier_walk_hand_worked():
    """Flows 0: (a, b), 1: (b, c), 2: (d,), 3: (c,): from a, b then c then nothing new: flows 0, 1, 3 in three
    levels (the last finds no new resource); from d, flow 2 in one."""
    flow_of = np.array([0, 0, 1, 1, 2, 3])
    res_of = np.array([0, 1, 1, 2, 3, 2])
    idx, levels = arrays.frontier_walk(flow_of, res_of, 4, 4, np.array([0]))
    assert idx.tolist() == [0, 1, 3] and levels == 3
    idx, levels = arrays.frontier_walk(flow_of, res_of, 4, 4, np.array([3]))
    assert idx.tolist() == [2] and levels == 1


_routes = st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=4, unique=True), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(_routes, st.lists(st.integers(0, 11), min_size=1, max_size=3, unique=True))
def test_frontier_walk_meets_the_flows_a_depth_first_walk_meets(routes, seeds):
    """The engine's walk (depth-first over resources, as ``FlowNetwork._apply``) and the frontier walk find the same
    flows from any seeds."""
    on: dict = {}
    for i, r in enumerate(routes):
        for q in r:
            on.setdefault(q, []).append(i)
    seen, stack, met = set(seeds), list(seeds), set()
    while stack:
        for i in on.get(stack.pop(), ()):
            if i not in met:
                met.add(i)
                for q in routes[i]:
                    if q not in seen:
                        seen.add(q)
                        stack.append(q)
    flow_of = np.repeat(np.arange(len(routes)), [len(r) for r in routes])
    res_of = np.array([q for r in routes for q in r])
    idx, _ = arrays.frontier_walk(flow_of, res_of, len(routes), 12, np.array(seeds))
    assert idx.tolist() == sorted(met)


_bytes = st.floats(1.0, 1e9)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(1e6, 1e11), st.floats(0.0, 30.0), _bytes, _bytes, st.booleans()), min_size=1,
                max_size=20), st.floats(0.0, 40.0))
def test_array_progress_is_the_engines_scalar_arithmetic_to_the_bit(flows, later):
    """``progress`` on arrays against ``FlowNetwork._apply``'s lines for one flow: the same bytes left and the same
    done test (numpy's element-wise float64 operations are the IEEE operations Python does one at a time)."""
    flows = [(rate, t, min(rem, nb), nb, due) for rate, t, rem, nb, due in flows]
    now = max(t for _, t, *_ in flows) + later
    slack = 4 * np.spacing(now)
    rate, t_last, rem, nbytes = (np.array([f[k] for f in flows]) for k in range(4))
    _, left, done = arrays.progress(rate, t_last, rem, nbytes, np.array([f[4] for f in flows]), now, slack)
    for (r, t, rm, nb, due), x, d in zip(flows, left.tolist(), done.tolist()):
        one = rm - r * (now - t)
        assert x == one and d == (due or one <= REL_BYTES_TOL * nb or one <= r * slack)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True), min_size=1, max_size=60),
       st.lists(st.sampled_from([3, 5, 6, 7, 10]), min_size=8, max_size=8), st.randoms(use_true_random=False))
def test_array_level_rates_are_the_engines_to_the_bit(routes, caps, rnd):
    """``level_rates`` on pairs numbered another way (a store's numbering: resources shuffled among twelve, four unused)
    gives ``_max_min_levels``' rates to the bit, also where no resource is shared."""
    cap = [c * 1e9 / 3 for c in caps]
    flows = [_Rated(tuple(r), cap) for r in routes]
    fairshare._max_min_levels(flows, cap, sum(map(len, routes)))
    number = list(range(12))
    rnd.shuffle(number)
    capacity = np.full(12, 1e9)
    for r, q in enumerate(number[:8]):
        capacity[q] = cap[r]
    flow_of = np.repeat(np.arange(len(routes)), [len(r) for r in routes])
    res_of = np.array([number[q] for r in routes for q in r])
    got = arrays.level_rates(flow_of, res_of, len(routes), capacity, np.array([f.bottleneck_Bps for f in flows]))
    assert got.tolist() == [f.rate for f in flows]


def test_finish_times_refile_only_changed_rates_and_group_equal_instants():
    """Rates 2 → 2 (kept), 1 → 2, 0 → 4 (an arrival), 4 → 1 with 10, 20, 40 and 5 bytes left at t = 1: the last three
    refiled, at 1 + 20/2 = 11, 1 + 40/4 = 11 and 1 + 5/1 = 6: two instants, 6 and 11."""
    changed, instants, bucket = arrays.finish_times(np.array([2.0, 1.0, 0.0, 4.0]), np.array([2.0, 2.0, 4.0, 1.0]),
                                                    np.array([10.0, 20.0, 40.0, 5.0]), 1.0)
    assert changed.tolist() == [False, True, True, True]
    assert instants.tolist() == [6.0, 11.0] and bucket.tolist() == [1, 1, 0]


class _Rated:
    def __init__(self, res, cap):
        self.res, self.bottleneck_Bps, self.rate = res, min(cap[r] for r in res), 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True), min_size=2, max_size=40),
       st.lists(st.sampled_from([3, 5, 6, 7, 10]), min_size=8, max_size=8), st.randoms(use_true_random=False))
def test_level_filler_gives_the_same_bits_in_any_order_of_the_flows(routes, caps, rnd):
    """``_max_min_levels`` reads the order of the flows only through integer counts per resource (``np.bincount``) and
    a flow's level, so a permutation of the flows permutes their rates and changes no bit (few capacity values:
    many tied shares)."""
    cap = [c * 1e9 / 3 for c in caps]
    order = list(range(len(routes)))
    rnd.shuffle(order)
    one = [_Rated(tuple(r), cap) for r in routes]
    two = [one[i] for i in order]
    copies = [_Rated(f.res, cap) for f in two]
    fairshare._max_min_levels(one, cap, sum(map(len, routes)))
    fairshare._max_min_levels(copies, cap, sum(map(len, routes)))
    assert [f.rate for f in two] == [f.rate for f in copies]


def test_heap_filler_ties_depend_on_the_order_of_the_flows():
    """A case found by a random search (seed 0, 36 draws): eight flows over six resources of capacities 5, 10, 3, 7, 3,
    6 (× 1/3 GB/s); listed in another order, the heap filler breaks a tie between two resources the other way and
    four rates move by an ulp. So a walk in another order than the engine's may only feed the level filler."""
    routes = [(5,), (1,), (4, 2), (4,), (5, 1), (3,), (3, 4, 2), (2, 3, 5)]
    cap = [c * 1e9 / 3 for c in (5, 10, 3, 7, 3, 6)]
    order = [7, 5, 3, 6, 1, 2, 4, 0]
    one = [_Rated(r, cap) for r in routes]
    two = [_Rated(routes[i], cap) for i in order]
    fairshare.max_min(one, cap)
    fairshare.max_min(two, cap)
    back = [None] * len(routes)
    for f, i in zip(two, order):
        back[i] = f.rate
    moved = [i for i, f in enumerate(one) if f.rate != back[i]]
    assert moved == [0, 3, 4, 5, 7]
    assert all(abs(one[i].rate - back[i]) <= 2 * np.spacing(one[i].rate) for i in moved)
