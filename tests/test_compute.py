"""Compute model: the GEMM-efficiency curve, the roofline per kernel, and what TP and batch change."""

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from simulator.cluster.spec import Device, Dtype
from simulator.compute import Phase, edge_times, layer_times, microbatch_time, to_dataframe, total_time
from simulator.errors import SpecError
from simulator.gemm_efficiency import (MAMF, GemmCurve, GemmEfficiency, curve_for_name, efficiency_for,
                                       gemm_efficiency_from_dict, gemm_efficiency_to_dict, mamf_curve)
from simulator.kernel_roofline import Bound, kernel_time
from simulator.workload import Recompute, get_preset, train_flops_per_token
from simulator.workload.kinds import DtypePolicy
from simulator.workload.ops import gemm, memory

FLAT = GemmEfficiency(points=((1.0, 0.5),))


def device(name="H100-SXM5-80GB", curve=None, bf16=989.0, hbm=3350.0, named=None):
    # H100 SXM datasheet: 989 dense BF16 TFLOP/s, 3.35 TB/s [src: nvidia-h100-ds].
    return Device(name=name, peak_tflops={Dtype.BF16: bf16}, memory_bytes=80 * 10**9, hbm_bw_GBps=hbm,
                  gemm_efficiency=curve, gemm_curve=named)


def test_curve_interpolates_duration_log_log_and_is_flat_outside():
    """Durations W/e: 1e9/0.2 = 5e9 and 1e11/0.8 = 1.25e11 peak-FLOPs; halfway in log10 (W = 1e10) the
    duration is their geometric mean sqrt(5e9 · 1.25e11) = 2.5e10, so e = 1e10 / 2.5e10 = 0.4."""
    c = GemmEfficiency(points=((1e9, 0.2), (1e11, 0.8)))
    assert c.efficiency(1e10) == pytest.approx(0.4, rel=1e-12)
    assert c.efficiency(1e6) == 0.2 and c.efficiency(1e15) == 0.8


def test_a_larger_gemm_never_takes_less_time_on_a_steep_or_noisy_curve():
    """Linear-in-log(W) efficiency made W/e(W) fall on a steep segment (A100, m = n = 1, k 7 -> 8 was 3 %
    faster); a noisy point whose duration is below an earlier one's is raised to it."""
    steep = GemmEfficiency(points=((1e6, 0.001), (1e7, 0.02)))   # e grows 20x in one decade
    noisy = GemmEfficiency(points=((1e9, 0.2), (2e9, 0.5), (3e9, 0.6)))  # durations 5e9, 4e9, 5e9
    for c in (steep, noisy):
        ws = [10 ** (x / 50) for x in range(250, 600)]
        times = [w / c.efficiency(w) for w in ws]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:]))
    assert noisy.efficiency(2e9) == pytest.approx(2e9 / 5e9, rel=1e-12)  # raised to the first point's duration


@pytest.mark.parametrize("points", [(), ((1e9, 0.5), (1e8, 0.6)), ((1e9, 1.5),), ((0, 0.5),)])
def test_curve_validation(points):
    with pytest.raises(SpecError, match="gemm_efficiency"):
        GemmEfficiency(points=points)


def test_dict_round_trip_and_yaml_strings():
    c = mamf_curve(GemmCurve.H100_SXM, 989)
    assert gemm_efficiency_from_dict(gemm_efficiency_to_dict(c)) == c
    # PyYAML reads 1e9 (no dot) as a string; the loader accepts numeric strings.
    assert gemm_efficiency_from_dict({"points": [["1e9", 0.5]]}).efficiency(1e9) == 0.5
    with pytest.raises(SpecError, match="points\\[0\\]"):
        gemm_efficiency_from_dict({"points": [[1e9]]})
    with pytest.raises(SpecError, match="unknown keys"):
        gemm_efficiency_from_dict({"points": [[1e9, 0.5]], "efficency": 1})


