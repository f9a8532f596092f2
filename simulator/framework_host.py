"""Host time the framework runtimes add per module, per region, per forward call and per runtime action.

Beside :mod:`simulator.host_overhead`'s per-call and time-sharing terms, each framework's own machinery costs host
time per unit of the model it wraps; each term is a ``Host`` field measured by ``trainplan calibrate --compute``
and 0 where not measured (GPU presets):

- **FSDP2 modules**: each ``fully_shard`` module (every block, and the root on the model's first chunk)
  adds ``Host.fsdp2_forward_module_us`` to its chunk's forward (pre-forward all-gather copy-in/out,
  post-forward reshard) and ``Host.fsdp2_backward_module_us`` to its backward (re-gather, reduce-scatter,
  post-backward; at ZeRO-2, with no re-gather, ``Host.fsdp2_zero2_backward_module_us`` where the host states it:
  :func:`fsdp2_backward_us`) (:func:`with_host_modules`) [src: own-fsdp2-fake-group-probe].
- **Tensor-parallel modules**: under torch's own tensor parallelism (DTensor weights, :func:`simulator.host_overhead.dtensor_params`)
  each tensor-parallel module of a chunk (:func:`tp_modules`: :data:`TP_MODULES_PER_BLOCK` per block and, with
  sequence parallelism, its :data:`SP_MODULES_PER_BLOCK` sequence-parallel norms; the vocabulary-parallel
  embedding on the first chunk and output layer on the last) adds
  ``Host.tp_forward_module_us`` to the chunk's forward and ``Host.tp_backward_module_us`` to its backward:
  DTensor's dispatch of every operator on the module's DTensors and the parallel styles' input/output
  hooks, measured on a 1-rank mesh by ``trainplan calibrate --compute`` (:mod:`executor.host_bench`)
  [src: own-tp-module-probe]. Megatron-LM's tensor parallelism keeps plain tensors: no such term.
- **Activation checkpoints**: under torch (DDP, FSDP2) each ``torch.utils.checkpoint`` region of a chunk
  (:func:`checkpoint_regions`: one per block with any recompute policy) adds ``Host.checkpoint_forward_region_us``
  to its forward and ``Host.checkpoint_backward_region_us`` to its backward beyond the recomputed kernels
  (saved-tensor hooks, RNG state stash and restore, the rerun's bookkeeping), measured against the plain
  model by ``trainplan calibrate --compute`` (:func:`executor.host_bench.time_checkpoint`)
  [src: own-checkpoint-host-probe].
- **DDP's wrapper and reducer**: where torch ``DistributedDataParallel`` wraps the model (:func:`ddp_wrapped`),
  every forward call costs ``Host.ddp_forward_call_us`` more (``_pre_forward``, ``prepare_for_backward``) and
  the synchronising backward of a step with overlapped gradient reduction ``Host.ddp_sync_backward_us`` more
  (the reducer's per-gradient hooks, bucket copies, comm-hook dispatch and finalisation; the collective itself
  is its own call), charged to the last gradient bucket, which waits for it (:func:`with_ddp_sync`); both
  measured by ``trainplan calibrate --compute``: on the CPU in fp32 from DDP's steps in the rank-step probe
  (:mod:`executor.step_bench`) [src: own-ddp-step-probe], elsewhere on a 1-rank group in a tight loop
  (:func:`executor.host_bench.time_ddp`) [src: own-ddp-host-probe].
- **Pipeline schedule runtime**: where torch's ``torch.distributed.pipelining`` runs the schedule, each forward
  and backward of a chunk adds ``Host.pipeline_action_us`` × its actions in the runtime's list
  (:func:`simulator.pipeline_runtime.pipeline_actions`) [src: own-pipeline-action-probe], and
  ``Host.pipeline_p2p_post_us`` × its sends and receives, whose posting blocks the rank's thread
  (:func:`simulator.pipeline_runtime.p2p_actions`) [src: own-pipeline-post-probe], and once
  ``Host.pipeline_chunk_us``, the stage's bookkeeping around its module in ``forward_one_chunk`` /
  ``backward_one_chunk`` [src: own-pipeline-chunk-probe].
"""

from __future__ import annotations

from simulator.cluster.spec import Cluster, KernelDispatch
from simulator.pipeline_runtime import chunk_host_us, torch_pipeline

TP_MODULES_PER_BLOCK = 4
"""Tensor-parallel modules of one block in torch's plan (``executor.strategies.tensor.block_plan``): ``qkv`` and
``mlp.up`` column-parallel, ``attn.out`` and ``mlp.down`` row-parallel [src: torch-dtensor-tp]."""

