"""Numeric formats, shared by the device model (peak FLOP/s per format) and the workload (the format
its matmuls run in). A module of its own so that neither side imports the other for it."""

from __future__ import annotations

from simulator.enum_kind import Kind

__all__ = ["Dtype"]


class Dtype(Kind):
    """Numeric formats a device's peak throughput is quoted for."""

    BF16 = "bf16"
    """bfloat16 tensor-core math (dense)."""
    FP16 = "fp16"
    """IEEE half-precision tensor-core math (dense)."""
    TF32 = "tf32"
    """TensorFloat-32 tensor-core math (dense)."""
    FP32 = "fp32"
    """IEEE single precision on the CUDA cores (or a CPU's vector units)."""
    FP8 = "fp8"
    """8-bit floating point tensor-core math (dense), Hopper and later."""
