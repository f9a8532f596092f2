"""Host time of a step: per-call dispatch overhead, host-bound streams, and processes sharing CPU cores.

A framework issues every kernel from a host thread. Three named terms decide when that host time,
not the device, sets a step's time (issue 9 §1: "a small model can be host-bound; say when"):

- **Per call of the op list** (forward, backward, recompute): ``n_calls × o`` (:func:`host_calls`). On an
  ``inline`` device (a CPU process) ``n_calls`` counts the operators eager torch dispatches per kernel
  (views, ``.grad`` accumulation: :mod:`simulator.workload.eager_dispatch`, 32 forward and 68 backward per
  block of the suite's tiny GPT) and ``o`` is ``Device.kernel_launch_overhead_us`` in forward and recompute,
  ``Device.backward_call_overhead_us`` in backward, both measured per dispatched operator by ``trainplan
  calibrate --compute`` [src: own-dispatch-calibration]; on an ``async`` one (a GPU) ``n_calls`` counts kernel
  launches and ``o`` is the CPU side of a CUDA launch [src: hta-launch-stats].
- **Per optimizer call**: ``calls × o_op`` with ``o_op = Device.op_call_overhead_us`` (an eager
  operator outside autograd), by the step's implementation (:func:`optimizer_calls`, the strategy's
  ``optimizer_impl`` in effect): torch's for-loop AdamW runs :data:`ADAMW_PER_TENSOR_CALLS` operators per
  parameter tensor (torch's default on the CPU), its foreach AdamW :data:`ADAMW_FOREACH_CALLS`
  ``_foreach_*`` calls per step (the default on CUDA), a fused one :data:`ADAMW_FUSED_CALLS`
  [src: torch-adam-impl]; DeepSpeed and Megatron-LM step flat buffers (:func:`simulator.memory.step_tensors`
  gives no per-tensor state there, so a for-loop over them issues the foreach count).
- **Offloaded optimizer**: with optimizer offload the same calls run on the host CPU; on an ``inline`` device
  they are charged on top of ``Host.cpu_adam_params_per_s``'s throughput (:func:`offloaded_optimizer_host_s`).
- **DTensor calls**: an optimizer call on DTensor parameters (FSDP2, torch tensor parallel) costs
  ``Device.dtensor_call_overhead_us`` more (:func:`dtensor_params`) [src: own-host-overhead-probe]; under torch's
  tensor parallelism only the tensors ``parallelize_module`` turned into DTensors pay it
  (:func:`simulator.compile.torch_tp.dtensor_tensors`: 17 of the tiny model's 28, 25 with SP).
- **FSDP2 modules**: each ``fully_shard`` module (every block, and the root on the model's first chunk)
  adds ``Host.fsdp2_forward_module_us`` to its chunk's forward (pre-forward all-gather copy-in/out,
  post-forward reshard) and ``Host.fsdp2_backward_module_us`` to its backward (re-gather, reduce-scatter,
  post-backward; at ZeRO-2, with no re-gather, ``Host.fsdp2_zero2_backward_module_us`` where the host states it:
  :func:`fsdp2_backward_us`) (:func:`with_host_modules`) [src: own-fsdp2-fake-group-probe].
- **Tensor-parallel modules**: under torch's own tensor parallelism (DTensor weights, :func:`dtensor_params`)
  each tensor-parallel module of a chunk (:func:`tp_modules`: :data:`TP_MODULES_PER_BLOCK` per block, the
  vocabulary-parallel embedding on the first chunk and output layer on the last) adds
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
  (:func:`simulator.pipeline_runtime.p2p_actions`) [src: own-pipeline-post-probe].
- **Time-sharing**: ``share = max(1, processes on the node / Host.cpu_cores)``
  (:func:`core_share`) multiplies host time, and on an ``inline`` device (a CPU process: the device *is*
  a core) its device time too.

A stream of kernels (one phase of one repeated unit, or one optimizer step) then takes
(:func:`stream_s`)

    inline:  (device_s + host_s) · share          (the calling thread runs the kernel)
    async:   max(device_s, host_s · share)        (launches return at once [src: nvidia-cuda-async])

so a GPU model whose kernels outlast their launches costs exactly its device time, and one whose
kernels are shorter than ``o`` is host-bound (:func:`host_bound`). Collective calls carry their own
per-call term (``comm.call_latency_us``, :mod:`simulator.collectives`); this module does not add to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cluster.spec import Cluster, Device, KernelDispatch
from simulator.pipeline_runtime import p2p_actions, pipeline_actions
from simulator.strategy.kinds import OptimizerImpl

ADAMW_PER_TENSOR_CALLS = 10
"""Operator calls per parameter tensor in torch's single-tensor AdamW (``_single_tensor_adam``, not
capturable, no amsgrad): ``step += 1``, decoupled ``param.mul_``, ``exp_avg.lerp_``, ``exp_avg_sq.mul_``,
``.addcmul_``, the step's ``.item()``, ``sqrt``, ``/``, ``.add_(eps)``, ``param.addcdiv_`` [src: torch-adam-impl]."""

