"""Expert parallelism in the strategy: the ep field, its rules (ep divides the experts and dp), the error
that names the field and the fix, the expert-parallel and expert-data-parallel rank groups."""

import numpy as np
import pytest

from simulator.cluster.presets import load_preset
from simulator.errors import SpecError
from simulator.strategy import Strategy, ZeroStage, build_layout
from simulator.strategy.flat import strategy_from_flat
from simulator.strategy.rules import Candidates, valid_mask
from simulator.workload import ParamCountModel, get_preset

H100 = load_preset("dgx-h100")  # 8 GPUs per node
MIXTRAL = get_preset("mixtral-8x7b")  # 8 experts
QWEN = get_preset("qwen1.5-moe-a2.7b")  # 60 experts


def layout(nodes=4, workload=MIXTRAL, **kw):
    kw.setdefault("global_batch", 64)
    return build_layout(Strategy(**kw), H100.with_nodes(nodes), workload)


def test_ep_groups_are_consecutive_dp_indices():
    lay = layout(tp=2, ep=4)  # 32 GPUs: dp 16; rank = tp + 2·dp (pp 1)
    assert (lay.dp, lay.ep) == (16, 4)
    assert lay.ep_group(pp=0) == (0, 2, 4, 6)            # dp 0..3 at tp 0: inside one node
    assert lay.ep_group(pp=0, tp=1, dp=5) == (9, 11, 13, 15)
    assert lay.expert_dp_group(pp=0) == tuple(2 * d for d in range(0, 16, 4))  # dp 0, 4, 8, 12


@pytest.mark.parametrize("kw,fix", [
    ({"ep": 3}, "use 1, 2, 4 or 8"),                      # 3 does not divide the 8 experts
    ({"ep": 16, "tp": 4}, "use 1, 2, 4 or 8"),            # dp = 8, but 16 does not divide 8 experts either
])
def test_ep_must_divide_the_experts(kw, fix):
    with pytest.raises(SpecError) as err:
        layout(**kw)
    assert err.value.field == "ep" and fix in str(err.value)


def test_ep_must_divide_dp():
    with pytest.raises(SpecError) as err:
        layout(nodes=1, workload=QWEN, tp=4, ep=4, global_batch=8)   # dp = 2; 4 divides 60 experts
    assert err.value.field == "ep" and "dp=2" in str(err.value) and "use ep 1 or 2" in str(err.value)


def test_dense_models_refuse_ep():
    with pytest.raises(SpecError) as err:
        layout(workload=get_preset("llama2-7b"), ep=2)
    assert err.value.field == "ep" and "use ep 1" in str(err.value)
    with pytest.raises(SpecError):
        ParamCountModel(params=10**9).check_ep(2)


def test_routing_skew_is_a_checked_scenario_field():
    assert strategy_from_flat({"global_batch": 8, "ep": "2", "routing_skew": "1.5"}).routing_skew == 1.5
    for bad in (0.5, 0, float("nan")):
        with pytest.raises(SpecError) as err:
            Strategy(global_batch=8, routing_skew=bad)
        assert err.value.field == "routing_skew"


def test_valid_mask_applies_both_ep_rules():
    c = Candidates.of(dp=np.array([8, 8, 2, 8]), tp=1, pp=np.array([4, 4, 16, 4]), v=1, micro_batch=1,
                      global_batch=64, interleaved=False, ep=np.array([8, 3, 4, 1]))
    # 8 | dp and 8 experts; 3 divides neither; 4 > dp 2; 1 always
    assert valid_mask(c, 32, MIXTRAL).tolist() == [True, False, False, True]


