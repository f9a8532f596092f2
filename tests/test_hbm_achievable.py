"""Memory-bound kernels run at the device's achievable HBM bandwidth, not the datasheet's.

Figures: BabelStream Copy on Azure ND A100 v4 / ND H100 v5 / ND H200 v5, 1.61 / 2.90 / 4.01 TB/s
[src: azure-ai-bench], over the datasheets' 2039 / 3350 / 4800 GB/s: the presets' ``hbm_efficiency``
0.790 / 0.866 / 0.835.
Tolerance 1e-12: each expected value is the code's arithmetic written out by hand.
"""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.cluster.presets import load_preset as load_cluster
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.io import cluster_to_dict
from simulator.compile.offload_part import gpu_optimizer_s
from simulator.compute import achievable_hbm_Bps, memory_kernel_s
from simulator.errors import SpecError
from simulator.gemm_efficiency import GemmEfficiency
from simulator.workload import DtypePolicy

BF16 = DtypePolicy.BF16_MIXED
PUBLISHED_GBps = {"dgx-a100": 1610, "dgx-h100": 2900, "h100-roce": 2900, "hgx-h200": 4010}
"""BabelStream Copy, TB/s × 1000 [src: azure-ai-bench]; the presets round the fraction to 3 digits."""
DATASHEET_ONLY = ("pcie-a100", "dgx-b200", "dgx-v100")
"""No published STREAM-like figure at hand: their memory-bound kernels stay at the datasheet."""


@pytest.mark.parametrize("preset,gbps", PUBLISHED_GBps.items())
def test_presets_carry_the_published_copy_bandwidth(preset, gbps):
    device = load_cluster(preset).device
    assert device.hbm_efficiency == pytest.approx(gbps / device.hbm_bw_GBps, abs=5e-4)
    assert achievable_hbm_Bps(device) == pytest.approx(gbps * 1e9, rel=1e-3)


@pytest.mark.parametrize("preset", DATASHEET_ONLY)
def test_presets_without_a_measurement_use_the_datasheet(preset):
    device = load_cluster(preset).device
    assert device.hbm_efficiency is None
    assert achievable_hbm_Bps(device) == device.hbm_bw_GBps * 1e9


def test_a_memory_kernel_on_h100_runs_at_the_achievable_rate():
    # 3.35 GB through a memory-bound kernel: 3.35e9 / (3350e9 × 0.866) = 1.1547 ms, not the datasheet's 1 ms
    assert memory_kernel_s(load_cluster("dgx-h100").device, BF16, 3.35e9) == pytest.approx(1e-3 / 0.866, rel=1e-12)


def test_another_memory_on_the_same_gpu_keeps_the_fraction():
    # an HBM2e H100 (hbm_bw_GBps 2400, as a published run's override): 2400 × 0.866 GB/s
    device = replace(load_cluster("dgx-h100").device, hbm_bw_GBps=2400)
    assert achievable_hbm_Bps(device) == pytest.approx(2400e9 * 0.866, rel=1e-12)


def test_the_gpu_optimizer_step_runs_at_the_achievable_bandwidth():
    # Adam in mixed precision: 28 B per parameter (offload_part.adam_bytes_per_param); 1e9 params on H200
    cluster = load_cluster("hgx-h200")
    assert gpu_optimizer_s(cluster, BF16, 1e9) == pytest.approx(28e9 / (4800e9 * 0.835), rel=1e-12)


def test_a_measured_curve_fraction_applies_without_the_field():
    device = load_cluster("dgx-v100").device
    curve = GemmEfficiency(points=((1e9, 0.5), (1e12, 0.7)), hbm_efficiency=0.8)
    assert achievable_hbm_Bps(replace(device, gemm_efficiency=curve)) == pytest.approx(900e9 * 0.8, rel=1e-12)


def test_the_field_round_trips_through_the_cluster_file():
    cluster = load_cluster("dgx-a100")
    d = cluster_to_dict(cluster)
    assert d["device"]["hbm_efficiency"] == 0.790
    assert cluster_from_dict(d).device == cluster.device
    d["device"].pop("hbm_efficiency")
    assert cluster_from_dict(d).device.hbm_efficiency is None


@pytest.mark.parametrize("value", [1.2, 0, -1, "fast"])
def test_bad_values_name_the_field(value):
    d = cluster_to_dict(load_cluster("dgx-a100"))
    d["device"]["hbm_efficiency"] = value
    with pytest.raises(SpecError, match=r"device\.hbm_efficiency.*\(0, 1\]"):
        cluster_from_dict(d)
    with pytest.raises(SpecError, match=r"device\.hbm_efficiency"):
        replace(load_cluster("dgx-a100").device, hbm_efficiency=value)


def test_both_the_field_and_a_curve_fraction_is_an_error():
    device = load_cluster("dgx-a100").device
    curve = GemmEfficiency(points=((1e9, 0.5),), hbm_efficiency=0.8)
    with pytest.raises(SpecError, match="give one of the two"):
        replace(device, gemm_efficiency=curve)


@given(st.floats(min_value=0.01, max_value=1.0), st.floats(min_value=1.0, max_value=1e12))
def test_memory_time_is_bytes_over_the_achievable_rate(fraction, nbytes):
    device = replace(load_cluster("dgx-h100").device, hbm_efficiency=fraction)
    assert memory_kernel_s(device, BF16, nbytes) == pytest.approx(nbytes / (3350e9 * fraction), rel=1e-12)
