"""The fused-attention core timed on published kernel rates (simulator/attention_efficiency.py).

Hand-worked cases use the FlashAttention-3 paper's H100 SXM5 bar labels, head dim 128 [src: fa3-paper]
(Figure 5 forward, Figure 6 backward), and flash-attention's benchmark FLOP count [src: fa2-benchmark-flops];
tolerance 1e-9 relative (the formulas are exact; the Q/K/V/O bytes term is far below the compute term).
"""

from dataclasses import replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from presets_once import preset
from simulator.analytical import estimate
from simulator.attention_efficiency import (AttentionBackend, AttentionCall, AttentionCurve, AttentionPass,
                                            attention_efficiency_from_dict, fallback_reason, nearest_head_dim)
from simulator.cluster.io import cluster_from_dict, cluster_to_dict, load_cluster, save_cluster
from simulator.cluster.presets import load_preset, preset_names
from simulator.compile import compile_step
from simulator.compute import Phase, layer_times
from simulator.engine.step import simulate
from simulator.dtypes import Dtype
from simulator.errors import SpecError
from simulator.gemm_efficiency import efficiency_for
from simulator.strategy.flat import strategy_from_flat
from simulator.strategy.framework import Framework
from simulator.workload import load_model
from simulator.workload.presets import get_preset
from trainplan.__main__ import main

H100 = load_preset("dgx-h100").device
LLAMA3_8B = get_preset("llama3-8b")  # 32 heads × d_head 128, q_dim 4096
FA2, CUDNN = AttentionBackend.FLASH_ATTENTION_2, AttentionBackend.CUDNN


def _attention_row(device, phase: Phase, backend: AttentionBackend, seq: int = 8192):
    rows = layer_times(LLAMA3_8B, device, 1, seq, 1, attention_backend=backend)
    return next(r for r in rows if r.op.value == "attention" and r.phase is phase)


def test_fa2_causal_forward_runs_at_the_published_8k_rate():
    # FA3 paper Fig. 5, FA2, causal, head dim 128, seq 8k: 333 TFLOP/s on the causal half of 4·b·s²·q
    row = _attention_row(H100, Phase.FWD, FA2)
    assert row.time_s == pytest.approx(0.5 * 4 * 8192**2 * 4096 / 333e12, rel=1e-9)
    assert row.efficiency == pytest.approx(333 / 989, rel=1e-9)


def test_fa2_causal_backward_counts_2_5x_forward_at_the_non_causal_rate():
    # FA3 paper Fig. 6, FA2 backward, head dim 128, 8k: 318 TFLOP/s (non-causal panel, read for causal)
    row = _attention_row(H100, Phase.BWD, FA2)
    assert row.time_s == pytest.approx(2.5 * 0.5 * 4 * 8192**2 * 4096 / 318e12, rel=1e-9)
    assert row.efficiency == pytest.approx(318 / 989, rel=1e-9)


def test_cudnn_causal_forward_at_2k_and_between_published_lengths():
    # FA3 paper Fig. 5, cuDNN, causal, head dim 128: 484 at 2k, 518 at 4k; 2896 ≈ 2k·√2 sits half way in log2
    row = _attention_row(H100, Phase.FWD, CUDNN, seq=2048)
    assert row.time_s == pytest.approx(0.5 * 4 * 2048**2 * 4096 / 484e12, rel=1e-9)
    curve = H100.attention_efficiency.curve(AttentionCall(backend=CUDNN, direction=AttentionPass.FWD,
                                                          seq_len=2048, head_dim=128, causal=True))
    assert curve.tflops(int(2048 * 2**0.5)) == pytest.approx(501, abs=0.1)
    assert curve.tflops(128) == 315 and curve.tflops(65536) == 539  # flat outside the published lengths


def test_a_head_dim_64_model_reads_the_head_dim_64_figures():
    # FA3 paper Fig. 5, FA2 causal forward, head dim 64, 2k: 262 TFLOP/s; GPT-3 125M: 12 heads × 64
    gpt = get_preset("gpt3-125m")
    rows = layer_times(gpt, H100, 1, 2048, 1, attention_backend=FA2)
    row = next(r for r in rows if r.op.value == "attention" and r.phase is Phase.FWD)
    assert row.time_s == pytest.approx(0.5 * 4 * 2048**2 * 768 / 262e12, rel=1e-9)
    assert nearest_head_dim([64, 128], 96) == 128 and nearest_head_dim([64, 128], 80) == 64
    assert nearest_head_dim([64, 128], 256) == 128  # flat beyond the published head dims


