"""The DES's call planner asks the registry for a collective's protocol once per moved group
(``CallPlanner._protocol``, :meth:`CostCache.moved`): the protocol and the time behind it must be the ones
the registry gives for the group in place, on every network shape of the cost cache's translation test."""

from hypothesis import given, settings

from simulator.collectives.base import Op
from simulator.collectives.registry import estimate, supports
from simulator.engine.call_plan import CallPlanner
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport
from test_cost_cache_translation import CLUSTERS, _case


@settings(max_examples=120, deadline=None)
@given(case=_case())
def test_protocol_on_the_moved_group_is_the_protocol_in_place(case):
    name, ranks, op, nbytes = case
    cluster = CLUSTERS[name]
    if op is Op.SEND_RECV:
        return
    planner = CallPlanner(cluster)
    moved = planner._moves.moved(ranks)
    for algorithm in ("ring", "tree", "hierarchical"):
        if not supports(algorithm, op, cluster, ranks):
            continue
        in_place = estimate(cluster, ranks, op, nbytes, algorithm)
        there = estimate(cluster, moved, op, nbytes, algorithm)
        assert (there.protocol, repr(there.time_s)) == (in_place.protocol, repr(in_place.time_s))
        call = CommCall(kind=CommKind.TP, op=op, nbytes=nbytes, group=ranks, transport=Transport.COLLECTIVE,
                        algorithm=CollectiveAlgorithm(algorithm), time_s=in_place.time_s)
        assert planner._protocol(call, ranks) == in_place.protocol
        assert planner._protocol(call, ranks) == in_place.protocol  # remembered: the same answer