def test_default_plateaus_are_the_published_mamf_over_the_devices_own_peak():
    # Bekman, ML Engineering, MAMF table: H100 SXM 794.5/989, A100 SXM 271.2/312 [src: bekman-mle]. The last
    # point sits at t = 10 ms at peak, where e = plateau · t/(t + t0) = plateau · 10000/10004 (t0 = 4 us).
    last = 10000 / 10004
    assert efficiency_for(device(named=GemmCurve.H100_SXM)).plateau == pytest.approx(794.5 / 989 * last, rel=1e-12)
    assert efficiency_for(device(named=GemmCurve.A100_SXM, bf16=312.0)).plateau == \
        pytest.approx(271.2 / 312 * last, rel=1e-12)
    # The peak comes from the device: a file stating 1000 TFLOP/s keeps the measured 794.5 TFLOP/s plateau,
    h100_at_1000 = efficiency_for(device(named=GemmCurve.H100_SXM, bf16=1000.0))
    assert h100_at_1000.plateau == pytest.approx(0.7945 * last, rel=1e-12)
    # and the fall-off is in durations at that peak: 10 us at 1000 TFLOP/s is 1e10 FLOPs, e = 0.7945 · 10/14.
    assert h100_at_1000.efficiency(1e10) == pytest.approx(0.7945 * 10 / 14, rel=1e-12)


def test_the_explicit_curve_wins_over_the_name_and_the_name_is_the_fallback():
    # plateaus within 1e-3 of MAMF/peak (the last point is 10000/10004 of it, see above)
    assert efficiency_for(device(name="A100-PCIE-40GB", bf16=312.0)).plateau == pytest.approx(252.9 / 312, rel=1e-3)
    assert efficiency_for(device(name="my-gpu", bf16=312.0, named=GemmCurve.A100_PCIE)).plateau == \
        pytest.approx(252.9 / 312, rel=1e-3)
    assert efficiency_for(device(name="H100", named=GemmCurve.GH200)).plateau == pytest.approx(828.6 / 989, rel=1e-3)
    with pytest.raises(SpecError, match="gemm_efficiency"):
        efficiency_for(device(name="H100-SXM", named=GemmCurve.NONE))   # explicit none beats the name


def test_name_fallback_rules():
    assert curve_for_name("NVIDIA H100 80GB HBM3 SXM") is GemmCurve.H100_SXM
    assert curve_for_name("a100-sxm4-80gb") is GemmCurve.A100_SXM
    assert curve_for_name("A100-PCIE-40GB") is GemmCurve.A100_PCIE
    assert curve_for_name("GH200") is GemmCurve.GH200
    assert curve_for_name("H100-PCIe") is GemmCurve.NONE  # no published measurement


def test_a_named_curve_needs_a_bf16_peak_at_or_above_the_measurement():
    with pytest.raises(SpecError, match="bf16") as err:
        Device(name="v", peak_tflops={Dtype.FP16: 125.0}, memory_bytes=10**9, hbm_bw_GBps=900.0,
               gemm_curve=GemmCurve.A100_SXM)
    assert err.value.field == "device.peak_tflops"
    with pytest.raises(SpecError, match="below the measured 794.5") as err:
        efficiency_for(device(named=GemmCurve.H100_SXM, bf16=700.0))
    assert err.value.field == "device.peak_tflops.bf16"
    with pytest.raises(SpecError, match="gemm_curve"):
        Device(name="v", peak_tflops={Dtype.BF16: 1.0}, memory_bytes=10**9, hbm_bw_GBps=1.0, gemm_curve="h100-sxm")


@settings(max_examples=50, deadline=None)
@given(st.floats(1e3, 1e16))
def test_default_curves_are_monotone_and_in_range(flops):
    for key in MAMF:
        c = mamf_curve(key, 2250)
        e = c.efficiency(flops)
        assert 0 < e <= c.plateau and c.efficiency(flops * 10) >= e


def test_roofline_hand_worked():
    # A 8192³ bf16 GEMM on a flat-0.5 H100: 2·8192³ / (989e12·0.5) s, compute-bound.
    k = gemm("g", 8192, 8192, 8192, 2)
    t, bound = kernel_time(k, 989e12, 3350e9, FLAT)
    assert t == pytest.approx(2 * 8192**3 / (989e12 * 0.5)) and bound is Bound.COMPUTE
    # A GEMV-like 8192×8192 by 8192×1: bytes 2·(8192² + 2·8192) / 3.35e12, memory-bound.
    t, bound = kernel_time(gemm("v", 8192, 1, 8192, 2), 989e12, 3350e9, FLAT)
    assert t == pytest.approx(2 * (8192**2 + 2 * 8192) / 3350e9) and bound is Bound.MEMORY
    assert kernel_time(memory("m", 1e9), 989e12, 1e12, FLAT) == (pytest.approx(1e-3), Bound.MEMORY)


