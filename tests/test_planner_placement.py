"""Placement orders as a planner axis (planner.placement): the orders searched are those whose groups
differ in shape, a pin is honoured, an order that puts tp across nodes costs what its cross-node
all-reduces cost, and --explain says so."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

import planner
from planner.explain import explain
from planner.placement import NodeShape, crossing, distinct_orders, group_ranks, signature, split_orders
from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.compile import compile_step
from simulator.results import Category
from simulator.strategy import Framework, PlacementOrder, Recompute, Strategy, ZeroStage
from simulator.workload import get_preset

A100 = load_cluster("dgx-a100", nodes=2)          # 2 nodes of 8 A100s, one HDR NIC per GPU
GPT = get_preset("gpt3-1.3b").with_seq(2048)      # 24 layers, hidden 2048
PINS = {"tp": (8,), "zero": (ZeroStage.ZERO0,), "recompute": (Recompute.NONE,), "micro_batch": (1,),
        "sequence_parallel": (False,)}


def test_group_shapes_follow_the_order():
    # dp 2, tp 8 on nodes of 8: tp-pp-dp keeps tp in the node, dp across; dp innermost the reverse
    assert group_ranks(PlacementOrder.TP_PP_DP, 2, 8, 1)["tp"] == tuple(range(8))
    assert group_ranks(PlacementOrder.PP_DP_TP, 2, 8, 1)["tp"] == tuple(range(0, 16, 2))
    assert crossing(PlacementOrder.TP_PP_DP, 8, 2, 8, 1) == ("dp",)
    assert crossing(PlacementOrder.PP_DP_TP, 8, 2, 8, 1) == ("tp",)
    # orders that differ only in where a size-1 dimension goes are one order
    assert distinct_orders(NodeShape(8), 2, 8, 1) == (PlacementOrder.TP_PP_DP, PlacementOrder.PP_DP_TP)
    assert split_orders(NodeShape(8), 2, 8, 1) == ((PlacementOrder.TP_PP_DP,), (PlacementOrder.PP_DP_TP,))
    assert split_orders(NodeShape(8), 2, 8, 1, cross_node_tp=True)[1] == ()
    # on a node whose GPUs are not interchangeable, a strided tp group is another shape
    assert len(distinct_orders(NodeShape(8, uniform=False), 1, 4, 2)) > len(distinct_orders(NodeShape(8), 1, 4, 2))


def test_tp_across_nodes_is_slower_by_its_all_reduces():
    """Hand-worked: each tp all-reduce is of s·b·h·2 = 2048·1·2048·2 = 8,388,608 bytes, 2 per layer
    each way plus one at the model's edge (2·24 + 1 = 49 per micro-batch each way), 16 micro-batches.
    Across 2 nodes with 4 ranks each, a ring sends 2(n−1)/n·S bytes from one node to the other through
    at most 4 NICs at 25 GB/s × 0.96 (the preset's HDR figures): at least 153 µs per call, more than
    the in-node ring takes. Without pipelining the compute is the same and tp blocks it, so the step
    differs by 16·98 calls × the per-call difference (and the dp sync, which moves the other way)."""
    times, works = {}, {}
    for order in (PlacementOrder.TP_PP_DP, PlacementOrder.PP_DP_TP):
        s = Strategy(global_batch=32, micro_batch=1, tp=8, placement=order,
                     framework=Framework.MEGATRON)  # Megatron's list (torch's DTensor list: test_torch_tp_calls)
        works[order], times[order] = compile_step(A100, GPT, s), estimate(A100, GPT, s)
    size = 2048 * 1 * 2048 * 2
    call = {}
    for order, work in works.items():
        chunk = work.stages[0].chunks[0]
        assert len(chunk.tp_fwd) == len(chunk.tp_bwd) == 49 and work.micro_batches == 16
        assert {c.nbytes for c in chunk.tp_fwd + chunk.tp_bwd} == {size}
        call[order] = chunk.tp_fwd[1].time_s
    nic_bound_s = 2 * 7 / 8 * size / (4 * 25e9 * 0.96)
    assert nic_bound_s == pytest.approx(152.9e-6, rel=1e-3)
    assert call[PlacementOrder.PP_DP_TP] >= nic_bound_s > call[PlacementOrder.TP_PP_DP]
    intra, cross = times[PlacementOrder.TP_PP_DP], times[PlacementOrder.PP_DP_TP]
    dp_gain = intra.breakdown[Category.DP] - cross.breakdown[Category.DP]
    expected = 16 * 98 * (call[PlacementOrder.PP_DP_TP] - call[PlacementOrder.TP_PP_DP]) - dp_gain
    assert cross.step_time_s - intra.step_time_s == pytest.approx(expected, rel=1e-6)
    assert cross.step_time_s > intra.step_time_s + 0.1


@pytest.fixture(scope="module")
def result():
    return planner.plan(GPT, A100, gpus=16, global_batch=32, refine=0, pins=PINS)


def test_the_search_ranks_the_other_order_and_explains_why_it_loses(result):
    frame = result.frame
    best = frame["strategy"][0]
    assert best.placement is PlacementOrder.TP_PP_DP and best.tp == 8
    assert PlacementOrder.PP_DP_TP in {s.placement for s in frame["strategy"]}   # ranked in the second phase
    lines = explain(frame, result.notes, gpus_per_node=8)
    line = next(x for x in lines if x.startswith("Placement "))
    other = min(t for s, t in zip(frame["strategy"], frame["step_time_s"])
                if s.placement is PlacementOrder.PP_DP_TP and replace(s, placement=best.placement) == best)
    assert line.startswith("Placement tp-pp-dp (dp over 2 nodes): the best other order of the same layout, "
                           f"pp-dp-tp (tp over 2 nodes), is {other - frame['step_time_s'][0]:.3g} s per step slower")
    assert re.search(r": \+0\.1\d\d s tp(, [-+][0-9.]+ s dp)?\.$", line), line  # tp is where it loses (above)


def test_a_pinned_order_is_honoured():
    pinned = planner.plan(GPT, A100, gpus=16, global_batch=32, refine=0,
                          pins=PINS | {"placement": (PlacementOrder.DP_TP_PP,)})
    assert {s.placement for s in pinned.frame["strategy"]} == {PlacementOrder.DP_TP_PP}


def test_the_ranking_with_orders_is_deterministic(result):
    again = planner.plan(GPT, A100, gpus=16, global_batch=32, refine=0, pins=PINS)
    assert list(again.frame["strategy"]) == list(result.frame["strategy"])
    assert list(again.frame["step_time_s"]) == list(result.frame["step_time_s"])


def test_the_command_line_pins_the_order_and_explains_it(capsys):
    import json

    from trainplan.__main__ import main

    argv = ["plan", "--model", "gpt3-1.3b", "--seq", "2048", "--cluster", "dgx-a100", "--nodes", "2", "--gpus", "16",
            "--gbs", "32", "--tp", "8", "--zero", "0", "--recompute", "none", "--mbs", "1", "--no-sp", "--refine", "0",
            "--quiet", "--json", "--explain"]
    assert main([*argv, "--order", "pp-dp-tp"]) == 0       # --order is --placement's other spelling
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["strategy"]["placement"] == "pp-dp-tp"
    assert main([*argv, "--placement", "pp-dp-tp,tp-pp-dp"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["strategy"]["placement"] == "tp-pp-dp"
    assert any(line.startswith("Placement tp-pp-dp (dp over 2 nodes)") for line in out["explain"])
    assert main([*argv, "--order", "tp-xx-dp"]) == 2
    assert "placement" in capsys.readouterr().err


@pytest.mark.parametrize("dp, tp, pp", [(2, 4, 2), (4, 2, 2), (1, 4, 4), (8, 2, 1)])
def test_group_ranks_are_the_layout_s_groups(dp, tp, pp):
    """planner.placement numbers ranks as ParallelLayout does: rank 0's tp, pp and dp groups are the
    layout's first groups of each, under every order (so the signatures describe what is compiled)."""
    from simulator.strategy import build_layout

    h100 = load_cluster("dgx-h100", nodes=2)
    model = get_preset("gpt3-125m")
    for order in PlacementOrder:
        layout = build_layout(Strategy(global_batch=64, dp=dp, tp=tp, pp=pp, placement=order), h100, model)
        groups = group_ranks(order, dp, tp, pp)
        assert groups["tp"] == layout.tp_groups[0] and groups["pp"] == layout.pp_groups[0]
        assert groups["dp"] == layout.dp_groups[0]
    # every order shares its signature with the one distinct_orders keeps for it, and the kept differ
    kept = distinct_orders(NodeShape(8), dp, tp, pp)
    sig = lambda order: signature(order, NodeShape(8), dp, tp, pp)  # noqa: E731
    assert {sig(o) for o in PlacementOrder} == {sig(o) for o in kept}
    assert kept[0] is PlacementOrder.TP_PP_DP and len(kept) == len({sig(o) for o in kept})