TP_EDGE_MODULES = 2
"""Tensor-parallel modules outside the blocks: the vocabulary-parallel token embedding (first chunk) and output
layer (last chunk) [src: megatron-vocab-parallel]."""


SP_MODULES_PER_BLOCK = 2
"""Modules of one block that sequence parallelism adds to torch's plan: the two norms, run as ``SequenceParallel``
on sequence-sharded DTensors (:data:`simulator.compile.torch_tp.SP_NORMS_PER_BLOCK`). Measured (tree19, 2-rank gloo
mesh, the tiny tp model with and without sequence parallelism in the same iterations, p10 of 60, four launches at
load 11-25): +1.31-1.58 ms forward and +1.38-1.45 ms backward per micro-batch beyond the other model's host time;
charging the tiny model's 2 × 2 norms that launch's per-module terms gives 4 × 0.40 = 1.60 ms forward and 4 × 0.46
= 1.86 ms backward (over by ~30 %) [src: own-sp-module-probe-2026-11-26]."""


def tp_modules(layout, chunk) -> int:
    """Tensor-parallel modules of ``chunk`` (a :class:`simulator.workload.ChunkSlice`) whose weights or activations
    are DTensors: :data:`TP_MODULES_PER_BLOCK` per layer (and :data:`SP_MODULES_PER_BLOCK` more with sequence
    parallelism), plus the embedding on the first chunk and the output layer on the last; 0 unless the layout runs
    torch's own tensor parallelism (:func:`simulator.host_overhead.dtensor_params`, tp > 1)."""
    from simulator.strategy.framework import Framework

    if layout.tp <= 1 or layout.framework is not Framework.TORCH_DDP:
        return 0
    per_block = TP_MODULES_PER_BLOCK + (SP_MODULES_PER_BLOCK if layout.sequence_parallel else 0)
    return per_block * chunk.layers + (1 if chunk.index == 0 else 0) + (1 if chunk.index == chunk.count - 1 else 0)


def checkpoint_regions(layout, chunk) -> int:
    """``torch.utils.checkpoint`` regions of ``chunk``: one per block (the block under full and op-level
    recomputation, its attention core under selective) when torch (DDP or FSDP2) runs the recompute policy;
    0 without recomputation or under Megatron-LM / DeepSpeed, whose checkpointing is their own."""
    from simulator.strategy.framework import Framework
    from simulator.workload import Recompute

    torch_run = layout.framework in (Framework.TORCH_DDP, Framework.FSDP2)
    return chunk.layers if torch_run and layout.strategy.recompute is not Recompute.NONE else 0


def with_host_modules(cluster: Cluster, layout, chunk, compute, share: float = 1.0):
    """``compute`` (a :class:`simulator.compile.compute_part.ChunkCompute`) with the host time per module that
    the framework adds (module docstring), when the host states it: FSDP2's per sharded module (the chunk's
    blocks, plus the root on chunk 0) and torch tensor parallelism's per tensor-parallel module
    (:func:`tp_modules`); torch's activation checkpoints per region (:func:`checkpoint_regions`); DDP's per
    forward call (:func:`ddp_wrapped`); and torch's pipeline runtime per action (:mod:`simulator.pipeline_runtime`). On an ``inline`` device it adds to the chunk's phases; on an ``async`` one a
    phase takes the larger of its time and the host time (one stream)."""
    host = cluster.node.host
    if host is None or not any(map(host.__getattribute__, MODULE_TERMS_US)):  # every term 0 (the GPU presets)
        return compute
    return _with_module_terms(host, cluster.device, layout, chunk, compute, share)


MODULE_TERMS_US = ("fsdp2_forward_module_us", "fsdp2_backward_module_us", "fsdp2_zero2_backward_module_us",
                   "tp_forward_module_us", "tp_backward_module_us", "checkpoint_forward_region_us",
                   "checkpoint_backward_region_us", "ddp_forward_call_us", "pipeline_action_us",
                   "pipeline_p2p_post_us", "pipeline_chunk_us")
"""The ``Host`` fields :func:`with_host_modules` adds: with all of them 0 (or None) it adds nothing, and returns
the compute without counting the chunk's modules (a search asks it per chunk; tests/test_framework_host_terms.py
fails if a term it reads is missing here)."""