ADAMW_FOREACH_CALLS = 9
"""``torch._foreach_*`` calls per (device, dtype) group in torch's foreach AdamW (``_multi_tensor_adam``, not
capturable): add (steps), mul (weight decay), lerp, mul, addcmul, sqrt, div, add (eps), addcdiv
[src: torch-adam-impl]."""

ADAMW_FUSED_CALLS = 2
"""Calls per (device, dtype) group in a fused AdamW step (torch's ``_fused_adam``): ``_foreach_add_`` of the
step counters and one ``_fused_adamw_`` kernel [src: torch-adam-impl]."""


TP_MODULES_PER_BLOCK = 4
"""Tensor-parallel modules of one block in torch's plan (``executor.strategies.tensor.block_plan``): ``qkv`` and
``mlp.up`` column-parallel, ``attn.out`` and ``mlp.down`` row-parallel [src: torch-dtensor-tp]."""

TP_EDGE_MODULES = 2
"""Tensor-parallel modules outside the blocks: the vocabulary-parallel token embedding (first chunk) and output
layer (last chunk) [src: megatron-vocab-parallel]."""


@dataclass(frozen=True)
class StreamTime:
    """One stream of kernels on one rank: device and host seconds and how they combine."""

    device_s: float
    """Σ of the kernels' roofline times."""
    host_s: float
    """Σ of the host time per call (before time-sharing)."""
    dispatch: KernelDispatch
    share: float = 1.0
    """Processes per core on the node (:func:`core_share`), ≥ 1."""

    @property
    def time_s(self) -> float:
        """The stream's seconds (module docstring)."""
        if self.dispatch is KernelDispatch.INLINE:
            return (self.device_s + self.host_s) * self.share
        return max(self.device_s, self.host_s * self.share)

    @property
    def host_bound(self) -> bool:
        """True when host time, not device time, sets the stream's time."""
        if self.dispatch is KernelDispatch.INLINE:
            return self.host_s > self.device_s
        return self.host_s * self.share > self.device_s


def stream_s(device: Device, device_s: float, calls: int, share: float = 1.0, *, per_call_us: float | None = None
             ) -> float:
    """Seconds of a stream of ``calls`` kernels whose roofline times sum to ``device_s`` on ``device``;
    each call costs ``per_call_us`` of host time (default: the device's ``kernel_launch_overhead_us``)."""
    return stream(device, device_s, calls, share, per_call_us=per_call_us).time_s


def stream(device: Device, device_s: float, calls: int, share: float = 1.0, *, per_call_us: float | None = None
           ) -> StreamTime:
    """The :class:`StreamTime` of :func:`stream_s`."""
    per_call = device.kernel_launch_overhead_us if per_call_us is None else per_call_us
    return StreamTime(device_s=device_s, host_s=calls * per_call * 1e-6, dispatch=device.kernel_dispatch,
                      share=share)


def host_calls(device: Device, ops: tuple) -> int:
    """Host calls of a phase's kernels (``ops``: per operation, a tuple of kernels) on ``device``: the operators
    the framework dispatches for them (``Kernel.dispatches``) on an ``inline`` device, one launch per kernel on an
    ``async`` one (:mod:`simulator.workload.eager_dispatch`)."""
    if device.kernel_dispatch is KernelDispatch.INLINE:
        return sum(k.dispatches for kernels in ops for k in kernels)
    return sum(len(kernels) for kernels in ops)


def core_share(cluster: Cluster, processes_on_node: int) -> float:
    """``max(1, processes / cores)``: how many processes each of the node's host cores runs
    (``Host.cpu_cores``; 1 when the cluster does not state its cores)."""
    host = cluster.node.host
    if host is None or host.cpu_cores is None:
        return 1.0
    return max(1.0, processes_on_node / host.cpu_cores)


def optimizer_calls(impl: OptimizerImpl, tensors: int) -> int:
    """Host calls of one AdamW step of implementation ``impl`` over ``tensors`` parameter tensors with
    per-tensor state (module docstring): the per-tensor loop's, the foreach calls (also a loop over flat
    buffers, ``tensors`` 0) or the fused ones."""
    if impl is OptimizerImpl.FUSED:
        return ADAMW_FUSED_CALLS
    if impl is OptimizerImpl.FOR_LOOP and tensors > 0:
        return ADAMW_PER_TENSOR_CALLS * tensors
    return ADAMW_FOREACH_CALLS


def optimizer_stream(device: Device, device_s: float, tensors: int, share: float = 1.0, *,
                     dtensor: bool = False, impl: OptimizerImpl = OptimizerImpl.FOREACH,
                     dtensor_tensors: int | None = None) -> StreamTime:
    """One optimizer step of implementation ``impl``: ``device_s`` of memory-bound update and
    :func:`optimizer_calls` host calls at ``Device.op_call_overhead_us`` each, plus
    ``Device.dtensor_call_overhead_us`` on DTensor parameters (``dtensor``, :func:`dtensor_params`): on every call,
    or, for the per-tensor loop when ``dtensor_tensors`` says how many of the ``tensors`` are DTensors (torch's tensor
    parallelism: :func:`simulator.compile.torch_tp.dtensor_tensors`), on those tensors' calls only."""
    calls = optimizer_calls(impl, tensors)
    dtensor_calls = 0
    if dtensor:
        partial = dtensor_tensors is not None and impl is OptimizerImpl.FOR_LOOP and tensors > 0
        dtensor_calls = optimizer_calls(impl, dtensor_tensors) if partial and dtensor_tensors else (
            0 if partial else calls)
    host_us = calls * device.op_call_overhead_us + dtensor_calls * device.dtensor_call_overhead_us
    return stream(device, device_s, calls, share, per_call_us=host_us / calls if calls else 0.0)


