"""The flow-level network: hand-worked max-min answers, latency, conservation, determinism, properties.

Every expected time below is worked by hand in the test's docstring; tolerances are float rounding
(rel 1e-12) unless said otherwise.
"""

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.spec import Link, LinkClass, LinkKind
from simulator.cluster.topology import Hop, Path
from simulator.engine import fairshare
from simulator.engine.network import FlowNetwork
from simulator.errors import SpecError

GBps = 1e9
REL = 1e-12


def link(bw_GBps, latency_us=0.0):
    return Link(kind=LinkKind.INFINIBAND, bw_GBps=bw_GBps, latency_us=latency_us)


def path(*hops, latency_s=0.0):
    """A path over named resources: ``path(("a", 10), ("b", 5))`` crosses a (10 GB/s) then b (5 GB/s)."""
    return Path(tuple(Hop((name,), link(bw)) for name, bw in hops), LinkClass.NET, latency_s)


def run(transfers):
    """Start ``(path, nbytes, latency_s or None, start_s)`` transfers; return their finish times and flows."""
    env = simpy.Environment()
    net = FlowNetwork(env)
    done = {}

    def one(i, p, nbytes, latency, start):
        yield env.timeout(start)
        flow = yield net.transfer(p, nbytes, latency)
        done[i] = (env.now, flow)

    for i, (p, nbytes, latency, start) in enumerate(transfers):
        env.process(one(i, p, nbytes, latency, start))
    env.run()
    return [done[i][0] for i in range(len(transfers))], [done[i][1] for i in range(len(transfers))], net


def test_two_equal_flows_share_one_link_half_each():
    """2 × 1 GB on 10 GB/s: each at 5 GB/s, both done at 1e9 / 5e9 = 0.2 s."""
    p = path(("l", 10))
    times, _, _ = run([(p, 1e9, None, 0.0), (p, 1e9, None, 0.0)])
    assert times == pytest.approx([0.2, 0.2], rel=REL)


def test_short_flow_leaves_and_the_long_one_speeds_up():
    """1 GB and 0.5 GB on 10 GB/s: both at 5 GB/s until the short one ends at 0.5e9/5e9 = 0.1 s; the
    long one has 0.5 GB left, alone at 10 GB/s: 0.05 s more, done at 0.15 s."""
    p = path(("l", 10))
    times, _, _ = run([(p, 1e9, None, 0.0), (p, 0.5e9, None, 0.0)])
    assert times == pytest.approx([0.15, 0.1], rel=REL)


def test_max_min_on_three_resources():
    """Resources a (10 GB/s), b (4 GB/s), c (10 GB/s); flows X over a+b, Y over a, Z over b+c, W over c.

    Progressive filling: shares a 10/2 = 5, b 4/2 = 2, c 10/2 = 5; b is tightest: X = Z = 2 GB/s.
    Then a has 10 − 2 = 8 left for Y alone, c has 10 − 2 = 8 for W alone: Y = W = 8 GB/s.
    With 1 GB each: X, Z at 1/2 = 0.5 s; Y, W at 1/8 = 0.125 s (their leaving frees nothing for X, Z,
    still held by b). Rates checked directly, and the times.
    """
    a, b, c = ("a", 10), ("b", 4), ("c", 10)
    flows = [(path(a, b), 1e9, None, 0.0), (path(a), 1e9, None, 0.0), (path(b, c), 1e9, None, 0.0),
             (path(c), 1e9, None, 0.0)]
    times, _, _ = run(flows)
    assert times == pytest.approx([0.5, 0.125, 0.5, 0.125], rel=REL)


def test_max_min_rates_heap_and_levels_agree_with_hand_worked_rates():
    """The same example through both fillers: rates 2, 8, 2, 8 GB/s."""
    cap = [10 * GBps, 4 * GBps, 10 * GBps]
    for filler in (fairshare.max_min, _levels):
        flows = [_Rated((0, 1), cap), _Rated((0,), cap), _Rated((1, 2), cap), _Rated((2,), cap)]
        filler(flows, cap)
        assert [f.rate / GBps for f in flows] == pytest.approx([2, 8, 2, 8], rel=REL)


def test_latency_then_bandwidth():
    """A flow alone: latency 1 ms then 1 GB at 10 GB/s = 0.1 s; done at 0.101 s. A second flow on the
    same link with latency 0.2 s starts after the first is done: 0.2 + 0.1 = 0.3 s."""
    p = path(("l", 10), latency_s=1e-3)
    times, flows, _ = run([(p, 1e9, None, 0.0), (p, 1e9, 0.2, 0.0)])
    assert times == pytest.approx([0.101, 0.3], rel=REL)
    assert flows[0].active_s == pytest.approx(1e-3, rel=REL)


def test_latency_uses_no_bandwidth_while_waiting():
    """A (0.5 GB, no latency) and B (1 GB, latency 0.05 s) on 10 GB/s: A alone until 0.05 s (0.5 GB at
    10 GB/s would take exactly 0.05 s), so A ends as B starts; B alone: 0.05 + 0.1 = 0.15 s."""
    p = path(("l", 10))
    times, _, _ = run([(p, 0.5e9, 0.0, 0.0), (p, 1e9, 0.05, 0.0)])
    assert times == pytest.approx([0.05, 0.15], rel=REL)


