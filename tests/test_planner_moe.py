"""The planner searches the expert-parallel degree of a mixture-of-experts model: ep over the divisors
of dp that divide the experts, pinnable like the other axes, explained against the other degrees."""

from __future__ import annotations

import pytest

import planner
from planner.explain import describe, explain
from planner.space import Problem, default_axes, enumerate_keys, ep_values, pin
from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.strategy import ZeroStage
from simulator.workload import get_preset

QWEN = get_preset("qwen1.5-moe-a2.7b").with_seq(2048)  # 60 experts, 24 layers
CLUSTER = load_cluster("dgx-h100")                     # one node of 8


def problem(workload=QWEN):
    return Problem(gpus=8, global_batch=16, gpus_per_node=8, layers=workload.layer_count, check_tp=workload.check_tp,
                   check_ep=workload.check_ep if workload.moe is not None else None)


def test_ep_values_divide_the_experts_and_each_candidate_s_dp():
    assert ep_values(problem()) == (1, 2, 4)           # divisors of 8 GPUs that divide 60 experts
    assert ep_values(problem(get_preset("llama2-7b"))) == (1,)
    keys = list(enumerate_keys(problem(), default_axes(problem())))
    assert {k["ep"] for k in keys} == {1, 2, 4}
    assert all(k["dp"] % k["ep"] == 0 for k in keys)
    assert any(k["ep"] == 4 and k["dp"] == 8 for k in keys) and not any(k["ep"] == 4 and k["dp"] == 2 for k in keys)


def test_a_pin_restricts_ep():
    keys = list(enumerate_keys(problem(), pin(default_axes(problem()), {"ep": (2,)})))
    assert keys and {k["ep"] for k in keys} == {2}


@pytest.fixture(scope="module")
def result():
    return planner.plan(QWEN, CLUSTER, gpus=8, global_batch=16, refine=0,
                        pins={"zero": (ZeroStage.ZERO1,), "pp": (1, 2)})


def test_the_search_ranks_several_ep_and_matches_the_scalar_estimate(result):
    frame = result.frame
    assert {s.ep for s in frame["strategy"]} == {1, 2, 4}
    for i in (0, len(frame) - 1):                      # the vectorised ranking equals the scalar estimate
        s = frame["strategy"][i]
        assert frame["step_time_s"][i] == pytest.approx(estimate(CLUSTER, QWEN, s).step_time_s, rel=1e-9)


def test_the_explanation_compares_the_other_ep(result):
    best_ep = result.frame["strategy"][0].ep
    lines = explain(result.frame)
    others = [ep for ep in (1, 2, 4) if ep != best_ep]
    runner_up = result.frame["strategy"][1].ep
    for ep in others:                                  # said once: as the runner-up, or in a sentence of its own
        assert ep == runner_up or any(line.startswith(f"The best plan with ep {ep} (") for line in lines)
    assert (f"ep {best_ep}" in describe(result.frame["strategy"][0])) == (best_ep > 1)


def test_placement_orders_are_tried_where_the_group_shapes_differ():
    """On one node every order keeps every group in the node: only the default is tried. On two
    nodes of 8 with tp 4, pp 2, dp 2 the Megatron-Core order (tp-dp-pp) puts pp across the nodes where
    tp-pp-dp puts dp: both tried; an order putting tp across nodes is not (planner.placement)."""
    from simulator.strategy import PlacementOrder

    keys = list(enumerate_keys(problem(), default_axes(problem())))
    assert {k["placement"] for k in keys} == {PlacementOrder.TP_PP_DP}
    dense = Problem(gpus=16, global_batch=16, gpus_per_node=8, layers=12, check_tp=lambda tp: None)
    keys = list(enumerate_keys(dense, default_axes(dense)))
    orders = {k["placement"] for k in keys if (k["dp"], k["tp"], k["pp"]) == (2, 4, 2)}
    assert orders == {PlacementOrder.TP_PP_DP, PlacementOrder.TP_DP_PP}
    assert {k["placement"] for k in keys if (k["dp"], k["tp"], k["pp"]) == (16, 1, 1)} == {PlacementOrder.TP_PP_DP}
    pinned = pin(default_axes(dense), {"placement": (PlacementOrder.DP_TP_PP,)})   # a pin is taken as given
    assert {k["placement"] for k in enumerate_keys(dense, pinned)} == {PlacementOrder.DP_TP_PP}


def test_a_data_parallel_only_profile_never_searches_ep():
    """DDP, Horovod and TensorFlow replicate the whole model: their profiles keep ep 1 (planner.frameworks);
    Megatron-LM shards experts, so its profile still ranks ep > 1; a pinned ep > 1 under DDP is refused."""
    from simulator.errors import SpecError

    from dataclasses import replace

    small = replace(QWEN, layers=4).with_seq(256)  # a whole replica fits a GPU, so DDP has plans to rank
    ddp = planner.plan(small, CLUSTER, gpus=8, global_batch=16, refine=0, profile="ddp",
                       pins={"zero": (ZeroStage.ZERO1,)})
    assert len(ddp.frame) and {s.ep for s in ddp.frame["strategy"]} == {1}
    megatron = planner.plan(small, CLUSTER, gpus=8, global_batch=16, refine=0, profile="megatron",
                            pins={"zero": (ZeroStage.ZERO1,), "pp": (1,)})
    assert {s.ep for s in megatron.frame["strategy"]} == {1, 2, 4}
    with pytest.raises(SpecError) as err:
        planner.plan(small, CLUSTER, gpus=8, global_batch=16, refine=0, profile="horovod", pins={"ep": (2,)})
    assert err.value.field == "ep" and "Horovod (--profile horovod) cannot run ep 2" in err.value.problem
