""":meth:`ParallelLayout.dp_line` (the dp·cp ranks of one (pp, tp) as an arithmetic run), and the dp and expert-dp
groups built from it (:func:`simulator.compile.step.stage_groups`, :meth:`ParallelLayout.expert_dp_group`), equal
one :meth:`~ParallelLayout.rank_of` per rank under every placement order, dp, tp, pp, cp and ep drawn (fails if the
stride or the first rank is read wrongly, or the cp ranks are interleaved in another order)."""

from hypothesis import assume, given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.compile.step import stage_groups
from simulator.errors import SpecError
from simulator.strategy import PlacementOrder, Strategy, build_layout
from simulator.workload import get_preset

CLUSTER = load_preset("dgx-a100", 4)
DENSE, MOE = get_preset("gpt3-1.3b"), get_preset("mixtral-8x7b")


@settings(max_examples=60, deadline=None)
@given(order=st.sampled_from(tuple(PlacementOrder)), tp=st.sampled_from((1, 2, 4)), pp=st.sampled_from((1, 2, 4)),
       cp=st.sampled_from((1, 2)), ep=st.sampled_from((1, 2, 4)), r=st.integers(0, 3), t=st.integers(0, 3))
def test_dp_line_is_rank_of_per_rank(order, tp, pp, cp, ep, r, t):
    model = MOE if ep > 1 else DENSE
    s = Strategy(global_batch=256, tp=tp, pp=pp, cp=cp, ep=ep, placement=order)
    try:
        layout = build_layout(s, CLUSTER, model)
    except SpecError:
        assume(False)  # a combination the rules refuse
    r, t = r % pp, t % tp
    assert layout.dp_line(r, t) == tuple(layout.rank_of(d, r, t) for d in range(layout.dp_cp))
    for dp in range(0, layout.dp_cp, max(1, layout.dp_cp // 3)):
        replica = dp // cp
        assert layout.expert_dp_group(r, t, dp) == tuple(
            layout.rank_of(d * cp + c, r, t) for d in range(replica % ep, layout.dp, ep) for c in range(cp))
    assert stage_groups(CostCache(CLUSTER), layout, r)[2] == tuple(layout.rank_of(d, r, 0) for d in range(layout.dp_cp))


def test_the_draws_reach_every_kind_of_group():  # so the property above is not vacuous
    for tp, pp, cp, ep, model in ((2, 2, 2, 1, DENSE), (1, 2, 1, 4, MOE), (2, 1, 2, 2, MOE)):
        layout = build_layout(Strategy(global_batch=256, tp=tp, pp=pp, cp=cp, ep=ep), CLUSTER, model)
        assert layout.dp_cp > 1 and layout.cp == cp and layout.ep == ep


def test_placement_dims_are_the_names():
    for order in PlacementOrder:
        assert order.dims == tuple(order.value.split("-")) and sorted(order.dims) == ["dp", "pp", "tp"]
