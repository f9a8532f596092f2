"""FP8 GEMMs on a device with a published FP8 measurement: ``device.fp8_gemm_efficiency``.

The H100 SXM presets (dgx-h100, h100-roce) give ``{plateau: 0.8141, dtype: fp8}``: cuBLASLt E4M3 GEMM,
8192³, TN, FP32 accumulate, BF16 output, 50 warm-up and 500 timed iterations, one GPU at a time on two
8-GPU H100 hosts: 1599.0-1630.3 TFLOP/s, host means 1608.6 and 1613.7 [src: cublaslt-fp8-crosscheck],
mean 1611.15 / 1979 (the dense FP8 peak [src: nvidia-h100-ds]) = 0.8141, with the named curves' assumed
fall-off ``e = plateau · t/(t + 4 µs)`` at the FP8 peak (:func:`simulator.gemm_efficiency.overhead_curve`).
hgx-h200 gives ``{plateau: 0.7225, dtype: fp8}`` from our own measurement [src: own-h200-2026-11-24]:
``torch._scaled_mm`` E4M3, 8192³, the median of 40 calls in docs/measured/h200-2026-11-24/call1/
gpu_measure-fp8.json, 1429.8 / 1979 TFLOP/s; recomputed from that file below so the two cannot drift apart.
A device without it keeps :data:`simulator.kernel_roofline.FP8_SAME_DURATION_EFFICIENCY` (tests/test_fp8.py).
"""

import json
from pathlib import Path

import pytest

from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.io import cluster_to_dict
from simulator.cluster.presets import load_preset
from simulator.compute import rates_for
from simulator.kernel_roofline import kernel_time
from simulator.dtypes import Dtype
from simulator.errors import SpecError
from simulator.gemm_efficiency import efficiency_for, overhead_curve
from simulator.gemm_shape import GemmShape
from simulator.workload import load_model
from simulator.workload.ops import Kernel

H100_CUBLASLT_FP8_TFLOPS = {  # per GPU, two hosts [src: cublaslt-fp8-crosscheck]
    "aikubeworker0012": (1615.6, 1611.0, 1599.0, 1607.1, 1614.0, 1604.4, 1608.4, 1609.1),
    "aikubeworker0016": (1602.3, 1604.0, 1616.9, 1610.6, 1620.5, 1630.3, 1605.1, 1620.2),
}
HOST_MEANS_TFLOPS = {"aikubeworker0012": 1608.6, "aikubeworker0016": 1613.7}
"""The report's own summary lines, to check the transcription."""
MEAN_TFLOPS = sum(sum(v) for v in H100_CUBLASLT_FP8_TFLOPS.values()) / 16
H100_FP8_PEAK_TFLOPS = 1979
SQUARE = 2 * 8192**3  # the measured GEMM's FLOPs


def test_the_transcribed_figures_give_the_reports_host_means():
    for host, figures in H100_CUBLASLT_FP8_TFLOPS.items():
        assert sum(figures) / len(figures) == pytest.approx(HOST_MEANS_TFLOPS[host], abs=0.05)
    assert MEAN_TFLOPS == pytest.approx(1611.15, abs=0.01)


@pytest.mark.parametrize("preset", ["dgx-h100", "h100-roce"])
def test_h100_times_fp8_gemms_from_the_cublaslt_measurement(preset):
    device = load_preset(preset).device
    curve = device.fp8_gemm_efficiency
    assert curve == overhead_curve(0.8141, H100_FP8_PEAK_TFLOPS, source=curve.source)
    assert device.peak_tflops[Dtype.FP8] == H100_FP8_PEAK_TFLOPS
    # Published-figure check: the largest GEMMs run at the measured mean. Tolerance 0.2 %: the plateau is
    # rounded to 4 digits (0.8141 × 1979 = 1611.1) and the 10 ms sample sits 4 µs short of it (-0.04 %).
    big = H100_FP8_PEAK_TFLOPS * 1e12 * 10e-3
    assert curve.efficiency(big) * H100_FP8_PEAK_TFLOPS == pytest.approx(MEAN_TFLOPS, rel=2e-3)
    # The measured size itself, 8192³ (0.56 ms at the FP8 peak): within 1 % of the figure, below it by the
    # assumed 4 µs fall-off (-0.7 %) and the log-log interpolation between the samples around it; inside
    # the 16 GPUs' spread (1599.0 - 1630.3).
    at_square = curve.efficiency(SQUARE) * H100_FP8_PEAK_TFLOPS
    assert at_square == pytest.approx(MEAN_TFLOPS, rel=1e-2) and at_square < MEAN_TFLOPS
    assert min(min(v) for v in H100_CUBLASLT_FP8_TFLOPS.values()) - 2 < at_square
    assert curve.efficiency(big / 1000) < curve.efficiency(big)  # a 10 µs GEMM is further from peak


