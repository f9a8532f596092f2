"""A settle takes its due flows in creation order, whatever order their finishes were filed in (``FlowNetwork._apply``):
the walk's seeds, and through them the heap filler's tie-breaks, do not depend on how a settle files finishes (what
a settle on arrays, filing in its own order, would need; docs/engine.md, sixteenth session).

Checked by a network whose settles see every due list reversed or shuffled: the same finish times to the bit. The
hand case was found by a random search (3,000 small networks, seed 1): with the due lists taken as filed, reversing
them moves three finishes by an ulp.
"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import network
from test_engine_network import path, run


class _Reorder:
    """``FlowNetwork._apply`` with each due list reordered (reversed, or shuffled by a seeded generator) first."""

    def __init__(self, monkeypatch, how):
        self.apply, self.how = network.FlowNetwork._apply, how
        monkeypatch.setattr(network.FlowNetwork, "_apply", self)

    def __get__(self, net, owner=None):
        return lambda now, slack, arrivals, due: self.apply(net, now, slack, arrivals, self.how(list(due)))


def _reversed(due):
    return due[::-1]


_CASE = [([("a", 7), ("f", 7)], 2e6, 3e-4), ([("c", 10), ("d", 10), ("f", 7)], 1e6, 1e-4), ([("f", 7)], 1e6, 0.0),
         ([("f", 7), ("d", 10), ("a", 7)], 3e6, 3e-4), ([("c", 10), ("b", 7), ("a", 7)], 3e6, 1e-4),
         ([("d", 10), ("b", 7), ("f", 7)], 1e6, 0.0)]
"""(hops as (link, GB/s), bytes, start s) of six transfers: GB/s 7 and 10 give shares that tie at several
resources, and flows 0, 1 and 4 end where a tie's winner decides the last bit."""


def _transfers(spec):
    return [(path(*hops), nbytes, None, start) for hops, nbytes, start in spec]


def test_reversed_due_lists_change_no_finish_time(monkeypatch):
    """The hand case: each settle's due list reversed before the walk gives the same finish times to the bit."""
    plain, _, _ = run(_transfers(_CASE))
    _Reorder(monkeypatch, _reversed)
    again, _, _ = run(_transfers(_CASE))
    assert again == plain


_hops = st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3, unique=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_hops, st.sampled_from([1e6, 2e6, 3e6]), st.sampled_from([0.0, 1e-4, 3e-4])), min_size=2,
                max_size=12), st.lists(st.sampled_from([3, 5, 6, 7, 10]), min_size=6, max_size=6), st.integers(0, 99))
def test_shuffled_due_lists_change_no_finish_time(spec, caps, seed):
    """Random small networks (few capacity values: many tied shares), each settle's due list shuffled: the same
    finish times to the bit."""
    gbps = dict(zip("abcdef", caps))
    transfers = [([(h, gbps[h]) for h in hops], nbytes, start) for hops, nbytes, start in spec]
    plain, _, _ = run(_transfers(transfers))
    rnd = random.Random(seed)
    with pytest.MonkeyPatch.context() as mp:  # one per example (hypothesis runs many in one test call)
        _Reorder(mp, lambda due: rnd.sample(due, len(due)))
        again, _, _ = run(_transfers(transfers))
    assert again == plain
