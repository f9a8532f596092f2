"""The flow store (:mod:`simulator.engine.network_store`) against the object network: the same bits.

Random small networks (hypothesis) are run three ways: on :class:`FlowNetwork` (flows as objects), on
:class:`StoredNetwork` as the engine runs it (its settles small: the object code over the store's arrays, through
:class:`StoredFlow`'s properties), and on both with ``VECTOR_MIN_HOPS`` lowered to 1 so that *every* settle with a
flow to rate is a big one: the object network rates it with the level filler, the store does the whole settle on
arrays (walk, progress, level filling, finishes filed as blocks). Finish times, bytes delivered, each flow's
activation instant and the network's counters must be equal to the bit; a test that the array path ran keeps the
comparison from passing vacuously.
"""

import math

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import fairshare
from simulator.engine.flow_store import Block, Pairs, Store, StoredFlow
from simulator.engine.network import FlowNetwork
from simulator.engine.network_store import StoredNetwork
from test_engine_network import path


def _run(make, transfers):
    """``transfers`` (path, bytes, latency or None, start s) on a network ``make(env)``: per transfer its finish, its
    flow's delivered bytes and activation instant, and the network (for its counters)."""
    env = simpy.Environment()
    net = make(env)
    done = {}

    def one(i, p, nbytes, latency, start):
        yield env.timeout(start)
        flow = yield net.transfer(p, nbytes, latency)
        done[i] = (env.now, flow.delivered_bytes, flow.active_s, flow.finish_s, flow.remaining, flow.rate)

    for i, spec in enumerate(transfers):
        env.process(one(i, *spec))
    env.run()
    return [done[i] for i in range(len(transfers))], net


def _counters(net):
    s = net.stats
    return s.flows, s.settles, s.rerated_flows, s.max_active


_hops = st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=4, unique=True)
_networks = st.tuples(
    st.lists(st.tuples(_hops, st.sampled_from([0.0, 1e6, 2e6, 3e6, 5e5]), st.sampled_from([None, 0.0, 1e-5]),
                       st.sampled_from([0.0, 1e-4, 3e-4, 5e-4])), min_size=1, max_size=16),
    st.lists(st.sampled_from([3, 5, 6, 7, 10]), min_size=8, max_size=8))


def _transfers(spec):
    flows, caps = spec
    gbps = dict(zip("abcdefgh", caps))
    return [(path(*[(h, gbps[h]) for h in hops], latency_s=2e-6), nbytes, latency, start)
            for hops, nbytes, latency, start in flows]


