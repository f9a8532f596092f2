"""torchtitan's op-level selective checkpointing (``Recompute.SELECTIVE_OP``, simulator.workload.op_sac):
the bytes a block keeps and the work backward repeats, worked by hand from torchtitan's policy
(``_save_list`` and ``_custom_policy`` in parallelize_llama.py [src: torchtitan-op-sac]), and properties
that place it between no recomputation and full recomputation."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from presets_once import cluster as preset_cluster
from simulator.analytical import estimate_work
from simulator.cluster.io import load_cluster
from simulator.compile import compile_step
from simulator.compute import Phase, layer_times, total_time
from simulator.engine.step import simulate
from simulator.errors import SpecError
from simulator.memory.activations import layer_activation
from simulator.results import Category
from simulator.strategy import AttentionKind, Framework, Strategy, ZeroStage
from simulator.strategy.kinds import GradReduceDtype
from simulator.workload import ActivationKind, DtypePolicy, Recompute, TransformerSpec, load_model
from simulator.workload.flops import recompute_flops_per_token

# h = 64, 4 heads of 16 (q = 64), 2 KV heads (kv = 32), f = 128, SwiGLU, bf16 (e = 2)
SMALL = TransformerSpec(name="small", layers=2, hidden=64, heads=4, kv_heads=2, vocab=100, seq_len=8, ffn=128,
                        activation=ActivationKind.SWIGLU, dtype=DtypePolicy.BF16_MIXED)


def test_kept_bytes_per_block_worked_by_hand():
    # b = 2, s = 8: T = 16 tokens. Kept per token: block input h, wq q, wv kv, SDPA output q, w1 f, w2 h
    # = 64 + 64 + 32 + 64 + 128 + 64 = 416 bf16 elements = 832 bytes, plus the fp32 LSE of 4 heads,
    # 16 bytes: 848 bytes per token, 16 · 848 = 13,568 bytes per block.
    layer = layer_activation(SMALL, seq=8, mbs=2)
    assert layer.kept_bytes(Recompute.SELECTIVE_OP) == 13_568
    # tp = 2 with sequence parallelism: input h/2, wq q/2, wv kv/2, SDPA q/2, w1 f/2, w2's partial sum h
    # (row-parallel, unsplit), two reduce-scatter outputs h/2 each: 32 + 32 + 16 + 32 + 64 + 64 + 64 = 304
    # elements = 608 bytes, plus LSE of 2 heads, 8 bytes: 616 · 16 = 9,856 bytes.
    assert layer_activation(SMALL, seq=8, mbs=2, tp=2, sp=True).kept_bytes(Recompute.SELECTIVE_OP) == 9_856


def test_recompute_flops_worked_by_hand():
    # per token and block: wk 2·h·kv = 4,096, wo 2·q·h = 8,192, w3 2·h·f = 16,384: 28,672; two blocks
    assert recompute_flops_per_token(SMALL, Recompute.SELECTIVE_OP) == 2 * 28_672
    device = load_cluster("dgx-h100").device
    rows = [r for r in layer_times(SMALL, device, 2, recompute=Recompute.SELECTIVE_OP) if r.phase is Phase.RECOMPUTE]
    assert sum(r.flops for r in rows) == 16 * 28_672


@st.composite
def specs(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([8, 16, 64]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8) if heads % k == 0]))
    return TransformerSpec(name="t", layers=draw(st.integers(1, 12)), hidden=heads * head_dim, heads=heads,
                           kv_heads=kv, vocab=draw(st.integers(10, 5000)), seq_len=draw(st.integers(1, 2048)),
                           ffn=draw(st.integers(8, 4096)), activation=draw(st.sampled_from(list(ActivationKind))),
                           dtype=draw(st.sampled_from(list(DtypePolicy))))


@settings(max_examples=150, deadline=None)
@given(spec=specs(), mbs=st.integers(1, 4), tp=st.sampled_from([1, 2, 4, 8]))
def test_op_level_keeps_between_none_and_full(spec, mbs, tp):
    """Without sequence parallelism. (With it the policy also keeps w2's unsplit partial sum and the
    reduce-scatter outputs, which no-recompute does not: it can keep more than none there.)"""
    if spec.heads % tp or spec.n_kv_heads % tp:
        return
    layer = layer_activation(spec, seq=spec.seq_len, mbs=mbs, tp=tp)
    kept = {r: layer.kept_bytes(r) for r in Recompute}
    assert kept[Recompute.FULL] <= kept[Recompute.SELECTIVE_OP] <= kept[Recompute.NONE]


@settings(max_examples=100, deadline=None)
@given(spec=specs(), mbs=st.integers(1, 4), tp=st.sampled_from([1, 2, 4]),
       preset=st.sampled_from(["dgx-h100", "dgx-a100"]))
def test_op_level_recompute_time_between_none_and_full(spec, mbs, tp, preset):
    """Time, not only FLOPs: with GEMM leading dimensions aligned. Misaligned, the policy's lone w3 GEMM
    (f/t columns) can cost more than full recompute's fused w1-w3 GEMM (2·f/t, a better alignment class) plus
    w2: ffn 20, tp 4, one token on dgx-h100 reads 19.8 µs selective against 19.3 µs full
    (:mod:`simulator.gemm_alignment`), so ffn is rounded to a multiple of 8·tp here."""
    if spec.heads % tp or spec.n_kv_heads % tp:
        return
    spec = dataclasses.replace(spec, ffn=max(1, spec.ffn // (8 * tp)) * 8 * tp)
    device = preset_cluster(preset).device
    recompute = {r: total_time(layer_times(spec, device, mbs, tp=tp, recompute=r), Phase.RECOMPUTE)
                 for r in (Recompute.NONE, Recompute.SELECTIVE_OP, Recompute.FULL)}
    assert 0 == recompute[Recompute.NONE] < recompute[Recompute.SELECTIVE_OP] <= recompute[Recompute.FULL]
    flops = {r: recompute_flops_per_token(spec, r) for r in Recompute}
    assert 0 < flops[Recompute.SELECTIVE_OP] < flops[Recompute.FULL]


@pytest.mark.parametrize("zero", [ZeroStage.ZERO0, ZeroStage.ZERO3])
def test_both_engines_charge_the_recompute(zero):
    # ZeRO-3 as torchtitan runs it (op-level SAC is its policy): FSDP2. Under DeepSpeed's deeper prefetch
    # the engines differ on recompute (tests/test_ds_zero3.py::test_recompute_under_deep_prefetch_the_des_is_slower_only).
    # Gradients reduced in bf16: with torchtitan's fp32 reduce-scatters (twice the bytes) this step is
    # communication-bound and the DES reads the recomputing steps 4.7 % (selective) and 6.5 % (full) longer than the
    # closed form (none: equal; 4.9 % and 6.0 % with eager SwiGLU counted) — an engine difference noted in docs/simulator.md, not what this test checks.
    cluster, model = load_cluster("dgx-h100"), load_model("llama2-7b").with_seq(1024)
    framework = {"framework": Framework.FSDP2, "grad_reduce_dtype": GradReduceDtype.PARAM_DTYPE} \
        if zero is ZeroStage.ZERO3 else {}
    steps = {}
    for r in (Recompute.NONE, Recompute.SELECTIVE_OP, Recompute.FULL):
        work = compile_step(cluster, model, Strategy(global_batch=16, micro_batch=2, dp=8, zero=zero, recompute=r,
                                                     **framework))
        analytical, des = estimate_work(work), simulate(work, cluster, trace=False)
        assert des.step_time_s == pytest.approx(analytical.step_time_s, rel=0.02)
        assert (des.breakdown.get(Category.RECOMPUTE, 0) > 0) is (r is not Recompute.NONE)
        steps[r] = analytical.step_time_s
    assert steps[Recompute.NONE] < steps[Recompute.SELECTIVE_OP] < steps[Recompute.FULL]


def test_refused_where_the_policy_is_not_modelled():
    cluster = load_cluster("dgx-h100")
    with pytest.raises(SpecError) as err:
        compile_step(cluster, load_model("llama2-7b").with_seq(1024),
                     Strategy(global_batch=16, micro_batch=2, dp=8, attention=AttentionKind.EAGER,
                              recompute=Recompute.SELECTIVE_OP))
    assert err.value.field == "recompute"


def test_planner_searches_it_under_the_torch_profiles_only():
    import planner

    model, cluster = load_model("gpt3-125m").with_seq(512), load_cluster("dgx-h100", nodes=2)
    for profile, searched in (("fsdp", True), ("ddp", True), ("megatron", False), (None, False)):
        frame = planner.plan(model, cluster, gpus=16, global_batch=32, refine=0, profile=profile).frame
        policies = {s.recompute for s in frame["strategy"]}
        assert (Recompute.SELECTIVE_OP in policies) is searched, profile
    with pytest.raises(SpecError) as err:
        planner.plan(model, cluster, gpus=16, global_batch=32, refine=0, profile="megatron",
                     pins={"recompute": (Recompute.SELECTIVE_OP,)})
    assert "cannot run recompute selective-op" in err.value.problem
