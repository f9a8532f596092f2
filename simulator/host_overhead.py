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
  (:func:`simulator.compile.torch_tp.dtensor_tensors`: 17 of the tiny model's 28, 25 with SP), and there at
  ``Host.tp_dtensor_call_us`` where the cluster states it, measured in a tp step [src: own-tp-dtensor-in-step-probe]
  (:func:`dtensor_call_us`).
- **Framework runtimes' per-module terms** (FSDP2 modules, torch tensor-parallel modules, activation-checkpoint
  regions, DDP's wrapper and reducer, torch's pipeline runtime): :mod:`simulator.framework_host`.
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
                     dtensor_tensors: int | None = None, dtensor_call_us: float | None = None) -> StreamTime:
    """One optimizer step of implementation ``impl``: ``device_s`` of memory-bound update and
    :func:`optimizer_calls` host calls at ``Device.op_call_overhead_us`` each, plus the DTensor surcharge
    ``dtensor_call_us`` (None: ``Device.dtensor_call_overhead_us``; the caller's :func:`dtensor_call_us`) on DTensor
    parameters (``dtensor``, :func:`dtensor_params`): on every call,
    or, for the per-tensor loop when ``dtensor_tensors`` says how many of the ``tensors`` are DTensors (torch's tensor
    parallelism: :func:`simulator.compile.torch_tp.dtensor_tensors`), on those tensors' calls only."""
    calls = optimizer_calls(impl, tensors)
    dtensor_calls = 0
    if dtensor:
        partial = dtensor_tensors is not None and impl is OptimizerImpl.FOR_LOOP and tensors > 0
        dtensor_calls = optimizer_calls(impl, dtensor_tensors) if partial and dtensor_tensors else (
            0 if partial else calls)
    surcharge_us = device.dtensor_call_overhead_us if dtensor_call_us is None else dtensor_call_us
    host_us = calls * device.op_call_overhead_us + dtensor_calls * surcharge_us
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


def dtensor_call_us(cluster: Cluster, layout) -> float:
    """µs an optimizer call on a DTensor parameter costs beyond a plain one under ``layout``: under torch's own tensor
    parallelism (the torch framework at tp > 1, :func:`dtensor_params`) ``Host.tp_dtensor_call_us`` where the cluster
    states it (measured in a tp step: its DTensors are weight shards that ``parallelize_module`` made, whose calls
    cost 0.5-0.8 of FSDP2's there) [src: own-tp-dtensor-in-step-probe]; otherwise, and for FSDP2's shards,
    ``Device.dtensor_call_overhead_us`` [src: own-dtensor-in-step-probe]."""
    from simulator.strategy.framework import Framework

    host = cluster.node.host
    if layout.tp > 1 and layout.framework is Framework.TORCH_DDP and host is not None \
            and host.tp_dtensor_call_us is not None:
        return host.tp_dtensor_call_us
    return cluster.device.dtensor_call_overhead_us


def dtensor_params(layout) -> bool:
    """Whether the framework keeps the parameters as DTensors: FSDP2 (``fully_shard`` shards each parameter
    as a DTensor) and torch's own tensor parallelism (``parallelize_module`` makes the sharded weights
    DTensors; Megatron-LM's is plain tensors) [src: torch-dtensor-params]."""
    from simulator.strategy.framework import Framework

    return layout.framework is Framework.FSDP2 or (layout.framework is Framework.TORCH_DDP and layout.tp > 1)


def optimizer_tensors(workload, layout, stage: int, shapes=None) -> int:
    """Parameter tensors the representative rank (dp 0) of pipeline stage ``stage`` steps one by one: the
    stage's tensors (:func:`simulator.memory.stage_param_shapes`, tensor-parallel shards) as
    :func:`simulator.memory.step_tensors` gives them per-tensor Adam state (all of them under DDP and
    FSDP2, the rank's own under ``ZeroRedundancyOptimizer``, none for a flat-buffer framework); 0 for a
    workload without parameter shapes. ``shapes``: the stage's ``stage_param_shapes``, if already named."""
    from simulator.memory import stage_param_shapes, step_tensors
    from simulator.memory.states import steps_per_tensor

    if not getattr(workload, "has_activation_shapes", False) or not steps_per_tensor(layout.framework):
        return 0  # a flat-buffer framework counts none, whatever the shapes (no need to name them)
    if shapes is None:
        shapes = stage_param_shapes(workload, tp=layout.tp, pp=layout.pp, stage=stage,
                                    layers=layout.layer_indices(stage), ep=layout.ep)
    return step_tensors(shapes, layout.dp_cp, layout.strategy.zero, layout.framework)[0]