def test_the_executor_refuses_what_it_does_not_run():
    # no stand-in for latent attention; ep × tp runs, not with ZeRO-1 (no family runs it with tp: test_executor_moe*.py)
    from executor.model import GPT
    from executor.strategies.base import family_spec

    with pytest.raises(SpecError) as err:
        GPT(get_preset("deepseek-v2-lite"))
    assert err.value.field == "model"
    from executor.strategies import load_families
    from simulator.plan_file import Plan

    load_families()
    plan = Plan(model=MIXTRAL, cluster=H100.with_nodes(4), gpus=32,
                strategy=Strategy(global_batch=64, tp=2, ep=4, zero=ZeroStage.ZERO1))
    with pytest.raises(SpecError) as err:
        family_spec(plan.layout()).check(plan, plan.layout())
    assert err.value.field == "plan.strategy.zero" and "use zero 0, 2 or 3" in str(err.value)


@pytest.mark.parametrize("field, value, default", [
    ("moe_routing", "round-robin", "learned"), ("moe_dispatcher", "deepep", "per-expert"), ("routing_skew", "1.5", "1")])
def test_moe_fields_on_a_model_without_experts_are_refused_naming_the_field(field, value, default):
    """A routing field of a MoE layer on a dense transformer, a layer list or a parameter count would change
    nothing: one error naming the field and its default; the default stays accepted, and a MoE model takes it."""
    strategy = strategy_from_flat({"global_batch": 64, field: value})
    for workload in (get_preset("llama2-7b"), ParamCountModel(params=10**9)):
        with pytest.raises(SpecError) as err:
            build_layout(strategy, H100.with_nodes(4), workload)
        assert err.value.field == field and f"use {default} (the default)" in str(err.value)
        assert "\n" not in str(err.value)
        build_layout(strategy_from_flat({"global_batch": 64, field: default}), H100.with_nodes(4), workload)
    build_layout(strategy, H100.with_nodes(4), MIXTRAL)


@pytest.mark.parametrize("argv", [
    ["simulate", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "8",
     "--moe-dispatcher", "deepep"],
    ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "8", "--quiet",
     "--moe-routing", "learned,round-robin"],  # before the search: not "nothing fits"
    ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "8", "--quiet",
     "--routing-skew", "1.5"],
])
def test_cli_refuses_moe_fields_of_a_dense_model_in_one_line(capsys, argv):
    from trainplan.__main__ import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "has no mixture-of-experts layers" in err and len(err.splitlines()) == 1


def test_a_plan_file_with_moe_fields_on_a_dense_model_is_refused(tmp_path):
    from simulator.plan_file import Plan, load_plan

    path = tmp_path / "plan.json"
    plan = Plan(model=get_preset("gpt3-125m"), cluster=H100, gpus=8, strategy=Strategy(global_batch=8))
    plan.save(path)
    text = path.read_text()
    assert load_plan(path).strategy.moe_routing.value == "learned"  # the defaults load as before
    assert '"moe_routing": "learned"' in text
    path.write_text(text.replace('"moe_routing": "learned"', '"moe_routing": "round-robin"'))
    with pytest.raises(SpecError) as err:
        load_plan(path)
    assert err.value.field == "plan.strategy.moe_routing"


def test_stage_groups_memo_keeps_cp_apart():
    """Two layouts with the same dp·cp, tp, pp and ep but a different dp/cp split have different expert groups
    (cp ranks sit inside the ep group's stride): one CostCache must not hand one layout's groups to the other."""
    from simulator.compile import CostCache
    from simulator.compile.step import all_stage_groups, stage_groups
    from simulator.strategy.flat import strategy_from_flat

    node = H100.with_nodes(1)  # 8 GPUs
    plain = build_layout(strategy_from_flat(dict(global_batch=8, ep=2, tp=2, cp=1)), node, QWEN)  # dp 4
    split = build_layout(strategy_from_flat(dict(global_batch=8, ep=2, tp=2, cp=2)), node, QWEN)  # dp 2 · cp 2
    assert plain.dp_cp == split.dp_cp and plain.ep_group(0) != split.ep_group(0)
    cache = CostCache(node)
    assert stage_groups(cache, plain, 0)[3] == plain.ep_group(0)
    assert stage_groups(cache, split, 0)[3] == split.ep_group(0)
    assert all_stage_groups(cache, plain)[0][4] == plain.expert_dp_group(0)
    assert all_stage_groups(cache, split)[0][4] == split.expert_dp_group(0)