def _with_module_terms(host, device, layout, chunk, compute, share: float):
    """:func:`with_host_modules` on a host with a term (:data:`MODULE_TERMS_US`) not 0."""
    from dataclasses import replace as _replace

    from simulator.strategy.framework import Framework

    fsdp2 = chunk.layers + (1 if chunk.index == 0 else 0) if layout.framework is Framework.FSDP2 else 0
    tp = tp_modules(layout, chunk)
    ckpt = checkpoint_regions(layout, chunk)
    pipe_us = sum(chunk_host_us(host, layout, chunk)) + (host.pipeline_chunk_us if torch_pipeline(layout) else 0.0)
    fwd_us = (fsdp2 * host.fsdp2_forward_module_us + tp * host.tp_forward_module_us
              + ckpt * host.checkpoint_forward_region_us + (host.ddp_forward_call_us if ddp_wrapped(layout) else 0.0)
              + pipe_us)
    bwd_us = (fsdp2 * fsdp2_backward_us(host, layout) + tp * host.tp_backward_module_us
              + ckpt * host.checkpoint_backward_region_us + pipe_us)
    if not fwd_us and not bwd_us:
        return compute

    def add(phase_s: float, extra_us: float) -> float:
        extra_s = extra_us * 1e-6 * share
        if not extra_s:
            return phase_s
        return phase_s + extra_s if device.kernel_dispatch is KernelDispatch.INLINE else max(phase_s, extra_s)

    return _replace(compute, fwd_s=add(compute.fwd_s, fwd_us), bwd_s=add(compute.bwd_s, bwd_us))


def fsdp2_backward_us(host, layout) -> float:
    """FSDP2's host µs per module per backward: ``Host.fsdp2_zero2_backward_module_us`` at ZeRO-2 where the host
    states it (no re-gather in that backward), else ``Host.fsdp2_backward_module_us``
    [src: own-fsdp2-fake-group-probe]."""
    from simulator.strategy import ZeroStage

    zero2 = host.fsdp2_zero2_backward_module_us
    return zero2 if zero2 is not None and layout.strategy.zero is ZeroStage.ZERO2 else host.fsdp2_backward_module_us


def runs_ddp_reducer(layout) -> bool:
    """Whether the gradients go through torch's flat buckets: the torch framework at ZeRO 0/1
    (``ZeroRedundancyOptimizer`` wraps a DDP model) with an all-reduce, not a parameter server (the rule of
    :mod:`simulator.compile.ddp_copies` and of :func:`ddp_wrapped`)."""
    from simulator.strategy import ZeroStage
    from simulator.strategy.framework import Framework
    from simulator.strategy.sync import ParamServerSync

    s = layout.strategy
    return (layout.framework is Framework.TORCH_DDP and s.zero <= ZeroStage.ZERO1
            and not isinstance(s.dp_sync, ParamServerSync))


def ddp_wrapped(layout) -> bool:
    """Whether torch ``DistributedDataParallel`` wraps the model: where the gradients go through DDP's reducer
    (:func:`runs_ddp_reducer`) with tp = pp = 1, at every dp, 1 included: the executor's data-parallel family wraps
    DDP at every world size (``executor/strategies/data_parallel.py`` ``_ddp``), as the bucket passes charged in
    :mod:`simulator.compile.ddp_copies` assume. A tensor- or pipeline-parallel run of torch here syncs its gradients
    with bucketed all-reduces of its own, without DDP's reducer (``executor/strategies/grad_sync.py``). (Until
    2026-11-25 this also required dp > 1, which left a dp = 1 run's wrapper uncharged while its passes were.)"""
    return runs_ddp_reducer(layout) and layout.tp == 1 and layout.pp == 1


def with_ddp_sync(cluster: Cluster, layout, calls: tuple, share: float = 1.0) -> tuple:
    """The gradient-sync ``calls`` (:class:`simulator.work.CommCall`, in the order backward readies them) with
    ``Host.ddp_sync_backward_us`` × ``share`` added to the last one's ``time_s`` when DDP wraps the model and
    reduces during backward (``overlap_grad_reduce``): DDP's synchronising backward finishes its reducer work
    before the step can go on. As is otherwise (no DDP, no host section, no calls, the term 0)."""
    from dataclasses import replace as _replace

    host = cluster.node.host
    if (host is None or not host.ddp_sync_backward_us or not calls or not ddp_wrapped(layout)
            or not layout.strategy.dp_sync.overlap_grad_reduce):
        return calls
    last = calls[-1]
    return calls[:-1] + (_replace(last, time_s=last.time_s + host.ddp_sync_backward_us * 1e-6 * share),)
