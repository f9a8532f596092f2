"""Row width of ``calibrate --compute``'s memory-bound kernels: 64 on the CPU (as the CPU suite's calibration
was measured), 4096 on a GPU, where 64-wide rows gave the H200 an ``hbm_efficiency`` of 0.465
(docs/hardware_measured.md, "calibrate --compute on the GPU: what went wrong").

The choice is made from ``device.type`` alone, so it is tested here without CUDA; the one test that builds
a kernel on the GPU is skipped where none is visible.
"""

from __future__ import annotations

import pytest
import torch

from executor.calibrate_compute import _source
from executor.compute_bench import GPU_ROW_WIDTH, ROW_WIDTH, MemoryKernel, _memory_call, row_width
from executor.compute_grid import ELEMENTS, GPU_ELEMENTS, default_grid, gpu_grid
from simulator.workload import DtypePolicy, load_model

CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)  # a device object only: constructing it needs no GPU
ROWWISE = (MemoryKernel.LAYER_NORM, MemoryKernel.RMS_NORM, MemoryKernel.SOFTMAX)


def test_the_cpu_keeps_64_wide_rows_and_a_gpu_gets_4096():
    assert (ROW_WIDTH, GPU_ROW_WIDTH) == (64, 4096)
    assert {row_width(CPU, n) for n in ELEMENTS} == {64}
    assert {row_width(CUDA, n) for n in GPU_ELEMENTS} == {4096}  # every GPU size is whole rows, none a column


def test_a_size_the_width_does_not_divide_is_one_column():
    assert row_width(CPU, 100) == 1
    assert row_width(CUDA, 2**11) == 1  # 2048 elements: not a whole 4096-wide row
    assert row_width(CUDA, 3 * 4096) == 4096


@pytest.mark.parametrize("kernel", ROWWISE)
def test_the_cpu_kernels_run_over_64_wide_rows(kernel):
    out = _memory_call(kernel, 2**10, DtypePolicy.FP32, CPU)()
    assert tuple(out.shape) == (2**10 // 64, 64)


def test_the_calibration_source_names_the_rows_of_the_path_it_took():
    spec = load_model("gpt3-125m")
    cpu = _source("gloo", 1, DtypePolicy.FP32, default_grid(spec, DtypePolicy.FP32))
    gpu = _source("nccl", 1, DtypePolicy.BF16_MIXED, gpu_grid(spec, DtypePolicy.BF16_MIXED))
    assert "in rows of 64," in cpu and "in rows of 4096," in gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: the kernel is built on cuda:0")
@pytest.mark.parametrize("kernel", ROWWISE)
def test_the_gpu_kernels_run_over_4096_wide_rows(kernel):
    out = _memory_call(kernel, 2**20, DtypePolicy.BF16_MIXED, CUDA)()
    assert tuple(out.shape) == (2**20 // 4096, 4096) and out.device.type == "cuda"