H200_FP8_JSON = Path(__file__).resolve().parent.parent / "docs/measured/h200-2026-11-24/call1/gpu_measure-fp8.json"
H200_FP8_PEAK_TFLOPS = 1979  # dense [src: nvidia-h200-ds]


def test_h200_fp8_plateau_is_the_measured_8192_square_over_the_fp8_peak():
    rows = json.loads(H200_FP8_JSON.read_text())["fp8"]
    squares = {r["m"]: 2 * r["m"] * r["n"] * r["k"] / r["median_s"] / 1e12
               for r in rows if r["rows"] == ["square"] and "median_s" in r}
    assert all(r["m"] == r["n"] == r["k"] and r["batch"] == 1 for r in rows if r["rows"] == ["square"])
    # the statistic: the 8192^3 square's median time, as the H100 presets' 8192^3; it is also the squares' peak
    assert max(squares, key=squares.get) == 8192
    measured = squares[8192]
    assert measured == pytest.approx(1429.8, abs=0.05)  # the figure quoted in the preset and the docs
    device = load_preset("hgx-h200").device
    assert device.peak_tflops[Dtype.FP8] == H200_FP8_PEAK_TFLOPS
    curve = device.fp8_gemm_efficiency
    plateau = round(measured / H200_FP8_PEAK_TFLOPS, 4)
    assert plateau == 0.7225
    assert curve == overhead_curve(plateau, H200_FP8_PEAK_TFLOPS, source=curve.source)
    assert "gpu_measure-fp8.json" in curve.source
    # the largest GEMMs run at the measured rate: within 0.1 %, the plateau's 4-digit rounding (0.7225 x 1979
    # = 1429.88) and the 10 ms sample's 4 us fall-off (-0.04 %)
    assert curve.plateau * H200_FP8_PEAK_TFLOPS == pytest.approx(measured, rel=1e-3)


def test_an_fp8_gemm_on_h100_uses_the_fp8_curve_not_the_same_duration_assumption():
    device = load_preset("dgx-h100").device
    rates = rates_for(load_model("llama3-8b").dtype, device)
    gemm = Kernel(name="mlp_in", flops=SQUARE, bytes=3 * 8192**2, gemm=True, dtype=Dtype.FP8,
                  shape=GemmShape(8192, 8192, 8192))
    want = kernel_time(gemm, 1979e12, rates.hbm_Bps, device.fp8_gemm_efficiency, rates.sm_count, rates.clock_ratio)
    assert rates.time(gemm) == want
    # The assumption it replaces: the BF16 curve (MAMF 794.5 / 989 = 0.8033) read at the same duration.
    # Both have the same fall-off, so the FP8 GEMM gets faster by the plateaus' ratio, 0.8141 / 0.8033.
    assumed = kernel_time(gemm, 1979e12, rates.hbm_Bps, efficiency_for(device), rates.sm_count, rates.clock_ratio,
                          curve_flops_scale=989 / 1979)
    assert assumed[0] / want[0] == pytest.approx(0.8141 / (794.5 / 989), rel=1e-3)


def test_the_fp8_curve_round_trips_as_points():
    cluster = load_preset("dgx-h100")
    d = cluster_to_dict(cluster)
    assert "points" in d["device"]["fp8_gemm_efficiency"]
    assert cluster_from_dict(d).device == cluster.device


@pytest.mark.parametrize("section,field", [
    ({"plateau": 0.8, "dtype": "bf16"}, r"fp8_gemm_efficiency\.dtype"),       # relative to the FP8 peak only
    ({"plateau": 1.2}, r"fp8_gemm_efficiency\.plateau"),
    ({"plateau": 0.8, "hbm_efficiency": 0.9}, r"fp8_gemm_efficiency\.hbm_efficiency"),
    ({"plateau": 0.8, "points": [[1, 0.5]]}, r"unknown keys \['points'\]"),
])
def test_bad_fp8_sections_name_the_field(section, field):
    d = cluster_to_dict(load_preset("dgx-h100"))
    d["device"]["fp8_gemm_efficiency"] = section
    with pytest.raises(SpecError, match=field) as err:
        cluster_from_dict(d)
    assert "\n" not in str(err.value)


def test_an_fp8_curve_without_an_fp8_peak_is_refused():
    d = cluster_to_dict(load_preset("dgx-a100"))
    d["device"]["fp8_gemm_efficiency"] = {"plateau": 0.8, "dtype": "fp8"}
    with pytest.raises(SpecError, match="fp8") as err:
        cluster_from_dict(d)
    assert "fp8" in err.value.field
