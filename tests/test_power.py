"""The power-limit term (simulator/power.py, simulator/power_model.py).

Figures: our H200 measurements of 2026-11-25 (docs/hardware_measured.md, "The power cap"): class draws
busy at the 1,980 MHz max clock (GEMM 960 W, attention 944, misaligned GEMM 430, memory-bound 600, idle
125), γ 0.407; a GEMM-heavy real step (call6/results-wide-8192x4.json) ran at the cap and 16.1 % slower than
estimated without the term.
"""

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from simulator.cluster.io import cluster_from_dict, cluster_to_dict, load_cluster
from simulator.compile.compute_part import chunk_compute
from simulator.compile.costs import CostCache
from simulator.compute import rates_for
from simulator.kernel_roofline import Bound
from simulator.errors import SpecError
from simulator.power import KernelClass, PhasePower, kernel_class, stretch, unit_power
from simulator.power_model import PowerDraw, power_draw_from_dict
from simulator.workload import ComputeOptions, get_preset
from simulator.workload.chunks import ChunkSlice
from simulator.workload.kinds import DtypePolicy
from simulator.workload.ops import OpKind, gemm, layer_work, memory

ROOT = Path(__file__).resolve().parents[1]
H200 = load_cluster("hgx-h200")
DRAW = H200.device.power_draw


def test_the_h200_preset_carries_the_measured_draws():
    assert H200.device.power_limit_W == 700
    assert (DRAW.idle_W, DRAW.gemm_W, DRAW.attention_W, DRAW.misaligned_gemm_W, DRAW.memory_W) == (125, 960, 944, 430, 600)
    assert DRAW.stretch_exponent == pytest.approx(0.407)


def test_stretch_by_hand():
    """A chunk all GEMMs: P = 960 W, k = ((960 - 125) / (700 - 125))^0.407 = 1.1637; half GEMMs and half
    idle-equivalent energy (480 W dynamic... here 417.5 J over 1 s): under the limit, k = 1."""
    assert stretch(DRAW, 700, PhasePower(1.0, 1.0, 835.0)) == pytest.approx((835 / 575) ** 0.407)
    assert stretch(DRAW, 700, PhasePower(1.0, 0.5, 417.5)) == 1.0
    assert stretch(DRAW, 500, PhasePower(1.0, 1.0, 835.0)) == pytest.approx((835 / 375) ** 0.407)
    assert stretch(DRAW, 700, PhasePower()) == 1.0


@given(st.floats(0.001, 10), st.floats(0, 1), st.floats(0, 1), st.floats(200, 1000))
def test_stretch_is_at_least_one_and_grows_with_the_draw(device_s, gemm_share, more, limit):
    mix = PhasePower(device_s, device_s * gemm_share, device_s * gemm_share * (DRAW.gemm_W - DRAW.idle_W))
    hotter = PhasePower(device_s, device_s, device_s * (gemm_share + (1 - gemm_share) * more) * (DRAW.gemm_W - DRAW.idle_W))
    k = stretch(DRAW, limit, mix)
    assert k >= 1.0 and stretch(DRAW, limit, hotter) >= k


def test_kernel_classes():
    rates = rates_for(DtypePolicy.BF16_MIXED, H200.device)
    assert kernel_class(memory("m", 1e9), Bound.MEMORY, rates) is KernelClass.MEMORY
    assert kernel_class(gemm("g", 16384, 6144, 2048, 2), Bound.COMPUTE, rates) is KernelClass.GEMM
    assert kernel_class(gemm("g", 16384, 50257, 2048, 2), Bound.COMPUTE, rates) is KernelClass.MISALIGNED_GEMM
    assert kernel_class(gemm("g", 16384, 6144, 2048, 2), Bound.MEMORY, rates) is KernelClass.MEMORY
    work = layer_work(get_preset("gpt3-1.3b"), 8)
    attention = next(k for w in work if w.op is OpKind.ATTENTION for k in w.fwd if k.attention is not None)
    assert kernel_class(attention, Bound.COMPUTE, rates) is KernelClass.ATTENTION


def _chunk(cluster):
    spec = get_preset("gpt3-1.3b")
    return chunk_compute(CostCache(cluster), spec, ChunkSlice(index=0, count=1, start=0, layers=spec.layers),
                         ComputeOptions(micro_batch=8))


def test_the_chunk_stretches_its_compute_bound_seconds_only():
    """With the term: t + (k - 1)·compute_s per phase, k from the whole chunk's mix; without: as before."""
    spec = get_preset("gpt3-1.3b")
    off = replace(H200, device=replace(H200.device, power_draw=None))
    on_c, off_c = _chunk(H200), _chunk(off)
    cache = CostCache(H200)
    load = spec.chunk_load(ChunkSlice(index=0, count=1, start=0, layers=spec.layers), ComputeOptions(micro_batch=8))
    phases = [PhasePower(), PhasePower(), PhasePower()]
    for count, unit in load.units:
        phases = [a + p.times(count) for a, p in zip(phases, unit_power(unit, H200.device, spec.dtype))]
    k = stretch(DRAW, 700, phases[0] + phases[1] + phases[2])
    assert 1.0 < k < 1.1  # a 1.3B chunk: GEMMs, attention, the misaligned logits and eager memory kernels
    assert on_c.fwd_s == pytest.approx(off_c.fwd_s + (k - 1) * phases[0].compute_s)
    assert on_c.bwd_s == pytest.approx(off_c.bwd_s + (k - 1) * phases[1].compute_s)
    assert phases[0].compute_s < phases[0].device_s  # memory-bound kernels keep their time
    del cache


def test_a_gemm_heavy_step_measured_at_the_cap():
    """call6: four layers of hidden 8192 ran 1468.3 ms at the cap (675 W, 1,590 MHz); estimated 1232.4 ms
    without the term (-16.1 %), -7.0 % with it. The rest is the eager memory-bound kernels (hardware_measured.md)."""
    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate
    results = load_results(ROOT / "docs/measured/h200-2026-11-25/call6/results-wide-8192x4.json")
    row = validate(results, run_cluster(results, "hgx-h200")).row("step_time_s")
    assert -0.10 < row.error_analytical < -0.04


def test_the_fields_round_trip_and_bad_input_names_the_field():
    d = cluster_to_dict(H200)
    assert d["device"]["power_limit_W"] == 700 and d["device"]["power_draw"]["gemm_W"] == 960
    assert cluster_from_dict(d).device.power_draw == DRAW
    with pytest.raises(SpecError, match=r"device.power_draw.*missing gemm_W"):
        power_draw_from_dict({"idle_W": 125, "attention_W": 1, "misaligned_gemm_W": 1, "memory_W": 1,
                              "stretch_exponent": 0.4}, "device.power_draw")
    with pytest.raises(SpecError, match="stretch_exponent"):
        PowerDraw(idle_W=1, gemm_W=1, attention_W=1, misaligned_gemm_W=1, memory_W=1, stretch_exponent=1.5)
    d["device"]["power_limit_W"] = 100
    with pytest.raises(SpecError, match="device.power_limit_W"):
        cluster_from_dict(d)
