"""Block-scaled FP8 GEMMs (``te-blockwise``) on Hopper take longer than per-tensor-scaled ones
(:mod:`simulator.workload.fp8_block_gemm`), from NVIDIA's H200 GEMM profile [src: te-gemm-profiling]:
per layer (hidden 4096, intermediate 16384, M = 15,872), FP8 current scaling 20.285 ms with quantization and
16.785 ms without, delayed scaling 18.978 ms, block scaling 22.882 ms (with quantization only)."""

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.compute import rates_for
from simulator.kernel_roofline import Bound
from simulator.dtypes import Dtype
from simulator.workload import load_model
from simulator.workload.fp8 import Fp8Recipe, fp8_block
from simulator.workload.fp8_block_gemm import (HOPPER_BLOCK_SCALED_GEMM_TIME_RATIO, block_scaled_gemm_time_ratio,
                                               quantize_ms)
from simulator.workload.kernels import Kernel
from simulator.workload.blocks import block_work
from simulator.workload import get_preset


def test_ratio_hand_worked_from_the_published_table():
    # q_c = 20.285 - 16.785 = 3.500 ms at 6 B/element; block scaling 4.0625 B/element: q_b = 2.3698 ms;
    # its GEMMs 22.882 - 2.3698 = 20.5122 ms; / 16.785 = 1.2221
    assert quantize_ms(Fp8Recipe.TE_CURRENT) == pytest.approx(3.500, abs=1e-9)
    assert quantize_ms(Fp8Recipe.TE_BLOCKWISE) == pytest.approx(3.5 * 4.0625 / 6, rel=1e-12)
    assert HOPPER_BLOCK_SCALED_GEMM_TIME_RATIO == pytest.approx(20.5122 / 16.785, abs=1e-4)


def test_bytes_proportional_quantization_predicts_delayed_scaling():
    # the cast model the ratio rests on, checked on the one other recipe of the table: delayed scaling's
    # GEMMs are per-tensor kernels (16.785 ms) and its casts move e + 2 = 4 B/element: 19.118 ms predicted,
    # 18.978 published (tolerance 1 %)
    predicted = 16.785 + quantize_ms(Fp8Recipe.TE)
    assert predicted == pytest.approx(18.978, rel=0.01)


def test_applies_on_hopper_only():
    assert block_scaled_gemm_time_ratio(9.0) == HOPPER_BLOCK_SCALED_GEMM_TIME_RATIO
    assert block_scaled_gemm_time_ratio(10.0) == 1.0
    assert block_scaled_gemm_time_ratio(8.9) == 1.0
    assert block_scaled_gemm_time_ratio(None) == 1.0


def test_only_te_blockwise_gemms_are_block_scaled():
    works = block_work(get_preset("llama3-8b").with_seq(4096), 1, 4096, 1)
    for recipe in Fp8Recipe:
        kernels = [k for w in fp8_block(works, recipe, 2) for k in w.fwd + w.bwd]
        fp8_gemms = [k for k in kernels if k.dtype is Dtype.FP8]
        assert fp8_gemms
        assert all(k.block_scaled is (recipe is Fp8Recipe.TE_BLOCKWISE) for k in fp8_gemms)
        assert not any(k.block_scaled for k in kernels if not k.gemm)  # the casts are memory-bound


@pytest.mark.parametrize("preset, ratio", [("dgx-h100", HOPPER_BLOCK_SCALED_GEMM_TIME_RATIO), ("dgx-b200", 1.0)])
def test_rates_time_a_block_scaled_gemm(preset, ratio):
    rates = rates_for(load_model("llama3-8b").dtype, load_preset(preset).device)
    per_tensor = fp8_block(block_work(get_preset("llama3-8b").with_seq(4096), 1, 4096, 1), Fp8Recipe.TE, 2)
    big = next(k for w in per_tensor for k in w.fwd if k.dtype is Dtype.FP8)   # compute-bound at 4096 rows
    t, _ = rates.time(big)
    tb, _ = rates.time(replace(big, block_scaled=True))
    assert tb == pytest.approx(t * ratio, rel=1e-9)
    # a memory-bound GEMM keeps its memory term (the factor is on the compute term only)
    thin = Kernel(name="thin", flops=1e6, bytes=1e9, gemm=True, dtype=Dtype.FP8)   # 1 GB, 1 MFLOP
    assert rates.time(thin)[1] is Bound.MEMORY
    assert rates.time(thin) == rates.time(replace(thin, block_scaled=True))