def _same(a, b):
    """Equal to the bit, NaN (a flow of no bytes never active) equal to NaN."""
    return all(x == y or (math.isnan(x) and math.isnan(y)) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


@settings(max_examples=80, deadline=None)
@given(_networks)
def test_store_small_settles_equal_objects(spec):
    """The store as the engine runs it (object code over arrays) gives the object network's bits."""
    transfers = _transfers(spec)
    plain, net_a = _run(FlowNetwork, transfers)
    stored, net_b = _run(StoredNetwork, transfers)
    assert _same(plain, stored) and len(plain) == len(stored)
    assert _counters(net_a) == _counters(net_b)


@settings(max_examples=80, deadline=None)
@given(_networks)
def test_every_settle_on_arrays_equals_objects(spec):
    """Every settle a big one (``VECTOR_MIN_HOPS`` = 1): the store's array settles give the object network's bits."""
    transfers = _transfers(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fairshare, "VECTOR_MIN_HOPS", 1)
        plain, net_a = _run(FlowNetwork, transfers)
        stored, net_b = _run(StoredNetwork, transfers)
    assert _same(plain, stored) and len(plain) == len(stored)
    assert _counters(net_a) == _counters(net_b)
    if any(nbytes > 0 for _, nbytes, _, _ in transfers):
        assert net_b.array_settles > 0


def test_array_settle_hand_case():
    """Three flows on one 10 GB/s link, with the threshold at 1 so the store's settles are on arrays: 1 MB each at
    10/3 GB/s; at 0.3 ms (flow 2 done: 3e-4·10e9/3 = 1 MB) flows 0 and 1 have 0 bytes left too: all end at 0.3 ms."""
    a = [("a", 10)]
    transfers = [(path(*a), 1e6, None, 0.0)] * 3
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fairshare, "VECTOR_MIN_HOPS", 1)
        stored, net = _run(StoredNetwork, transfers)
    assert net.array_settles >= 1
    assert [r[0] for r in stored] == pytest.approx([3e-4] * 3, rel=1e-12)
    assert [r[1] for r in stored] == pytest.approx([1e6] * 3, rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(_networks, st.sampled_from([2, 3, 4, 6]))
def test_settles_tried_on_arrays_and_found_small_equal_objects(spec, min_hops):
    """A middling ``VECTOR_MIN_HOPS``: settles are tried on arrays whenever the store holds that many pairs, and
    those found small (their ends leave too few pairs to rate) are done on objects; the bits are the object
    network's, so a try that fails wrote nothing."""
    transfers = _transfers(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fairshare, "VECTOR_MIN_HOPS", min_hops)
        plain, net_a = _run(FlowNetwork, transfers)
        stored, net_b = _run(StoredNetwork, transfers)
    assert _same(plain, stored) and len(plain) == len(stored)
    assert _counters(net_a) == _counters(net_b)


def test_a_failed_array_try_writes_nothing():
    """Threshold 3: flow 0 on (a, b) with 1 MB and flow 1 on (a,) with 2 MB arrive together (3 pairs: on arrays),
    each at 5 GB/s on the 10 GB/s link a. Flow 0 ends at 0.2 ms; that settle is tried on arrays (3 pairs stored)
    and found small (flow 1 alone: 1 pair), so the object code does it: flow 1 then runs at 10 GB/s, its last 1 MB
    in 0.1 ms, ending at 0.3 ms with 2 MB delivered (counted once), as on the object network to the bit."""
    a, b = ("a", 10), ("b", 10)
    transfers = [(path(a, b), 1e6, None, 0.0), (path(a), 2e6, None, 0.0)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fairshare, "VECTOR_MIN_HOPS", 3)
        plain, _ = _run(FlowNetwork, transfers)
        stored, net = _run(StoredNetwork, transfers)
    assert net.array_tries > net.array_settles >= 1
    assert _same(plain, stored)
    assert [r[0] for r in stored] == pytest.approx([2e-4, 3e-4], rel=1e-12)
    assert [r[1] for r in stored] == pytest.approx([1e6, 2e6], rel=1e-12)


class _Route:
    def __init__(self, res):
        self.path, self.res, self.bottleneck_Bps = None, tuple(res), 1.0


def test_pairs_compact_keeps_the_active_flows_pairs():
    """Four flows over resources (0, 1), (1,), (2, 3), (3,): after flows 0, 1 and 3 end, the ended rows are the
    majority and ``live`` compacts: one row left (flow 2's slot) with exactly its pairs (2, 3)."""
    store, pairs = Store(), Pairs()
    first = store.reserve(4)
    flows = [StoredFlow(store, first + k, k, _Route(res), 1.0, 0.0, None) for k, res in
             enumerate([(0, 1), (1,), (2, 3), (3,)])]
    store.flows.extend(flows)
    for f in flows:
        f.active = True
    pairs.add(flows)
    assert pairs.pair_res.tolist() == [0, 1, 1, 2, 3, 3] and pairs.pair_row.tolist() == [0, 0, 1, 2, 2, 3]
    assert pairs.live(store.active).tolist() == [True] * 4
    for k in (0, 1, 3):
        flows[k].active = False
    assert pairs.live(store.active).tolist() == [True]
    assert pairs.row_slot.tolist() == [flows[2]._slot]
    assert pairs.pair_row.tolist() == [0, 0] and pairs.pair_res.tolist() == [2, 3]


def test_a_block_keeps_only_flows_filed_at_their_version():
    """A block filed at versions (1, 1, 1): the flow re-rated since (version 2) and the flow that ended drop out."""
    store = Store()
    first = store.reserve(3)
    store.active[first:first + 3] = True
    store.version[first:first + 3] = 1
    block = Block(np.arange(first, first + 3), np.ones(3, dtype=np.int64))
    store.version[first + 1] = 2
    store.active[first + 2] = False
    assert block.live(store).tolist() == [first]


def test_due_flows_come_in_creation_order_with_their_slots():
    """Three flows of one launch (slots 0, 1, 2) due at 1 ms: filed as one block in row order (2, 0) and flow 1 as an
    object entry, or as the one block (2, 1, 0) alone; either way ``_due_flows`` gives them in creation order, with
    their slots, and takes the bucket off (a block lists rows in activation order, not creation order)."""
    from heapq import heappush

    for entries in (lambda fl, v: [Block(np.array([2, 0]), v[[2, 0]]), (fl[1], int(v[1]))],
                    lambda fl, v: [Block(np.array([2, 1, 0]), v[[2, 1, 0]])]):
        net = StoredNetwork(simpy.Environment())
        net.transfer_all([(path(("a", 1)), 1e6, None)] * 3)
        store = net._store
        store.active[:3] = True
        net._due[1e-3] = entries(store.flows, store.version.copy())
        heappush(net._due_times, 1e-3)
        due = net._due_flows(1e-3)
        assert [f.fid for f in due] == [0, 1, 2] and due.slots.tolist() == [0, 1, 2]
        assert not net._due and not net._due_times


def test_flows_ending_together_complete_in_creation_order():
    """Three 1 MB transfers and a 2 MB one started one after another on one 10 GB/s link (2.5 GB/s each): the three
    end at 0.4 ms in one settle on arrays (threshold 1; the 2 MB flow is re-rated there), and their events fire in
    creation order, as on the object network; then the fourth."""
    def order(make):
        env = simpy.Environment()
        net, ended = make(env), []

        def one(i, nbytes):
            yield net.transfer(path(("a", 10)), nbytes)
            ended.append(i)

        for i, nbytes in enumerate([1e6, 1e6, 1e6, 2e6]):
            env.process(one(i, nbytes))
        env.run()
        return ended, net

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fairshare, "VECTOR_MIN_HOPS", 1)
        plain, _ = order(FlowNetwork)
        stored, net = order(StoredNetwork)
    assert net.array_settles >= 1
    assert plain == stored == [0, 1, 2, 3]