def test_alone_on_a_path_takes_latency_plus_bytes_over_bottleneck():
    """Path 50 → 12.5 → 25 GB/s, latency 7 µs, 3 GB: 7e-6 + 3e9 / 12.5e9 = 0.240007 s."""
    p = path(("x", 50), ("y", 12.5), ("z", 25), latency_s=7e-6)
    times, _, _ = run([(p, 3e9, None, 0.0)])
    assert times[0] == pytest.approx(7e-6 + 3e9 / 12.5e9, rel=REL)
    assert times[0] == pytest.approx(p.transfer_time_s(3e9), rel=REL)


def test_zero_bytes_complete_after_latency_and_empty_groups_at_once():
    p = path(("l", 10), latency_s=2e-6)
    times, flows, _ = run([(p, 0, None, 1.0)])
    assert times == pytest.approx([1.0 + 2e-6], rel=REL) and flows[0].delivered_bytes == 0
    env = simpy.Environment()
    event = FlowNetwork(env).transfer_all([])
    assert event.triggered and event.value == []


@pytest.mark.parametrize("nbytes, latency", [(-1, None), (math.nan, None), (math.inf, None), (1, -1.0)])
def test_bad_transfers_are_spec_errors(nbytes, latency):
    net = FlowNetwork(simpy.Environment())
    with pytest.raises(SpecError):
        net.transfer(path(("l", 10)), nbytes, latency)


def test_one_resource_with_two_bandwidths_is_an_error():
    net = FlowNetwork(simpy.Environment())
    net.transfer(path(("l", 10)), 1)
    with pytest.raises(SpecError, match="one link instance has one bandwidth"):
        net.transfer(path(("l", 20)), 1)


def test_max_min_is_not_monotone_adding_a_flow_can_speed_up_another():
    """A known property of max-min fairness, kept here so nobody assumes otherwise.

    a, b: 1 GB/s. A over a; B over a+b; C over b. All 1 GB. Shares 1/2: A = B = C = 0.5 GB/s → A at 2 s.
    Add D over b: b's share 1/3 fixes B = C = D = 1/3, A gets 1 − 1/3 = 2/3 GB/s → A at 1.5 s.
    """
    a, b = ("a", 1), ("b", 1)
    base = [(path(a), 1e9, None, 0.0), (path(a, b), 1e9, None, 0.0), (path(b), 1e9, None, 0.0)]
    alone, _, _ = run(base)
    crowded, _, _ = run(base + [(path(b), 1e9, None, 0.0)])
    assert alone[0] == pytest.approx(2.0, rel=REL)
    assert crowded[0] == pytest.approx(1.5, rel=REL)


def test_a_wake_up_the_clock_lands_an_ulp_early_still_wakes_for_the_next_finish():
    """Regression (found by the conservation property): three disjoint 1-byte flows at t = 0.

    Each is alone on its link: c (25 GB/s) ends at 1 / 25e9 = 4e-11 s, a (10 GB/s) at 1 / 10e9 = 1e-10 s,
    b (4 GB/s) at 1 / 4e9 = 2.5e-10 s. The wake-up for a is scheduled at 4e-11 s with delay
    1e-10 − 4e-11 = 6e-11 s, and the clock lands at 4e-11 + 6e-11 = 9.999999999999999e-11 s, one ulp
    below 1e-10: a is due there (within the clock's slack), and its settle must still plan the wake
    for b. It used not to (b never finished). Settles: the start, then one wake per finish = 4.
    """
    a, b, c = ("a", 10), ("b", 4), ("c", 25)
    assert 4e-11 + (1e-10 - 4e-11) < 1e-10  # the float trap this test is about
    times, flows, net = run([(path(a), 1, None, 0.0), (path(b), 1, None, 0.0), (path(c), 1, None, 0.0)])
    assert times == pytest.approx([1e-10, 2.5e-10, 4e-11], rel=REL)
    assert [f.delivered_bytes for f in flows] == pytest.approx([1, 1, 1], rel=REL)
    assert net.stats.settles == 4 and net.active_flows == 0


def test_a_missed_wake_up_does_not_let_a_flow_run_on_until_the_next_start():
    """Regression: the example above plus a 1-byte flow on a at t = 2^-7 = 0.0078125 s.

    Expected: a, b, c as above (1e-10, 2.5e-10, 4e-11 s); the fourth is alone on a: 2^-7 + 1e-10 s.
    Each delivers 1 byte. With the missed wake-up, b ran on at 4 GB/s until the fourth flow's start
    settled it: 4e9 × 2^-7 = 31,250,000 bytes delivered, finish 2^-7 s. Tolerance on the fourth
    flow's bytes: its 1e-10 s lasts ~6e7 ulps of a clock at 2^-7 s (ulp 1.7e-18 s), so its rate
    integral is good to what 10 GB/s moves in the engine's CLOCK_ULPS = 16 ulps there: 2.8e-7 bytes.
    """
    a, b, c = ("a", 10), ("b", 4), ("c", 25)
    t4 = 2.0**-7
    times, flows, _ = run([(path(a), 1, None, 0.0), (path(b), 1, None, 0.0), (path(c), 1, None, 0.0),
                           (path(a), 1, None, t4)])
    assert times == pytest.approx([1e-10, 2.5e-10, 4e-11, t4 + 1e-10], rel=REL)
    slack_bytes = 10 * GBps * 16 * math.ulp(t4)
    assert [f.delivered_bytes for f in flows] == pytest.approx([1, 1, 1, 1], rel=REL, abs=slack_bytes)


