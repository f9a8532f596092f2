"""Tile and wave quantisation (simulator.gemm_shape) against hand-worked examples, and its properties.

Hand-worked numbers follow NVIDIA's Matrix Multiplication Background User's Guide [src: nvidia-gemm-guide]
(tiles of 256×128, 128×256, 128×128; one tile per SM per wave; 108 SMs on an A100).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from presets_once import preset
from simulator.cluster.presets import load_preset
from simulator.kernel_roofline import kernel_time
from simulator.gemm_efficiency import GemmEfficiency, efficiency_for
from simulator.gemm_shape import TILES, GemmShape, Tile, best_padded_flops, padded_flops, quantisation
from simulator.workload.ops import gemm

A100_SMS = 108
FLAT = GemmEfficiency(points=((1.0, 0.8),))


def test_guide_wave_example_1792_square_on_108_sms():
    # 1792/256 = 7 by 1792/128 = 14: 98 tiles of 256×128, one wave of 108 → 10 SMs idle.
    shape = GemmShape(1792, 1792, 4096)
    assert padded_flops(shape, A100_SMS, Tile(256, 128)) == 108 * 2 * 256 * 128 * 4096
    # 128×128 gives 196 tiles in 2 waves: the same 216 half-size tiles, no better.
    assert padded_flops(shape, A100_SMS, Tile(128, 128)) == 216 * 2 * 128 * 128 * 4096
    assert quantisation(shape, A100_SMS) == pytest.approx(1792 * 1792 / (108 * 256 * 128))  # 0.9074


def test_megatron_qkv_shape_gpt3_tp8():
    # GPT-3 175B at tp 8, b·s = 2048 tokens: QKV GEMM 2048 × 4608 × 12288 (4608 = 3·12288/8).
    # 8 × 36 = 288 tiles of 256×128 → 3 waves of 108 = 324 tile slots: 288/324 = 8/9 useful.
    shape = GemmShape(2048, 4608, 12288)
    assert quantisation(shape, A100_SMS) == pytest.approx(288 / 324)
    # timed at the plateau on its padded work: 2·2048·4608·12288 / (8/9) / (312e12 · 0.8)
    t, _ = kernel_time(gemm("qkv", 2048, 4608, 12288, 2), 312e12, 2039e9, FLAT, A100_SMS)
    assert t == pytest.approx(2 * 2048 * 4608 * 12288 * 9 / 8 / (312e12 * 0.8))


def test_tile_quantisation_one_row_over():
    # m = 257 rows need two 256-row or three 128-row tiles; 3 tiles of 128×128 in one wave is least.
    shape = GemmShape(257, 128, 1024)
    assert best_padded_flops(shape, A100_SMS) == 108 * 2 * 128 * 128 * 1024
    assert quantisation(shape, A100_SMS) == pytest.approx(257 * 128 / (108 * 128 * 128))


def test_batched_gemm_fills_waves_with_its_batch():
    # 96 heads of 2048×2048 scores (k = 128): 96 · 8 · 16 = 12288 tiles of 256×128 → 114 waves (12312 slots)
    shape = GemmShape(2048, 2048, 128, batch=96)
    assert quantisation(shape, A100_SMS) == pytest.approx(12288 / (114 * 108))


def test_no_sm_count_means_no_quantisation():
    shape = GemmShape(257, 129, 100)
    assert quantisation(shape, None) == 1.0
    assert best_padded_flops(shape, None) == shape.flops


def test_gemm_kernels_carry_their_shape():
    k = gemm("x", 64, 32, 16, 2, batch=3)
    assert k.shape == GemmShape(64, 32, 16, 3)
    assert k.flops == k.shape.flops


def test_presets_with_a_gpu_curve_give_sm_counts():
    for name, sms in (("dgx-a100", 108), ("dgx-h100", 132), ("dgx-v100", 80), ("pcie-l40s", 142)):
        assert load_preset(name).device.sm_count == sms


def test_a_quantised_gemm_is_slower_than_its_flops_alone_on_the_a100_preset():
    device = load_preset("dgx-a100").device
    curve, peak = efficiency_for(device), 312e12
    k = gemm("qkv", 2048, 4608, 12288, 2)
    shaped, _ = kernel_time(k, peak, 2039e9, curve, device.sm_count)
    flops_only, _ = kernel_time(replace(k, shape=None), peak, 2039e9, curve, device.sm_count)
    assert shaped == pytest.approx(flops_only * 9 / 8, rel=1e-3)


DIMS = st.integers(min_value=1, max_value=20000)


@settings(max_examples=200, deadline=None)
@given(m=DIMS, n=DIMS, k=DIMS, grow=st.integers(min_value=1, max_value=5000), which=st.sampled_from("mnk"),
       sms=st.sampled_from([80, 108, 132, 142]))
def test_time_never_decreases_with_m_n_or_k(m, n, k, grow, which, sms):
    device = preset("dgx-a100").device
    curve = efficiency_for(device)
    dims = {"m": m, "n": n, "k": k}
    bigger = {**dims, which: dims[which] + grow}
    t0, _ = kernel_time(gemm("a", dims["m"], dims["n"], dims["k"], 2), 312e12, 2039e9, curve, sms)
    t1, _ = kernel_time(gemm("b", bigger["m"], bigger["n"], bigger["k"], 2), 312e12, 2039e9, curve, sms)
    assert t1 >= t0 * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(m=DIMS, n=DIMS, k=DIMS, sms=st.sampled_from([None, 80, 108, 132]))
def test_efficiency_never_exceeds_the_plateau(m, n, k, sms):
    device = preset("dgx-h100").device
    curve = efficiency_for(device)
    kern = gemm("a", m, n, k, 2)
    t, _ = kernel_time(kern, 989e12, 3350e9, curve, sms)
    assert kern.flops / (989e12 * t) <= curve.plateau * (1 + 1e-12)
    assert 0 < quantisation(kern.shape, sms) <= 1


def test_tiles_are_the_guides_larger_ones():
    assert {(t.m, t.n) for t in TILES} == {(256, 128), (128, 256), (128, 128)}


def test_a_lower_sustained_clock_slows_compute_not_memory():
    # A power-capped device at 80 % of the measured clock: GEMM time / 0.8, a memory-bound kernel unchanged.
    from simulator.workload.ops import memory

    k = gemm("qkv", 2048, 4608, 12288, 2)
    full, _ = kernel_time(k, 312e12, 2039e9, FLAT, A100_SMS)
    capped, _ = kernel_time(k, 312e12, 2039e9, FLAT, A100_SMS, clock_ratio=0.8)
    assert capped == pytest.approx(full / 0.8)
    m = memory("norm", 1e9)
    assert kernel_time(m, 312e12, 2039e9, FLAT, A100_SMS, 0.8) == kernel_time(m, 312e12, 2039e9, FLAT, A100_SMS)


def test_sm_count_and_clock_ratio_round_trip_through_a_cluster_file(tmp_path):
    from simulator.cluster.io import load_cluster, save_cluster
    from simulator.errors import SpecError

    cluster = load_preset("dgx-h100")
    capped = replace(cluster, device=replace(cluster.device, sustained_clock_ratio=0.85))
    path = tmp_path / "c.yaml"
    save_cluster(capped, path)
    back = load_cluster(str(path))
    assert back.device.sm_count == 132 and back.device.sustained_clock_ratio == 0.85
    with pytest.raises(SpecError, match="^device.sustained_clock_ratio"):
        replace(cluster.device, sustained_clock_ratio=1.2)
    with pytest.raises(SpecError, match="^device.sm_count"):
        replace(cluster.device, sm_count=0)