def offloaded_optimizer_host_s(device: Device, tensors: int, share: float = 1.0, *, dtensor: bool = False,
                               impl: OptimizerImpl = OptimizerImpl.FOR_LOOP) -> float:
    """Host seconds of the optimizer's own calls when it runs on the host CPU (optimizer offload), beyond the
    update's throughput (``Host.cpu_adam_params_per_s``): on an ``inline`` device, whose
    ``op_call_overhead_us`` *is* this host CPU's per-call cost, :func:`optimizer_calls` × (``op_call_overhead_us``
    + ``dtensor_call_overhead_us`` on DTensor parameters) × ``share``, as :func:`optimizer_stream` charges them;
    on an ``async`` device 0: the GPU's figure is a launch, and the host CPU's per-call cost is not a cluster
    field (not modelled). ``impl``: the implementation on the host's tensors (torch's default there: for-loop)."""
    if device.kernel_dispatch is not KernelDispatch.INLINE:
        return 0.0
    per_call = device.op_call_overhead_us + (device.dtensor_call_overhead_us if dtensor else 0.0)
    return optimizer_calls(impl, tensors) * per_call * 1e-6 * share


def dtensor_params(layout) -> bool:
    """Whether the framework keeps the parameters as DTensors: FSDP2 (``fully_shard`` shards each parameter
    as a DTensor) and torch's own tensor parallelism (``parallelize_module`` makes the sharded weights
    DTensors; Megatron-LM's is plain tensors) [src: torch-dtensor-params]."""
    from simulator.strategy.framework import Framework

    return layout.framework is Framework.FSDP2 or (layout.framework is Framework.TORCH_DDP and layout.tp > 1)


def optimizer_tensors(workload, layout, stage: int) -> int:
    """Parameter tensors the representative rank (dp 0) of pipeline stage ``stage`` steps one by one: the
    stage's tensors (:func:`simulator.memory.stage_param_shapes`, tensor-parallel shards) as
    :func:`simulator.memory.step_tensors` gives them per-tensor Adam state (all of them under DDP and
    FSDP2, the rank's own under ``ZeroRedundancyOptimizer``, none for a flat-buffer framework); 0 for a
    workload without parameter shapes."""
    from simulator.memory import stage_param_shapes, step_tensors

    if not getattr(workload, "has_activation_shapes", False):
        return 0
    shapes = stage_param_shapes(workload, tp=layout.tp, pp=layout.pp, stage=stage,
                                layers=layout.layer_indices(stage), ep=layout.ep)
    return step_tensors(shapes, layout.dp_cp, layout.strategy.zero, layout.framework)[0]


def tp_modules(layout, chunk) -> int:
    """Tensor-parallel modules of ``chunk`` (a :class:`simulator.workload.ChunkSlice`) whose weights are DTensors:
    :data:`TP_MODULES_PER_BLOCK` per layer, plus the embedding on the first chunk and the output layer on the
    last; 0 unless the layout runs torch's own tensor parallelism (:func:`dtensor_params`, tp > 1)."""
    from simulator.strategy.framework import Framework

    if layout.tp <= 1 or layout.framework is not Framework.TORCH_DDP:
        return 0
    return TP_MODULES_PER_BLOCK * chunk.layers + (1 if chunk.index == 0 else 0) + (
        1 if chunk.index == chunk.count - 1 else 0)


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
    from dataclasses import replace as _replace

    from simulator.strategy.framework import Framework

    host = cluster.node.host
    if host is None:
        return compute
    fsdp2 = chunk.layers + (1 if chunk.index == 0 else 0) if layout.framework is Framework.FSDP2 else 0
    tp = tp_modules(layout, chunk)
    ckpt = checkpoint_regions(layout, chunk)
    pipe_us = (pipeline_actions(layout, chunk) * host.pipeline_action_us
               + p2p_actions(layout, chunk) * host.pipeline_p2p_post_us)
    fwd_us = (fsdp2 * host.fsdp2_forward_module_us + tp * host.tp_forward_module_us
              + ckpt * host.checkpoint_forward_region_us + (host.ddp_forward_call_us if ddp_wrapped(layout) else 0.0)
              + pipe_us)
    bwd_us = (fsdp2 * fsdp2_backward_us(host, layout) + tp * host.tp_backward_module_us
              + ckpt * host.checkpoint_backward_region_us + pipe_us)
    if not fwd_us and not bwd_us:
        return compute
    device = cluster.device

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
