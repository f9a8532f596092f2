"""The attention kind is one strategy choice used alike by the compute model, the memory model and
the step compiler: eager attention costs time and keeps Korthikanti et al. 2022's 5as/h term;
selective recomputation recomputes (and stops keeping) the eager attention core, and does nothing
under flash attention.

GPT-3 175B (h 12288, a 96, 96 layers, s 2048, dropout 0.1, bf16) on 64 A100s, tp 8, pp 8, dp 1,
micro-batch 1, 64 micro-batches: stage 0 holds 12 blocks and, under 1F1B, min(p, m) = 8 micro-batches.
"""

import pytest

from simulator.cluster.io import load_cluster
from simulator.compile import compile_step
from simulator.compute import Phase, layer_times
from simulator.errors import SpecError
from simulator.strategy import AttentionKind, Recompute, Strategy
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import load_model

GiB = 2 ** 30
TP, PP, LAYERS_PER_STAGE, IN_FLIGHT = 8, 8, 12, 8


@pytest.fixture(scope="module")
def setup():
    return load_cluster("dgx-a100", nodes=8), load_model("gpt3-175b")


@pytest.fixture(scope="module")
def works(setup):
    cluster, model = setup
    return {(att, rc): compile_step(cluster, model, Strategy(global_batch=64, tp=TP, pp=PP, attention=att,
                                                             recompute=rc))
            for att in AttentionKind for rc in (Recompute.NONE, Recompute.SELECTIVE)}


def _attention_fwd_s(cluster, model, flash: bool) -> float:
    rows = layer_times(model, cluster.device, 1, model.seq_len, TP, flash_attention=flash)
    return next(r.time_s for r in rows if r.op.value == "attention" and r.phase is Phase.FWD)


def test_flat_key_and_validation():
    assert strategy_from_flat({"global_batch": 8}).attention is AttentionKind.FLASH
    assert strategy_from_flat({"global_batch": 8, "attention": "EAGER"}).attention is AttentionKind.EAGER
    with pytest.raises(SpecError, match="flash, eager"):
        strategy_from_flat({"global_batch": 8, "attention": "sdpa"})
    with pytest.raises(SpecError, match="AttentionKind"):
        Strategy(global_batch=8, attention="eager")


def test_eager_is_slower_by_its_attention_kernels(setup, works):
    """The chunk's extra time is exactly 12 blocks × (unfused − fused attention forward) per micro-batch."""
    cluster, model = setup
    flash = works[AttentionKind.FLASH, Recompute.NONE].stages[0].chunks[0]
    eager = works[AttentionKind.EAGER, Recompute.NONE].stages[0].chunks[0]
    delta = _attention_fwd_s(cluster, model, False) - _attention_fwd_s(cluster, model, True)
    assert delta > 0 and eager.fwd_s > flash.fwd_s and eager.bwd_s > flash.bwd_s
    assert eager.fwd_s - flash.fwd_s == pytest.approx(LAYERS_PER_STAGE * delta, rel=1e-9)


def test_eager_keeps_korthikantis_5as_over_h_term(works):
    """Korthikanti §4.1: eager adds 5as/h · sbh bytes per block (softmax output 2, its dropout mask 1,
    dropout output 2 bytes per score), ÷t under tp. 5·96·2048/12288 = 80, so stage 0 keeps
    80·2048·12288/8 B × 12 blocks × 8 micro-batches = 22.5 GiB more — less the fp32 log-sum-exp that
    flash keeps instead (a/t·s·4 B per block and micro-batch). Exact (rel 1e-12)."""
    flash = works[AttentionKind.FLASH, Recompute.NONE].memory.stages[0].activations
    eager = works[AttentionKind.EAGER, Recompute.NONE].memory.stages[0].activations
    scores = 80 * 2048 * 12288 / TP * LAYERS_PER_STAGE * IN_FLIGHT
    lse = 96 / TP * 2048 * 4 * LAYERS_PER_STAGE * IN_FLIGHT
    assert scores / GiB == pytest.approx(22.5, rel=1e-12)
    assert eager.scores_bytes == pytest.approx(scores, rel=1e-12) and flash.scores_bytes == 0
    assert eager.blocks_bytes - flash.blocks_bytes == pytest.approx(scores - lse, rel=1e-12)


def test_eager_selective_recomputes_the_core_and_drops_the_scores(setup, works):
    cluster, model = setup
    none, sel = works[AttentionKind.EAGER, Recompute.NONE], works[AttentionKind.EAGER, Recompute.SELECTIVE]
    chunk = sel.stages[0].chunks[0]
    assert chunk.recompute_s == pytest.approx(LAYERS_PER_STAGE * _attention_fwd_s(cluster, model, False), rel=1e-9)
    kept_none, kept_sel = none.memory.stages[0].activations, sel.memory.stages[0].activations
    assert kept_none.blocks_bytes - kept_sel.blocks_bytes == pytest.approx(kept_none.scores_bytes, rel=1e-12)
    # one block's scores (one micro-batch) live again while it is recomputed
    assert kept_sel.recompute_working_bytes == pytest.approx(80 * 2048 * 12288 / TP, rel=1e-12)
    # hardware FLOPs add the attention core once more: 4·s·h per token per block (Korthikanti App. A)
    extra = 4 * 2048 * 12288 * 96 * sel.tokens_per_step
    assert sel.hardware_flops_per_step - sel.model_flops_per_step == pytest.approx(extra, rel=1e-12)


def test_flash_selective_changes_nothing(works):
    """No scores are kept under flash, so selective recomputation has nothing to drop or recompute."""
    none, sel = works[AttentionKind.FLASH, Recompute.NONE], works[AttentionKind.FLASH, Recompute.SELECTIVE]
    assert sel.stages[0].chunks[0].recompute_s == 0.0
    assert sel.stages[0].chunks[0].bwd_s == none.stages[0].chunks[0].bwd_s
    assert sel.memory.stages[0].activations.gpu_bytes == none.memory.stages[0].activations.gpu_bytes
    assert sel.hardware_flops_per_step == sel.model_flops_per_step


def test_memory_report_names_the_strategys_kind(works):
    for (att, _), work in works.items():
        assert work.memory.to_dict()["strategy"]["attention"] == att.value