def test_layer_flops_match_the_flop_formulas():
    spec, dev = get_preset("gpt3-175b"), device()
    rows = layer_times(spec, dev, micro_batch=2, recompute=Recompute.FULL)
    edge = edge_times(spec, dev, micro_batch=2)
    tokens = 2 * spec.seq_len
    total = spec.layers * sum(r.flops for r in rows) + sum(r.flops for r in edge)
    assert total == pytest.approx(tokens * train_flops_per_token(spec, Recompute.FULL), rel=1e-12)
    bwd = sum(r.flops for r in rows if r.phase is Phase.BWD)
    assert bwd == pytest.approx(2 * sum(r.flops for r in rows if r.phase is Phase.FWD))


def test_tensor_parallel_divides_matmul_work_and_lowers_efficiency():
    spec, dev = get_preset("llama2-7b"), device()
    one, eight = layer_times(spec, dev, 1, tp=1), layer_times(spec, dev, 1, tp=8)
    mlp1 = next(r for r in one if r.op.value == "mlp" and r.phase is Phase.FWD)
    mlp8 = next(r for r in eight if r.op.value == "mlp" and r.phase is Phase.FWD)
    assert mlp8.flops == pytest.approx(mlp1.flops / 8)
    assert mlp8.efficiency < mlp1.efficiency          # moved down the curve
    assert mlp8.time_s > mlp1.time_s / 8              # so less than linear speed-up
    # Norms are replicated without sequence parallelism, split with it.
    norm = lambda rows: next(r for r in rows if r.op.value == "norm" and r.phase is Phase.FWD).bytes
    sp = layer_times(spec, dev, 1, tp=8, sequence_parallel=True)
    assert norm(eight) == norm(one) and norm(sp) == pytest.approx(norm(one) / 8)


def test_efficiency_comes_only_from_the_curve():
    # With a flat curve, doubling the micro-batch doubles a compute-bound op's time exactly.
    spec, dev = get_preset("gpt3-6.7b"), device(curve=FLAT)
    t = lambda b: next(r for r in layer_times(spec, dev, b) if r.op.value == "mlp").time_s
    assert t(2) == pytest.approx(2 * t(1))


def test_unfused_attention_is_slower_and_memory_heavier():
    spec, dev = get_preset("gpt3-1.3b"), device()
    attn = lambda flash: next(r for r in layer_times(spec, dev, 4, flash_attention=flash)
                              if r.op.value == "attention")
    assert attn(False).bytes > attn(True).bytes and attn(False).time_s > attn(True).time_s


def test_microbatch_mfu_on_h100_hand_worked():
    """GPT-3 175B, TP=8, b=1, one micro-batch through the model (compute only). Per TP rank the GEMMs do
    F = 72·s·l·h²·(1 + s/6h + V/12lh)/8 FLOPs (Narayanan et al. SC'21 eq. 3, no recompute)
    = 72·2048·96·12288²·(1 + 0.0277778 + 0.0035503)/8 = 2.75552e14; a GEMM at efficiency e takes
    F/(e·989 TFLOP/s); the memory-bound ops (norms, element-wise, embedding, loss: no FLOPs counted)
    take their bytes / 3350 GB/s, t_mem. So MFU(e) = F / (F/(e·peak) + t_mem) / peak.
    Flat curve at e = 0.5: exact. MAMF curve (Bekman's table: 794.5 of 989 TFLOP/s): every GEMM sits
    between the efficiency of the smallest (the attention core, 2.577e10 FLOPs) and the plateau, so
    MFU(e_min) < MFU < MFU(plateau) (≈ 0.629 < 0.707 < 0.720), inside the published plateau 0.803."""
    from simulator.workload.flops import narayanan_flops_per_iteration

    spec = get_preset("gpt3-175b")
    s, l, h, v = spec.seq_len, spec.layers, spec.hidden, spec.vocab
    F = 72 * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h)) / 8
    assert F == pytest.approx(2.75552e14, rel=1e-5)
    assert F == pytest.approx(narayanan_flops_per_iteration(spec, 1, False) / 8, rel=1e-12)
    assert F == pytest.approx(s * train_flops_per_token(spec) / 8, rel=1e-9)  # the per-op count agrees

    def mfu_of(dev) -> float:
        return F / microbatch_time(spec, dev, 1, tp=8) / 989e12

    def memory_s(dev) -> float:  # their bytes / 3350 GB/s, eager norms and GELU below a copy's rate (test_eager_rates)
        rows = [r for r in layer_times(spec, dev, 1, tp=8) if r.flops == 0]
        edge = [r for r in edge_times(spec, dev, 1, tp=8) if r.flops == 0]
        return l * sum(r.time_s for r in rows) + sum(r.time_s for r in edge)

    def predicted(eff: float, t_mem: float) -> float:
        return F / (F / (eff * 989e12) + t_mem) / 989e12

    flat = device(curve=FLAT)
    assert mfu_of(flat) == pytest.approx(predicted(0.5, memory_s(flat)), rel=1e-9)
    dev = device()
    curve = efficiency_for(dev)
    assert curve.plateau == pytest.approx(794.5 / 989, rel=1e-3)  # the last sample: 10 ms GEMMs, 4 µs overhead
    lo, hi = predicted(curve.efficiency(2.576980e10), memory_s(dev)), predicted(curve.plateau, memory_s(dev))
    assert lo < mfu_of(dev) < hi < 794.5 / 989
    assert hi - lo < 0.1
    df = to_dataframe(layer_times(spec, dev, 1, tp=8))
    assert set(df.columns) >= {"op", "phase", "flops", "bytes", "time_s", "bound"}
    assert math.isclose(df.time_s.sum(), total_time(layer_times(spec, dev, 1, tp=8)))