def test_backend_follows_the_framework_and_the_gpu_generation():
    assert Framework.MEGATRON.attention_backend(9.0) is CUDNN      # TE prefers cuDNN on Hopper
    assert Framework.MEGATRON.attention_backend(8.0) is FA2        # ... and FA2 on Ampere
    assert Framework.FSDP2.attention_backend(9.0) is FA2           # PyTorch SDPA's flash backend
    assert Framework.TORCH_DDP.attention_backend(None) is FA2


def test_cudnn_is_faster_than_fa2_on_h100_as_published():
    assert _attention_row(H100, Phase.FWD, CUDNN).time_s < _attention_row(H100, Phase.FWD, FA2).time_s
    assert _attention_row(H100, Phase.BWD, CUDNN).time_s < _attention_row(H100, Phase.BWD, FA2).time_s


def test_a_device_without_a_source_keeps_the_matmul_curve_and_says_why():
    bare = replace(H100, attention_efficiency=None)
    call = AttentionCall(backend=FA2, direction=AttentionPass.FWD, seq_len=8192, head_dim=128, causal=True)
    assert "no attention_efficiency" in fallback_reason(None, call)
    assert fallback_reason(H100.attention_efficiency, call) is None
    row = _attention_row(bare, Phase.FWD, FA2)
    flops = 4 * 8192**2 * 4096  # the matmul curve at the full-mask FLOPs, today's rule
    assert row.time_s == pytest.approx(flops / (989e12 * efficiency_for(bare).efficiency(flops)), rel=1e-9)
    assert load_preset("dgx-a100").device.attention_efficiency is None  # no A100 figures transcribed yet


def test_a_workload_in_fp32_does_not_read_the_bf16_figures():
    spec32 = replace(LLAMA3_8B, dtype=type(LLAMA3_8B.dtype).FP32)
    rows = layer_times(spec32, H100, 1, 2048, 1, attention_backend=FA2)
    bare = layer_times(spec32, replace(H100, attention_efficiency=None), 1, 2048, 1, attention_backend=FA2)
    assert [r.time_s for r in rows] == [r.time_s for r in bare]


def _file(curves: list, source: str = "FA3 paper Fig. 5") -> dict:
    d = cluster_to_dict(load_preset("dgx-h100"))
    d["device"]["attention_efficiency"] = {"source": source, "curves": curves}
    return d


GOOD = {"backend": "cudnn", "pass": "fwd", "causal": True, "head_dim": 128, "tflops_by_seq": {1024: 400, 4096: 500}}


@pytest.mark.parametrize("curve, field, problem", [
    ({**GOOD, "backend": "fa9"}, "curves[0].backend", "known: flash-attention-2, cudnn"),
    ({**GOOD, "pass": "both"}, "curves[0].pass", "known: fwd, bwd"),
    ({**GOOD, "causal": "yes"}, "curves[0].causal", "must be true or false"),
    ({**GOOD, "tflops_by_seq": {1024: 1200}}, "tflops_by_seq.1024", "(0, 989]"),
    ({**GOOD, "tflops_by_seq": {-5: 100}}, "tflops_by_seq", "positive integers"),
    ({**GOOD, "head_dim": 0}, "curves[0].head_dim", "positive integer"),
    ({k: v for k, v in GOOD.items() if k != "causal"}, "curves[0]", "exactly backend, pass, causal"),
])
def test_bad_attention_fields_name_the_field(curve, field, problem):
    with pytest.raises(SpecError) as err:
        cluster_from_dict(_file([curve]))
    assert field in str(err.value) and problem in str(err.value)


def test_duplicate_curves_and_missing_source_are_refused():
    with pytest.raises(SpecError, match="one entry per"):
        cluster_from_dict(_file([GOOD, GOOD]))
    with pytest.raises(SpecError, match="source"):
        cluster_from_dict(_file([GOOD], source=""))


