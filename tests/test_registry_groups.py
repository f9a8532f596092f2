"""The registry's kept groups (``registry._group``): bounded by ranks held, and never changing an answer.

A search asks a few dozen groups interleaved; the registry keeps them (least recently asked dropped first)
while they hold at most ``_RANKS_KEPT`` ranks, the newest ``_GROUPS_KEPT`` whatever their size. Kept or
built afresh, a group gives the same estimate to the bit.
"""

from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

from test_collectives_helpers import nccl_protocols, switched
from simulator.collectives import registry
from simulator.collectives.base import Op

CLUSTER = switched(nodes=8, gpus=8, nics=8, comm=nccl_protocols())
GROUPS = [tuple(range(start, 64, stride))[:size] for start in (0, 1, 3) for stride in (1, 8, 2)
          for size in (2, 8, 16, 32)]


@contextmanager
def _empty_cache(limit: int | None = None):
    """The registry's kept groups emptied (and its rank bound ``limit``) for the block, restored after."""
    saved = registry._GROUPS, registry._ranks_held, registry._RANKS_KEPT
    registry._GROUPS, registry._ranks_held = {}, 0
    registry._RANKS_KEPT = saved[2] if limit is None else limit
    try:
        yield
    finally:
        registry._GROUPS, registry._ranks_held, registry._RANKS_KEPT = saved


def _held() -> int:
    return sum(g.p for g in registry._GROUPS.values())


@settings(max_examples=40, deadline=None)
@given(asks=st.lists(st.sampled_from(GROUPS), min_size=1, max_size=60), limit=st.integers(0, 80))
def test_kept_groups_stay_bounded_and_recent(asks, limit):
    with _empty_cache(limit):
        _ask(asks, limit)


def _ask(asks, limit):
    for ranks in asks:
        group = registry._group(CLUSTER, ranks)
        assert group.ranks == ranks and group.cluster is CLUSTER
        kept = list(registry._GROUPS.values())
        assert kept[-1] is group  # the one just asked is the most recent
        assert registry._ranks_held == _held()
        assert len(kept) <= registry._GROUPS_KEPT or registry._ranks_held <= limit
    newest = list(dict.fromkeys(reversed(asks)))[:registry._GROUPS_KEPT]
    assert {g.ranks for g in registry._GROUPS.values()} >= set(newest)  # the newest are always kept


@settings(max_examples=25, deadline=None)
@given(asks=st.lists(st.tuples(st.sampled_from(GROUPS), st.sampled_from([Op.ALL_REDUCE, Op.ALL_GATHER]),
                               st.sampled_from([1 << 12, 1 << 20, 3 << 25]),
                               st.sampled_from(["auto", "ring", "tree"])), min_size=1, max_size=20))
def test_kept_group_answers_as_a_fresh_one(asks):
    with _empty_cache():
        _compare(asks)


def _compare(asks):
    for ranks, op, nbytes, algorithm in asks:
        if algorithm == "tree" and op is not Op.ALL_REDUCE:
            continue
        kept = registry.estimate(CLUSTER, ranks, op, nbytes, algorithm)
        registry._GROUPS.clear()
        registry._ranks_held = 0
        fresh = registry.estimate(CLUSTER, ranks, op, nbytes, algorithm)
        assert (kept.algorithm, kept.protocol, repr(kept.time_s)) == (fresh.algorithm, fresh.protocol,
                                                                      repr(fresh.time_s))
        for other, *_ in asks:  # refill the cache with interleaved groups before the next question
            registry._group(CLUSTER, other)
