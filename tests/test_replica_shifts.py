"""Replica groups built on arrays (:func:`simulator.engine.replica_shifts.whole_shifts`) equal the loop's
(``replica_groups(..., shift_arrays=False)``): tp groups, dp groups, pipeline-send pairs and arbitrary rank sets
(where the array form's checks fail and the loop decides), every placement order, every count."""

from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.engine.replay_work import replica_groups
from simulator.strategy import Strategy, build_layout
from simulator.strategy.kinds import PlacementOrder
from simulator.workload.presets import get_preset

_LAYOUTS: dict = {}


def _layout(placement: str, tp: int, pp: int, dp: int):
    key = (placement, tp, pp, dp)
    if key not in _LAYOUTS:
        cluster = load_preset("dgx-h100").with_nodes(max(1, tp * pp * dp // 8))
        _LAYOUTS[key] = build_layout(Strategy(global_batch=8 * dp, tp=tp, pp=pp, placement=PlacementOrder(placement)),
                                     cluster, get_preset("gpt3-1.3b"))
    return _LAYOUTS[key]


@st.composite
def _cases(draw):
    placement = draw(st.sampled_from(["tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "pp-tp-dp"]))
    tp, pp, dp = draw(st.sampled_from([(2, 2, 4), (4, 1, 2), (1, 4, 2), (2, 2, 1), (8, 4, 4), (8, 2, 8)]))
    lay = _layout(placement, tp, pp, dp)
    kind = draw(st.sampled_from(["tp", "dp", "send", "any"]))
    if kind == "tp":
        group = draw(st.sampled_from(lay.tp_groups))
    elif kind == "dp":
        group = draw(st.sampled_from(lay.dp_groups))
    elif kind == "send":
        d, t = draw(st.integers(0, dp - 1)), draw(st.integers(0, tp - 1))
        a, b = sorted(draw(st.lists(st.integers(0, pp - 1), min_size=2, max_size=2, unique=True))) if pp > 1 else (0, 0)
        group = (lay.rank_of(dp=d, pp=a, tp=t), lay.rank_of(dp=d, pp=b, tp=t))
    else:
        group = tuple(draw(st.lists(st.integers(0, lay.world_size - 1), min_size=1, max_size=6, unique=True)))
    count = draw(st.sampled_from([1, 2, 3, tp * dp, tp * dp * pp, lay.world_size]))
    return lay, group, count


@settings(max_examples=300, deadline=None)
@given(case=_cases())
def test_arrays_give_the_loops_replicas(case):
    lay, group, count = case
    assert replica_groups(lay, group, count) == replica_groups(lay, group, count, shift_arrays=False)
