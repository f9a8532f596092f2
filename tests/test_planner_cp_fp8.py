"""The planner's context-parallel and FP8 axes (issue 14 §4): cp searched for long sequences and
pinnable, dp = d ÷ cp per (d, tp, pp) factorisation, framework capabilities, and the explanation of
why cp or FP8 wins."""

import pytest

import planner
from planner.explain import explain
from planner.frameworks import capability
from planner.space import LONG_CONTEXT_TOKENS, Problem, cp_values, default_axes, enumerate_keys, pin
from simulator.cluster.io import load_cluster
from simulator.strategy import ZeroStage
from simulator.workload import load_model
from simulator.workload.context import ContextKind
from simulator.workload.fp8 import MatmulPrecision

LLAMA = load_model("llama3-8b")


def _problem(seq, gpus=32):
    return Problem(gpus=gpus, global_batch=32, gpus_per_node=8, layers=32, check_tp=LLAMA.check_tp, seq_len=seq)


def test_cp_degrees_searched_for_long_sequences_only():
    assert cp_values(_problem(131072)) == (1, 2, 4, 8)                # powers of two within the node
    assert cp_values(_problem(LONG_CONTEXT_TOKENS - 1)) == (1,)
    assert cp_values(_problem(None)) == (1,)
    assert cp_values(_problem(131072, gpus=4)) == (1, 2, 4)


def test_every_candidate_fills_the_gpus_and_pins_apply_to_dp_after_cp():
    p = _problem(131072)
    keys = list(enumerate_keys(p, pin(default_axes(p), {"tp": (8,)})))
    assert {k["cp"] for k in keys} == {1, 2, 4} and all(k["dp"] * k["tp"] * k["pp"] * k["cp"] == 32 for k in keys)
    assert all(k["cp_kind"] in tuple(ContextKind) for k in keys if k["cp"] > 1)
    assert not any("cp_kind" in k for k in keys if k["cp"] == 1)
    pinned = list(enumerate_keys(p, pin(default_axes(p), {"tp": (8,), "dp": (1,), "cp": (4,)})))
    assert pinned and all((k["dp"], k["cp"], k["pp"]) == (1, 4, 1) for k in pinned)


def test_frameworks_that_cannot_run_cp_or_fp8():
    assert not capability("ddp").allows("cp", 2) and capability("megatron").allows("cp", 4)
    deepspeed = capability("deepspeed")
    assert deepspeed.allows("cp_kind", ContextKind.ALL_TO_ALL) and not deepspeed.allows("cp_kind", ContextKind.RING)
    assert not capability("horovod").allows("precision", MatmulPrecision.FP8)
    assert capability("fsdp").allows("precision", MatmulPrecision.FP8)


@pytest.fixture(scope="module")
def long_context():
    """Llama 3 8B at 131072 tokens on 4 DGX H100 nodes: without cp only full recomputation fits."""
    cluster = load_cluster("dgx-h100", nodes=4)
    return planner.plan(LLAMA.with_seq(131072), cluster, gpus=32, global_batch=32, refine=0,
                        pins={"zero": (ZeroStage.ZERO0, ZeroStage.ZERO1), "tp": (4, 8), "max_pp": (1,),
                              "precision": (MatmulPrecision.MODEL, MatmulPrecision.FP8)})


def test_a_128k_llama_plan_uses_cp_and_says_why(long_context):
    best = long_context.best.strategy
    assert best.cp > 1
    frame = long_context.frame
    without = frame[[s.cp == 1 for s in frame["strategy"]]]
    assert not without.empty and (without["strategy"].map(lambda s: s.recompute.value) == "full").all()
    lines = explain(frame)
    assert any(line.startswith("The best plan without context parallelism") for line in lines)
    assert f"cp {best.cp} {best.cp_kind.value}" in lines[0]


def test_fp8_is_weighed_when_both_precisions_are_searched(long_context):
    frame = long_context.frame
    assert {s.precision for s in frame["strategy"]} == {MatmulPrecision.MODEL, MatmulPrecision.FP8}
    lines = explain(frame)
    assert any("plan without FP8" in line or "best FP8 plan" in line for line in lines)


def test_the_state_lower_bound_shards_over_dp_times_cp():
    """ZeRO-3 with dp 1, cp 8: the states spread over 8 ranks, so the bound must not prune it as if dp = 1."""
    from planner.feasible import _states_lower_bound
    from simulator.strategy.flat import strategy_from_flat

    cp = _states_lower_bound(LLAMA, strategy_from_flat(dict(global_batch=8, dp=1, cp=8, zero=3)))
    dp = _states_lower_bound(LLAMA, strategy_from_flat(dict(global_batch=8, dp=8, zero=3)))
    assert cp == dp


def test_fp8_pin_on_a_device_without_fp8_is_one_line():
    from simulator.errors import SpecError

    with pytest.raises(SpecError, match="no FP8 tensor cores") as err:
        planner.plan(LLAMA, load_cluster("dgx-a100", nodes=1), gpus=8, global_batch=16, refine=0,
                     pins={"precision": (MatmulPrecision.FP8,)})
    assert err.value.field == "precision"
