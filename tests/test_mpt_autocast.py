"""llm-foundry's MPT under Composer's 2023 FSDP ``DEFAULT`` mixed precision (autocast over fp32 parameters) against
hand-worked bytes (docs/validation.md, foundry23).

MPT-3B, micro-batch 5 at s = 4096 on one rank: T = 20,480 tokens, h = 2,560, no biases, bf16 (e = 2), fp32 4 B.
Per block: two LayerNorms over T·h elements. ``LPLayerNorm`` casts its fp32 input down (4 + e = 6 B per element)
and runs ``F.layer_norm`` in bf16 (2e = 4 B); autocast's own rule runs the norm in fp32 (8 B) and casts its output
(6 B). Weight casts: 12·h² weights (QKV 3h², out h², MLP 8h²) at 6 B each way. Residual adds on the fp32 stream:
4 + e + 4 = 10 B per element forward.
"""

from simulator.strategy.formats import runs_autocast
from simulator.workload import get_preset
from simulator.workload.autocast import autocast_block
from simulator.workload.kinds import KernelFusion, ModelCode
from simulator.workload.model_code import fp32_norms_under_autocast, with_model_code
from simulator.workload.ops import OpKind, layer_work

T, H = 5 * 4096, 2560


def _fwd(works, op):
    return {k.name: k.bytes for w in works if w.op is op for k in w.fwd}


def test_lp_layernorm_stays_bf16_with_its_input_cast():
    spec = get_preset("mpt-3b").with_seq(4096)
    works = layer_work(spec, 5, 4096)
    assert with_model_code(works, ModelCode.LLM_FOUNDRY_MPT, KernelFusion.EAGER, 2) == works  # one kernel per norm
    assert not fp32_norms_under_autocast(ModelCode.LLM_FOUNDRY_MPT) and fp32_norms_under_autocast(ModelCode.FUSED_OPS)
    lp = autocast_block(works, 2, spec.bias, ModelCode.LLM_FOUNDRY_MPT)
    amp = autocast_block(works, 2, spec.bias)
    assert sum(_fwd(lp, OpKind.NORM).values()) == 2 * T * H * 4 == 419_430_400
    assert sum(_fwd(amp, OpKind.NORM).values()) == 2 * T * H * 8 == 838_860_800
    lp_casts, amp_casts = _fwd(lp, OpKind.CAST), _fwd(amp, OpKind.CAST)
    assert sum(b for n, b in lp_casts.items() if ".cast_input" in n) == 2 * T * H * 6 == 629_145_600
    assert sum(b for n, b in amp_casts.items() if ".cast_output" in n) == 2 * T * H * 6
    assert sum(b for n, b in lp_casts.items() if "cast_weight" in n) == 12 * H * H * 6 == 471_859_200
    assert _fwd(lp, OpKind.ELEMENTWISE)["residual"] == 2 * T * H * 10 == 1_048_576_000
    norm_bwd = [sum(k.bytes for w in ws if w.op is OpKind.NORM for k in w.bwd) for ws in (lp, amp, works)]
    assert norm_bwd[0] == norm_bwd[2] and norm_bwd[1] == 2 * norm_bwd[2]


def test_foundry_groups_run_autocast_where_the_table_says_default():
    """The rows' MP Mode column: H100 and A100-80 (amp_bf16, DEFAULT) under autocast; A100-80 70B and A100-40
    (bf16, PURE) with bf16 parameters."""
    from benchmarks.validate_published import load_runs, strategy_of, workload_of
    foundry = [r for r in load_runs() if r.id.startswith("foundry-")]
    pure = {r.id for r in foundry if r.id.startswith(("foundry-a100-40-", "foundry-a100-80-70b-"))}
    assert len(foundry) == 31 and len(pure) == 6
    for r in foundry:
        s = strategy_of(r)
        assert s.model_code is ModelCode.LLM_FOUNDRY_MPT
        assert runs_autocast(workload_of(r).dtype, s) is (r.id not in pure), r.id
