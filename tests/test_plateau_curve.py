"""A GPU the MAMF table lacks times GEMMs from a published plateau: ``gemm_efficiency: {plateau, dtype}``.

dgx-v100: cuBLAS FP16 GEMM 8192³ on a V100 PCIe ~101 of 112 TFLOP/s [src: nvidia-forum-v100-gemm], plateau
0.90 of the device's FP16 peak (125 TFLOP/s), with the named curves' assumed fall-off
``e = plateau · t/(t + 4 µs)`` (:func:`simulator.gemm_efficiency.overhead_curve`). Tolerance 1e-12:
the same arithmetic.
"""

import pytest

from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.io import cluster_to_dict
from simulator.cluster.presets import load_preset
from simulator.errors import SpecError
from simulator.gemm_efficiency import efficiency_for, gemm_efficiency_from_dict, overhead_curve
from simulator.cluster.spec import Dtype


def test_v100_times_gemms_from_the_published_plateau():
    device = load_preset("dgx-v100").device
    curve = efficiency_for(device)
    assert curve == overhead_curve(0.90, 125, source=curve.source)
    # the largest sampled GEMM lasts 10 ms at peak: 0.90 × 10000 / (10000 + 4)
    assert curve.plateau == pytest.approx(0.90 * 10000 / 10004, rel=1e-12)
    big = 125e12 * 10e-3
    assert curve.efficiency(big) == pytest.approx(0.90 * 10000 / 10004, rel=1e-12)
    assert curve.efficiency(big / 1000) < curve.efficiency(big)  # a 10 µs GEMM is further from peak


def test_the_plateau_form_round_trips_as_points():
    cluster = load_preset("dgx-v100")
    d = cluster_to_dict(cluster)
    assert "points" in d["device"]["gemm_efficiency"]
    assert cluster_from_dict(d).device == cluster.device


@pytest.mark.parametrize("section,field", [
    ({"plateau": 1.5, "dtype": "fp16"}, r"gemm_efficiency\.plateau"),
    ({"plateau": 0.9}, r"gemm_efficiency\.dtype"),                 # bf16 by default: V100 has none
    ({"plateau": 0.9, "dtype": "fp16", "points": [[1, 0.5]]}, r"unknown keys \['points'\]"),
    ({"plateau": "high", "dtype": "fp16"}, r"gemm_efficiency\.plateau"),
])
def test_bad_plateau_sections_name_the_field(section, field):
    with pytest.raises(SpecError, match=field):
        gemm_efficiency_from_dict(section, peak_tflops={Dtype.FP16: 125.0})
    d = cluster_to_dict(load_preset("dgx-v100"))
    d["device"]["gemm_efficiency"] = section
    with pytest.raises(SpecError, match=field):
        cluster_from_dict(d)
