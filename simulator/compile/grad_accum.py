"""The gradient adds of torch DDP: autograd's ``AccumulateGrad`` adds each micro-batch's gradient into the
parameter's existing ``.grad`` (``variable_grad += new_grad``) [src: torch-eager-decompositions].

The torch framework here is what the executor runs: its ``.grad`` persists between micro-batches and steps
(``zero_grad(set_to_none=False)``, :mod:`simulator.workload.eager_dispatch`), so every micro-batch's backward adds
into it — a memory-bound kernel per parameter tensor reading two gradients and writing one, 3·b_g bytes per
parameter, ``b_g`` the gradients' bytes per element (fp32 under autocast, the 16-bit format under param-dtype mixed
precision; :func:`simulator.strategy.formats.sync_dtype`). Per micro-batch, on a rank holding N parameters:

    t = 3·b_g·N / B_hbm

The same per-micro-batch cost keeps one compiled micro-batch valid for every global batch (the planner's shared
compilation, :mod:`simulator.analytical_structures`). With torch's default ``zero_grad(set_to_none=True)`` the first
micro-batch of a step hands its gradient over instead, one add fewer per step than charged here.

Only torch DDP (ZeRO 0, or 1 with ``ZeroRedundancyOptimizer``) is charged. FSDP2 and DeepSpeed ZeRO-2/3
reduce-scatter every micro-batch and accumulate the 1/dp shard on their reduction streams. Megatron-LM's DDP adds
each micro-batch's ``.grad`` into ``main_grad`` from a hook unless the weight-gradient GEMM already accumulated into
it (``gradient_accumulation_fusion``); which its runs used is not modelled, and neither is DeepSpeed ZeRO-0/1's
accumulation (not read here).
"""

from __future__ import annotations

from simulator.compile.compute_part import ChunkCompute
from simulator.compute import memory_kernel_s
from simulator.strategy import ParallelLayout
from simulator.strategy.formats import sync_dtype
from simulator.strategy.framework import Framework
from simulator.strategy.sync import ParamServerSync

ACCUMULATE_PASSES = 3
"""Tensor passes of ``.grad += new_grad``: read both, write one."""


def accumulation_bytes(workload, layout: ParallelLayout, cc: ChunkCompute) -> float:
    """Bytes the chunk's ``AccumulateGrad`` adds move in one micro-batch's backward (module docstring); 0 outside
    torch DDP."""
    s = layout.strategy
    if layout.framework is not Framework.TORCH_DDP or isinstance(s.dp_sync, ParamServerSync):
        return 0.0
    params = cc.blocks * cc.layer_params + cc.edge_params
    return ACCUMULATE_PASSES * sync_dtype(workload.dtype, s).grad_bytes * params


def accumulation_add_s(cache, workload, layout: ParallelLayout, cc: ChunkCompute) -> float:
    """Seconds the adds take in one micro-batch's backward."""
    nbytes = accumulation_bytes(workload, layout, cc)
    return memory_kernel_s(cache.cluster.device, workload.dtype, nbytes) if nbytes else 0.0