def test_bad_parallel_arguments():
    with pytest.raises(SpecError, match="tp"):
        layer_times(get_preset("gpt3-175b"), device(), 1, tp=7)
    with pytest.raises(SpecError, match="micro_batch"):
        layer_times(get_preset("gpt3-175b"), device(), 0)
    with pytest.raises(SpecError, match="peak_tflops"):
        layer_times(replace(get_preset("gpt3-175b"), dtype=DtypePolicy.FP32), device(), 1)


def test_layer_list_times_hand_worked():
    from simulator.unit_times import layer_list_times
    from simulator.workload import LayerListWorkload, LayerSpec
    w = LayerListWorkload(name="m", layers=(LayerSpec(name="fc", params=1000, fwd_flops=1e9, activation_bytes=100),))
    dev = Device(name="x", peak_tflops={Dtype.FP32: 10.0}, memory_bytes=10**9, hbm_bw_GBps=100.0, gemm_efficiency=FLAT)
    fwd, bwd = layer_list_times(w, dev, micro_batch=4)
    assert fwd.time_s == pytest.approx(4e9 / (10e12 * 0.5)) and fwd.bound is Bound.COMPUTE
    assert bwd.flops == 2 * fwd.flops and bwd.bytes == 2 * (1000 * 4 + 400)


def _efficiency_from_points(points, gemm_flops):
    """The curve's interpolation computed from the points at every call (what ``efficiency`` did before its
    arrays were kept per curve)."""
    import numpy as np

    flops = np.array([p[0] for p in points])
    durations = np.maximum.accumulate(flops / np.array([p[1] for p in points]))
    if gemm_flops <= flops[0]:
        return float(flops[0] / durations[0])
    if gemm_flops >= flops[-1]:
        return float(flops[-1] / durations[-1])
    return float(gemm_flops / 10 ** np.interp(math.log10(gemm_flops), np.log10(flops), np.log10(durations)))


@settings(max_examples=60, deadline=None)
@given(effs=st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6),
       asks=st.lists(st.floats(1e3, 1e16), min_size=1, max_size=8))
def test_kept_curve_arrays_give_the_same_bits(effs, asks):
    """Two curves asked alternately (each keeps its own arrays) answer as the points computed afresh."""
    a = GemmEfficiency(points=tuple((10.0 ** (6 + i), e) for i, e in enumerate(effs)))
    b = GemmEfficiency(points=tuple((10.0 ** (5 + 2 * i), e) for i, e in enumerate(reversed(effs))))
    for w in asks:
        for c in (a, b):
            assert repr(c.efficiency(w)) == repr(_efficiency_from_points(c.points, w))
    assert a == GemmEfficiency(points=a.points) and hash(a) == hash(GemmEfficiency(points=a.points))
