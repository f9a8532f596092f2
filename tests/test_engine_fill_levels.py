"""``fairshare.fill_levels`` keeps only the open pairs from pass to pass (des23): the same rates, to the bit, as the
passes over every pair with an open mask that it replaced (written out below as the reference), on random pair sets
with ties, shared resources, flows of one pair and resources no flow crosses."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.fairshare import SHARE_FLOOR, TIE_RTOL, fill_levels


def _masked_passes(flow_of, res_of, n_flows, capacity):
    """The passes as they were before des23 (every pair read on every pass, closed ones masked off)."""
    n_res = capacity.size
    left = capacity.astype(float)
    count = np.bincount(res_of, minlength=n_res).astype(float)
    rate = np.full(n_flows, -1.0)
    open_hop = np.ones(res_of.size, dtype=bool)
    while open_hop.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(count > 0, left / count, np.inf)
        level = share.min()
        tight = share <= level * (1 + TIE_RTOL)
        fixed = np.zeros(n_flows, dtype=bool)
        fixed[flow_of[open_hop & tight[res_of]]] = True
        level = max(level, float(capacity[tight].min()) * SHARE_FLOOR)
        rate[fixed] = level
        done = open_hop & fixed[flow_of]
        left -= level * np.bincount(res_of[done], minlength=n_res)
        count -= np.bincount(res_of[done], minlength=n_res)
        count[tight] = 0
        open_hop &= ~done
    return rate


_CAPS = st.sampled_from([1.0, 7 / 3, 11 / 3, 13 / 3, 10.0, 25.0, 1e-9])


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n_res: st.tuples(
    st.lists(_CAPS, min_size=n_res, max_size=n_res),
    st.lists(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=4, unique=True), min_size=1, max_size=30))))
def test_open_pairs_only_same_bits(case):
    """Random flows (1–4 distinct resources each) on 1–12 resources of a few capacities (ties among them, and one tiny
    enough to hit the share floor): rates equal to the reference's, bit for bit (``==`` on the arrays; -1 where a
    flow has no pair, here none)."""
    caps, routes = case
    flow_of = np.repeat(np.arange(len(routes)), [len(r) for r in routes])
    res_of = np.array([r for route in routes for r in route], dtype=np.int64)
    capacity = np.array(caps)
    got = fill_levels(flow_of, res_of, len(routes), capacity)
    want = _masked_passes(flow_of, res_of, len(routes), capacity)
    assert got.tobytes() == want.tobytes()


def test_hand_worked_two_levels():
    """Link 0 (10 GB/s) carries flows 0, 1, 2; link 1 (25 GB/s) carries flows 2 and 3. Level 1: link 0's share
    10/3 is least, flows 0–2 fixed there; level 2: link 1 has 25 − 10/3 left for flow 3 alone."""
    rate = fill_levels(np.array([0, 1, 2, 2, 3]), np.array([0, 0, 0, 1, 1]), 4, np.array([10.0, 25.0]))
    assert rate.tolist() == [10 / 3, 10 / 3, 10 / 3, 25.0 - 10 / 3]
