"""A bucketed sync asked again (:func:`simulator.compile.comm_part.bucketed`, remembered per arguments) is the tuple
built the first time, equal to one built on a fresh cache; its ready fractions remembered per tuple
(:func:`comm_part.kept_ready_fractions`) equal :func:`comm_part.ready_fractions`, also for a tuple with the same
calls that is another object, and the compiled steps and estimates of a search do not depend on which
structure asked first."""

from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import CostCache
from simulator.compile import comm_part
from simulator.work import CommKind

CLUSTER = load_preset("dgx-a100", 8)
GROUPS = (tuple(range(0, 64, 8)), tuple(range(0, 64, 2)), (0, 1, 2, 3))


@settings(max_examples=60, deadline=None)
@given(group=st.sampled_from(GROUPS), total=st.integers(1, 3 << 30), bucket=st.sampled_from((None, 1 << 20, 25 << 20)),
       op=st.sampled_from((Op.ALL_REDUCE, Op.ALL_GATHER)), overlap=st.booleans())
def test_a_kept_sync_is_the_one_built_fresh(group, total, bucket, op, overlap):
    cache = CostCache(CLUSTER)
    first = comm_part.bucketed(cache, CommKind.DP, op, group, float(total), bucket, "auto", 2)
    again = comm_part.bucketed(cache, CommKind.DP, op, group, float(total), bucket, "auto", 2)
    assert again is first
    assert first == comm_part.bucketed(CostCache(CLUSTER), CommKind.DP, op, group, float(total), bucket, "auto", 2)
    assert comm_part.kept_ready_fractions(cache, first, overlap) == comm_part.ready_fractions(first, overlap)
    other = tuple(first)[::-1][::-1] + ()  # equal calls, maybe another tuple object
    assert comm_part.kept_ready_fractions(cache, other, overlap) == comm_part.ready_fractions(other, overlap)
    assert comm_part.kept_ready_fractions(cache, first, not overlap) == comm_part.ready_fractions(first, not overlap)


def test_a_search_does_not_depend_on_which_structure_asked_first():
    """estimate_many's numbers for a varied set of candidates (test_analytical_vec's: ZeRO 0-3, offload, a parameter
    server, interleaving, recompute kinds) are the same floats whichever order they come in."""
    from test_analytical_vec import CANDIDATES

    from simulator.analytical_vec import estimate_many
    from simulator.workload import get_preset

    cluster, model = load_preset("dgx-a100", 2), get_preset("megatron-1.7b")
    forward = estimate_many(cluster, model, CANDIDATES, cache=CostCache(cluster))
    backward = estimate_many(cluster, model, CANDIDATES[::-1], cache=CostCache(cluster)).iloc[::-1]
    assert forward["step_time_s"].tolist() == backward["step_time_s"].tolist()
    assert forward.drop(columns=["candidate"], errors="ignore").reset_index(drop=True).equals(
        backward.drop(columns=["candidate"], errors="ignore").reset_index(drop=True))
