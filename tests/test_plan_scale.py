"""Scaling a plan down keeps its structure (simulator/plan_scale.py): hypothesis over presets and layouts."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from presets_once import cluster as preset_cluster
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.plan_file import Plan, plan_from_dict
from simulator.plan_scale import TINY_SEQ, Scale, ScaleKind, scale_plan
from simulator.schedules import ScheduleKind
from simulator.strategy import Strategy, ZeroStage
from simulator.workload import get_preset, model_names
from simulator.workload.protocol import divisors

TRANSFORMERS = [n for n in model_names()]


@st.composite
def plans(draw):
    spec = get_preset(draw(st.sampled_from(TRANSFORMERS)))
    tp = draw(st.sampled_from([d for d in divisors(spec.n_kv_heads) if d <= 8]))
    pp = draw(st.sampled_from([1, 2, 4]))
    interleaved = pp > 1 and draw(st.booleans())
    v = 2 if interleaved else 1
    dp = draw(st.sampled_from([1, 2, 4]))
    mbs = draw(st.sampled_from([1, 2]))
    m = pp * draw(st.integers(1, 3))
    strategy = Strategy(global_batch=dp * mbs * m, micro_batch=mbs, dp=dp, tp=tp, pp=pp, virtual_stages=v,
                        schedule=ScheduleKind.INTERLEAVED if interleaved else ScheduleKind.ONE_F_ONE_B,
                        zero=draw(st.sampled_from(list(ZeroStage) if pp == 1 else  # ZeRO-2/3 with pp: DeepSpeed
                                                  [ZeroStage.ZERO0, ZeroStage.ZERO1])))  # refuses (rules.py)
    gpus = dp * tp * pp
    cluster = preset_cluster("dgx-h100", -(-gpus // 8))
    return Plan(model=spec, cluster=cluster, gpus=gpus, strategy=strategy)


SCALES = st.one_of(st.just(Scale.parse("tiny")), st.floats(0.01, 0.99).map(lambda r: Scale.parse(f"{r:.3f}")))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans(), scale=SCALES, shrink=st.sampled_from([1, 2, 4]))
def test_scaling_keeps_the_structure_and_the_divisibility_rules(plan, scale, shrink):
    before = plan.layout()
    nproc = max(before.tp * before.pp, plan.gpus // shrink)
    nproc -= nproc % (before.tp * before.pp)
    scaled = scale_plan(plan, scale, nproc)
    after = scaled.run.layout()  # raises if a divisibility rule broke
    spec = scaled.run.model
    assert (after.tp, after.pp, after.v, after.micro_batches) == (before.tp, before.pp, before.v, before.micro_batches)
    assert after.world_size == nproc and after.dp == nproc // (before.tp * before.pp)
    for name in ("zero", "offload", "recompute", "schedule", "micro_batch", "dp_sync", "placement"):
        assert getattr(scaled.run.strategy, name) == getattr(plan.strategy, name), name
    assert spec.heads % after.tp == 0 and spec.n_kv_heads % after.tp == 0 and spec.vocab % after.tp == 0
    assert spec.ffn_size % after.tp == 0
    assert spec.layers >= after.pp * after.v
    assert (spec.n_kv_heads < spec.heads) == (plan.model.n_kv_heads < plan.model.heads)
    for name in ("activation", "norm", "position", "bias", "tied_embeddings", "dtype"):
        assert getattr(spec, name) == getattr(plan.model, name), name
    assert spec.params < plan.model.params
    assert plan_from_dict(scaled.run.to_dict()).model == spec  # the plan as run round-trips as a file


def test_tiny_shapes_and_notes():
    plan = Plan(model=get_preset("llama2-70b"), cluster=load_cluster("dgx-h100", nodes=8), gpus=64,
                strategy=Strategy(global_batch=64, micro_batch=1, dp=2, tp=8, pp=4))
    scaled = scale_plan(plan, Scale.parse("tiny"), nproc=32)
    spec = scaled.run.model
    assert (spec.heads, spec.n_kv_heads, spec.hidden, spec.seq_len, spec.layers) == (16, 8, 256, TINY_SEQ, 4)
    assert scaled.run.layout().dp == 1 and scaled.run.strategy.global_batch == 32
    assert "dp 2→1" in scaled.notes[1] and "32 micro-batch(es) of 1" in scaled.notes[1]


def test_as_planned_is_the_plan():
    plan = Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=8,
                strategy=Strategy(global_batch=16, dp=8))
    scaled = scale_plan(plan, Scale.parse("1"), None)
    assert scaled.scale.kind is ScaleKind.AS_PLANNED and scaled.run.model == plan.model and scaled.notes == ()


@pytest.mark.parametrize("text, field", [("huge", "scale"), ("0", "scale"), ("2", "scale"), ("nan", "scale")])
def test_bad_scales(text, field):
    with pytest.raises(SpecError) as err:
        Scale.parse(text)
    assert err.value.field == field


@pytest.mark.parametrize("nproc, words", [(3, "multiple of 4"), (16, "exceeds the plan's 8 GPUs"), (2, "multiple of 4")])
def test_nproc_that_cannot_hold_the_structure(nproc, words):
    plan = Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("dgx-h100"), gpus=8,
                strategy=Strategy(global_batch=16, dp=2, tp=2, pp=2))
    with pytest.raises(SpecError, match=words) as err:
        scale_plan(plan, Scale.parse("tiny"), nproc)
    assert err.value.field == "nproc"


def test_cp_is_structure_kept_and_all_to_all_keeps_heads_divisible_by_tp_cp():
    """Shrinking the world shrinks dp only (dp·cp ranks per replica group kept); tiny all-to-all cp shrinks
    as for a tp degree of tp·cp so its heads still split (2·tp·cp query heads); nproc must hold tp·pp·cp."""
    cluster = load_cluster("dgx-h100")
    from simulator.strategy.flat import strategy_from_flat

    ring = Plan(model=get_preset("llama3-8b").with_seq(32768), cluster=cluster, gpus=8,
                strategy=strategy_from_flat(dict(global_batch=8, micro_batch=2, dp=2, cp=4)))
    scaled = scale_plan(ring, Scale.parse("tiny"), 4)
    layout = scaled.run.layout()
    assert (layout.dp, layout.cp, layout.world_size, scaled.run.model.heads) == (1, 4, 4, 2)
    assert "cp 4 kept" in scaled.notes[1]
    a2a = Plan(model=get_preset("llama3-8b").with_seq(32768), cluster=cluster, gpus=8,
               strategy=strategy_from_flat(dict(global_batch=8, micro_batch=2, dp=2, cp=4, cp_kind="all-to-all")))
    spec = scale_plan(a2a, Scale.parse("tiny"), 4).run.model
    assert spec.heads == 8 and spec.heads % 4 == 0
    with pytest.raises(SpecError, match="tp·pp·cp = 1·1·4 = 4 ranks per replica") as err:
        scale_plan(ring, Scale.parse("tiny"), 2)
    assert err.value.field == "nproc"


def test_a_moe_plan_keeps_its_experts_shrinks_their_width_and_ep_follows_dp():
    """Mixtral (hidden 4096, expert ffn 14336) tiny: hidden 32, expert ffn 14336/4096·32 = 112; Qwen1.5-MoE
    (hidden 2048, expert 1408, shared 5632): 22 and 88, its gate kept. dp 16 → 4 takes ep 8 to gcd(8, 4) = 4,
    and ep 2 stays 2."""
    from dataclasses import replace

    from simulator.strategy.flat import strategy_from_flat

    cluster = load_cluster("dgx-h100", nodes=2)
    for name, ep, want_ep, widths in (("mixtral-8x7b", 8, 4, (112, None)), ("qwen1.5-moe-a2.7b", 2, 2, (22, 88))):
        spec = get_preset(name)
        plan = Plan(model=spec, cluster=cluster, gpus=16,
                    strategy=strategy_from_flat({"global_batch": 32, "dp": 16, "ep": ep}))
        scaled = scale_plan(plan, Scale.parse("tiny"), 4)
        moe = scaled.run.model.moe
        assert (moe.expert_ffn, moe.shared_ffn) == widths
        assert moe == replace(spec.moe, expert_ffn=widths[0], shared_ffn=widths[1])
        assert scaled.run.layout().ep == want_ep
        assert (f"ep {ep}→{want_ep}" in scaled.notes[1]) == (ep != want_ep)
