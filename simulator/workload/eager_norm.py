"""Eager torch's norm backward: two kernels, the second re-reading what the first read.

A norm's backward in the roofline is one memory-bound kernel of 1.5× its forward bytes (it reads the output
gradient ``dy`` and the saved input ``x`` and writes the input gradient ``dx``: three tensors where forward
touched two; :data:`simulator.workload.kernels.MEMORY_BWD_FACTOR`). Eager torch's CUDA ``native_layer_norm_backward``
runs it as **two** kernels per call: ``layer_norm_grad_input_kernel`` (reads ``dy`` and ``x``, writes ``dx``)
and ``GammaBetaBackwardCUDAKernelTemplate`` (reads ``dy`` and ``x`` again to reduce the weight's, and the bias's,
gradient over the tokens). Per call, per element of the norm's input:

    bytes_bwd = (3 + 2) · e = 2.5 × the forward's 2 · e      (was 1.5 × 2 · e)

``e`` the norm's element size (fp32 under autocast, :mod:`simulator.workload.autocast`). Seen in both kernel
traces of our H200 runs [src: own-h200-2026-11-24] (torch 2.11): GPT-3 1.3B (LayerNorm, fp32 under autocast,
16,384 × 2,048 per call) runs 49 of each per step, 142 µs and 91 µs per call (2.84 and 2.94 TB/s on 12 and 8
bytes per element); Qwen2-0.5B (RMSNorm through the same kernels, ``<float, float, true>``, 32,768 × 896) 49 of
each, 86 µs and 109 µs. The added kernel is charged at the device's copy rate, as every backward memory-bound
kernel is (the traces' rates, 0.54-1.0 of a copy, come from the runs the model is checked against and are not
used). The kernel split is a property of torch's CUDA code, so every GPU preset gets it: seen on Hopper (H200),
carried to A100, H100 and B200 as an assumption. Under Megatron-LM's or torch.compile's fusion, and on the CPU
stand-in, the norm's backward is left as it was (their kernels were not traced here).
"""

from __future__ import annotations

from dataclasses import replace
from simulator.workload.kinds import KernelFusion
from simulator.workload.ops import OpKind, OpWork, memory

GAMMA_BETA_PASSES = 2
"""Tensors of the norm's input size the γ/β kernel reads (``dy`` and ``x``) [src: own-h200-2026-11-24]."""

FWD_PASSES = 2
"""Tensors of the norm's input size its forward kernel touches (reads ``x``, writes ``y``)."""


WEIGHT_GRAD_SUFFIX = ".bwd_weight"
"""The γ/β kernel's name: the forward kernel's and this suffix (autocast leaves it out of its gradient casts)."""


def with_norm_weight_grads(works: list[OpWork], fusion: KernelFusion, cuda: bool) -> list[OpWork]:
    """``works`` with eager torch's γ/β backward kernel after each norm's input-gradient kernel:
    ``GAMMA_BETA_PASSES / FWD_PASSES`` × the forward kernel's bytes (module docstring). Only under eager fusion
    on a device running torch's CUDA kernels (``cuda``: :func:`simulator.compute.runs_cuda_kernels`; torch's CPU
    kernels were not traced); unchanged otherwise."""
    if fusion is not KernelFusion.EAGER or not cuda:
        return works

    def extra(work: OpWork) -> tuple:
        return tuple(memory(k.name + WEIGHT_GRAD_SUFFIX, k.bytes * GAMMA_BETA_PASSES / FWD_PASSES) for k in work.fwd)
    return [replace(w, bwd=w.bwd + extra(w)) if w.op is OpKind.NORM else w for w in works]