_flow_spec = st.tuples(st.integers(1, 10**10), st.floats(0, 1e-3), st.floats(0, 1e-2))


@settings(max_examples=60, deadline=None)
@given(st.lists(_flow_spec, min_size=1, max_size=8), _flow_spec)
def test_adding_a_flow_to_a_shared_link_never_speeds_up_the_others(specs, extra):
    """On one shared link (processor sharing), another flow can only delay the rest (rel 1e-9)."""
    p = path(("l", 10))
    flows = [(p, n, lat, start) for n, lat, start in specs]
    before, _, _ = run(flows)
    after, _, _ = run(flows + [(p, extra[0], extra[1], extra[2])])
    for t0, t1 in zip(before, after):
        assert t1 >= t0 * (1 - 1e-9)


_LINKS = [("a", 10), ("b", 4), ("c", 25), ("d", 1)]


@st.composite
def _networks(draw):
    routes = st.lists(st.sampled_from(_LINKS), min_size=1, max_size=3, unique=True)
    return [(path(*draw(routes), latency_s=draw(st.floats(0, 1e-4))), draw(st.integers(1, 10**9)),
             None, draw(st.floats(0, 1e-2))) for _ in range(draw(st.integers(1, 10)))]


@settings(max_examples=80, deadline=None)
@given(_networks())
def test_conservation_and_no_flow_beats_its_uncontended_time(flows):
    """Every flow delivers exactly its bytes, never ends below zero, and finishes no sooner than
    start + latency + bytes / bottleneck.

    Delivered bytes are the rate integral: rel 1e-12, or what the fastest link (25 GB/s) moves in
    the clock's rounding (a few ulps of the finish time per rate change) when that is larger: a 1-byte
    flow at t = 8 ms lasts 1e-10 s, which the clock (ulp 1.7e-18 s) measures only to rel 1e-8.
    """
    times, done, net = run(flows)
    clock_slack = 25 * GBps * 64 * math.ulp(max(times)) * (len(flows) + 1)
    for (p, nbytes, _, start), t, f in zip(flows, times, done):
        assert f.delivered_bytes == pytest.approx(nbytes, rel=1e-12, abs=clock_slack)
        assert f.remaining == 0.0
        assert t >= (start + p.transfer_time_s(nbytes)) * (1 - 1e-12)
        assert f.finish_s == t
    assert net.active_flows == 0 and net.stats.flows == len(flows)


@settings(max_examples=40, deadline=None)
@given(_networks())
def test_deterministic(flows):
    """Same inputs → bit-identical finish times and counters."""
    first, _, net1 = run(flows)
    second, _, net2 = run(flows)
    assert first == second and net1.stats == net2.stats


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True), min_size=1, max_size=40),
       st.lists(st.integers(1, 100), min_size=6, max_size=6))
def test_heap_and_level_fillers_agree_and_are_max_min_fair(routes, caps):
    """Both fillers give the same rates (rel 1e-9), no resource is over capacity, and every flow has a
    saturated resource on which its rate is the largest (the max-min bottleneck criterion)."""
    cap = [c * GBps for c in caps]
    heap = [_Rated(tuple(r), cap) for r in routes]
    levels = [_Rated(tuple(r), cap) for r in routes]
    fairshare.max_min(heap, cap)
    _levels(levels, cap)
    assert [f.rate for f in heap] == pytest.approx([f.rate for f in levels], rel=1e-9)
    load = [0.0] * len(cap)
    for f in heap:
        for r in f.res:
            load[r] += f.rate
    assert all(load[r] <= cap[r] * (1 + 1e-9) for r in range(len(cap)))
    for f in heap:
        assert any(load[r] >= cap[r] * (1 - 1e-9) and all(g.rate <= f.rate * (1 + 1e-9) for g in heap if r in g.res)
                   for r in f.res)


def test_a_step_of_independent_flows_is_settled_in_few_events():
    """64 disjoint flows that start together and end together: one settle to start, one to end."""
    env = simpy.Environment()
    net = FlowNetwork(env)
    event = net.transfer_all([(path((f"l{i}", 10)), 1e9, 1e-6) for i in range(64)])
    env.run()
    assert event.processed and env.now == pytest.approx(1e-6 + 0.1, rel=REL)
    assert net.stats.settles == 2 and net.stats.max_active == 64


class _Rated:
    def __init__(self, res, cap):
        self.res, self.bottleneck_Bps, self.rate = res, min(cap[r] for r in res), 0.0


def _levels(flows, cap):
    fairshare._max_min_levels(flows, cap, sum(len(f.res) for f in flows))
