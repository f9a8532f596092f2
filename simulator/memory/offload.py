"""Where model states live under offload: GPU, host memory or NVMe, per rank; and the per-node
capacity checks for host memory and NVMe.

Placement (DeepSpeed ZeRO-Offload, Ren et al. ATC'21 §4; ZeRO-Infinity, Rajbhandari et al. SC'21 §5):

=============  ===========================  ========================================  ====================
offload        GPU                          host                                      NVMe
=============  ===========================  ========================================  ====================
none           params, grads, optimizer     -                                         -
optimizer      params; grads under ZeRO-1   optimizer partition + fp32 grad partition -
params         (gathered blocks only)       16-bit param partition + fp32 grads + opt -
nvme           (gathered blocks only)       fp32 grad partition + swap buffers        params + optimizer
=============  ===========================  ========================================  ====================

The CPU runs Adam on fp32 gradients, so offloaded gradient partitions are fp32 (4 bytes/param):
ZeRO-3 with parameter offload costs 2 + 4 + 12 = 18 host bytes per parameter partition, DeepSpeed's
``estimate_zero3_model_states_mem_needs`` figure. Host needs are multiplied by that estimator's
``additional_buffer_factor`` (:data:`HOST_BUFFER_FACTOR`) before the capacity check.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.memory.states import ModelStateBytes
from simulator.strategy.kinds import Offload, ZeroStage

HOST_BUFFER_FACTOR = 1.5
"""DeepSpeed's estimators multiply host model-state memory by ``additional_buffer_factor=1.5``
(``deepspeed/runtime/zero/stage_1_and_2.py`` and ``stage3.py`` ``estimate_*_mem_needs``)."""
FP32_GRAD_BYTES = 4
"""Bytes per gradient element the CPU optimizer reads (fp32)."""
NVME_PARAM_BUFFERS = 5
"""DeepSpeed ``offload_param.buffer_count`` default (DeepSpeed config docs)."""
NVME_PARAM_BUFFER_ELEMENTS = 100_000_000
"""DeepSpeed ``offload_param.buffer_size`` default, 1e8 elements (DeepSpeed config docs)."""
NVME_OPTIMIZER_BUFFERS = 4
"""DeepSpeed ``offload_optimizer.buffer_count`` default: one per Adam state (param, grad, m, v)."""
SUB_GROUP_ELEMENTS = 1_000_000_000
"""DeepSpeed ``zero_optimization.sub_group_size`` default, 1e9 elements: the unit swapped to NVMe."""


@dataclass(frozen=True, kw_only=True)
class PlacedStates:
    """One rank's model states split by location."""

    gpu: ModelStateBytes
    host_params_bytes: float = 0.0
    host_grads_bytes: float = 0.0
    host_optimizer_bytes: float = 0.0
    host_swap_buffers_bytes: float = 0.0
    """Pinned staging buffers for NVMe swapping (ZeRO-Infinity)."""
    nvme_bytes: float = 0.0

    @property
    def host_bytes(self) -> float:
        return self.host_params_bytes + self.host_grads_bytes + self.host_optimizer_bytes + self.host_swap_buffers_bytes


def place_states(states: ModelStateBytes, *, partition_numel: int, zero: ZeroStage, offload: Offload,
                 param_bytes: int) -> PlacedStates:
    """Split ``states`` (one rank's, computed for ``zero``) by ``offload``; ``partition_numel`` is
    the rank's partition of the parameters (elements)."""
    if offload is Offload.NONE:
        return PlacedStates(gpu=states)
    fp32_grads = float(partition_numel * FP32_GRAD_BYTES)
    optimizer = states.optimizer_bytes + states.optimizer_step_bytes
    if offload is Offload.OPTIMIZER:
        gpu_grads = states.grads_bytes if zero is ZeroStage.ZERO1 else 0
        return PlacedStates(gpu=ModelStateBytes(params_bytes=states.params_bytes, grads_bytes=gpu_grads,
                                                optimizer_bytes=0, params_after_step_bytes=states.params_after_step_bytes),
                            host_grads_bytes=fp32_grads, host_optimizer_bytes=float(optimizer))
    empty = ModelStateBytes(params_bytes=0, grads_bytes=0, optimizer_bytes=0)
    param_partition = float(partition_numel * param_bytes)
    if offload is Offload.PARAMS:
        return PlacedStates(gpu=empty, host_params_bytes=param_partition, host_grads_bytes=fp32_grads,
                            host_optimizer_bytes=float(optimizer))
    swap = (NVME_PARAM_BUFFERS * NVME_PARAM_BUFFER_ELEMENTS * param_bytes
            + NVME_OPTIMIZER_BUFFERS * min(SUB_GROUP_ELEMENTS, partition_numel) * FP32_GRAD_BYTES)
    return PlacedStates(gpu=empty, host_grads_bytes=fp32_grads, host_swap_buffers_bytes=float(swap),
                        nvme_bytes=param_partition + optimizer)