def test_bad_cluster_file_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_file([{**GOOD, "pass": "both"}]), sort_keys=False))
    assert main(["cluster", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "attention_efficiency.curves[0].pass" in err


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_a_measured_file_goes_through_the_same_path(tmp_path, suffix):
    cluster = cluster_from_dict(_file([{**GOOD, "tflops_by_seq": {8192: 250}}]))
    path = save_cluster(cluster, tmp_path / f"c.{suffix}")
    loaded = load_cluster(str(path))
    assert loaded == cluster
    row = _attention_row(loaded.device, Phase.FWD, CUDNN)
    assert row.time_s == pytest.approx(0.5 * 4 * 8192**2 * 4096 / 250e12, rel=1e-9)


def test_the_count_conversion():
    call = AttentionCall(backend=FA2, direction=AttentionPass.BWD, seq_len=1, head_dim=128, causal=False)
    assert call.published_flops(2.0) == 2.5  # model backward 2× forward → published 2.5× forward
    assert replace(call, causal=True, direction=AttentionPass.FWD).published_flops(1.0) == 0.5


PRESET_CURVES = [(name, c) for name in preset_names()
                 for c in (load_preset(name).device.attention_efficiency.curves
                           if load_preset(name).device.attention_efficiency else ())]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PRESET_CURVES), st.integers(1, 1 << 20), st.integers(1, 1 << 20))
def test_preset_efficiency_is_a_fraction_and_monotone_where_the_source_is(named, s1, s2):
    name, curve = named
    peak = preset(name).device.peak_tflops[Dtype.BF16]
    lo, hi = sorted((s1, s2))
    for s in (lo, hi):
        assert 0 < curve.efficiency(s, peak) <= 1
    rates = [r for _, r in curve.points]
    if rates == sorted(rates):  # the published figures rise with length: so does the model
        assert curve.tflops(lo) <= curve.tflops(hi)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(1, 1 << 17), st.floats(1, 989), min_size=1, max_size=8),
       st.integers(1, 1 << 18))
def test_any_valid_table_gives_a_fraction_within_its_points(table, seq):
    eff = attention_efficiency_from_dict({"source": "test", "curves": [
        {"backend": "cudnn", "pass": "bwd", "causal": False, "head_dim": 64, "tflops_by_seq": table}]}, "device.x", 989.0)
    curve: AttentionCurve = eff.curves[0]
    e = curve.efficiency(seq, 989.0)
    assert 0 < e <= 1
    assert min(table.values()) - 1e-9 <= curve.tflops(seq) <= max(table.values()) + 1e-9


def _only(backend: AttentionBackend):
    """dgx-h100 (2 nodes) whose device keeps only ``backend``'s attention curves."""
    cluster = load_cluster("dgx-h100", nodes=2)
    eff = cluster.device.attention_efficiency
    kept = replace(eff, curves=tuple(c for c in eff.curves if c.backend is backend))
    return replace(cluster, device=replace(cluster.device, attention_efficiency=kept))


@pytest.mark.parametrize("flat", [dict(global_batch=8, tp=8, zero=1), dict(global_batch=4, tp=8, cp=2, zero=1)])
def test_both_engines_take_the_backend_from_the_framework_profile(flat):
    """Megatron on Hopper reads the cuDNN curves, torch (SDPA) the FA2 ones, in the analytical engine and the
    DES (the context-parallel ring's attention time too): with only cuDNN curves a torch step is the bare one."""
    w = load_model("llama3-8b").with_seq(8192)
    bare = load_cluster("dgx-h100", nodes=2)
    bare = replace(bare, device=replace(bare.device, attention_efficiency=None))
    cudnn_only = _only(CUDNN)

    def times(cluster, framework):
        s = strategy_from_flat({**flat, "framework": framework})
        return (estimate(cluster, w, s).step_time_s,
                simulate(compile_step(cluster, w, s), cluster, seed=0, steps=1).step_time_s)

    assert times(cudnn_only, "megatron") == times(load_cluster("dgx-h100", nodes=2), "megatron")
    assert times(cudnn_only, "megatron") != times(bare, "megatron")
    assert times(cudnn_only, "torch") == times(bare, "torch")
