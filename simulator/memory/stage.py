"""What one rank of a pipeline stage holds at its peak (:class:`StageMemory`), by kind and location,
and the three peaks frameworks and tools report: ``allocated`` (``torch.cuda.max_memory_allocated``),
``reserved`` (``max_memory_reserved``) and the device total (``nvidia-smi``), which decides fit
(:mod:`simulator.memory.runtime` says which term goes where).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.memory.activations import StageActivations
from simulator.memory.buffers import BufferBytes
from simulator.memory.offload import PlacedStates
from simulator.memory.runtime import RuntimeBytes


@dataclass(frozen=True, kw_only=True)
class StageMemory:
    """Bytes one rank of a pipeline stage holds at its peak, by kind and location."""

    stage: int
    blocks: int
    """Transformer blocks on this stage."""
    placed: PlacedStates
    """Model states by location (GPU, host, NVMe)."""
    activations: StageActivations | None
    """None for a bare parameter count (no shapes to size activations from)."""
    buffers: BufferBytes
    runtime: RuntimeBytes
    """CUDA context, cuBLAS workspaces, NCCL buffers and the allocator's reserve."""

    @property
    def params_bytes(self) -> float:
        return float(self.placed.gpu.params_bytes)

    @property
    def grads_bytes(self) -> float:
        return float(self.placed.gpu.grads_bytes)

    @property
    def params_after_step_bytes(self) -> float:
        """GPU parameter bytes after the optimizer step (below ``params_bytes`` only under FSDP2 ZeRO-2,
        whose unsharded copy lives from forward to backward)."""
        return float(self.placed.gpu.params_at_rest_bytes)

    @property
    def optimizer_bytes(self) -> float:
        """Adam moments, fp32 master and the ``step`` tensors (torch keeps those on the CPU unless Adam
        is fused or capturable: a few KB per rank, counted here so the line matches the measurement)."""
        return float(self.placed.gpu.optimizer_bytes + self.placed.gpu.optimizer_step_bytes)

    @property
    def activations_bytes(self) -> float:
        return self.activations.gpu_bytes if self.activations else 0.0

    @property
    def buffers_bytes(self) -> float:
        return self.buffers.total_bytes

    @property
    def forward_peak_bytes(self) -> float:
        """Tensors alive between forward and backward: model states on the GPU + activations + buffers. Where the
        buffers hold the unsharded gradients to the step's one reduce-scatter (``held_grads_bytes``, torch's
        pipelining runtime over FSDP2), they stand in for the sharded gradients, which that reduce-scatter only
        creates after the last backward (``zero_grad`` sets them to None: torchtitan's and the executor's)."""
        grads = 0.0 if self.buffers.held_grads_bytes else self.grads_bytes
        return self.params_bytes + grads + self.optimizer_bytes + self.activations_bytes + self.buffers_bytes

    @property
    def step_peak_bytes(self) -> float:
        """Tensors alive during the optimizer step: model states (parameters as after the step), the
        gradient buckets (persistent) and the step's temporaries; the activations and the other
        buffers are freed by then."""
        return (self.params_after_step_bytes + self.grads_bytes + self.optimizer_bytes
                + self.buffers.grad_buckets_bytes + self.buffers.optimizer_step_bytes)

    @property
    def allocated_bytes(self) -> float:
        """Peak ``torch.cuda.max_memory_allocated``: the larger of the forward/backward peak and the
        optimizer step's, + the cuBLAS workspaces (served by the caching allocator)."""
        return max(self.forward_peak_bytes, self.step_peak_bytes) + self.runtime.cublas_workspace_bytes

    @property
    def reserved_bytes(self) -> float:
        """Peak ``torch.cuda.max_memory_reserved``: allocated + what the allocator keeps cached."""
        return self.allocated_bytes + self.runtime.allocator_slack_bytes

    @property
    def runtime_total_bytes(self) -> float:
        """The runtime terms together: cuBLAS workspaces, allocator reserve, CUDA context, NCCL buffers."""
        r = self.runtime
        return r.cublas_workspace_bytes + r.allocator_slack_bytes + r.outside_allocator_bytes

    @property
    def total_bytes(self) -> float:
        """Device bytes (what ``nvidia-smi`` shows, what decides fit): reserved + the CUDA context and
        NCCL's buffers, which live outside the caching allocator."""
        return self.reserved_bytes + self.runtime.outside_allocator_bytes

    @property
    def host_activation_bytes(self) -> float:
        return self.activations.host_checkpoint_bytes if self.activations else 0.0

    @property
    def host_bytes(self) -> float:
        """Host-memory bytes of this rank (offloaded states, swap buffers, activation checkpoints)."""
        return self.placed.host_bytes + self.host_activation_bytes

    @property
    def nvme_bytes(self) -> float:
        return self.placed.nvme_bytes

    def to_dict(self) -> dict:
        act = self.activations
        return {
            "stage": self.stage, "blocks": self.blocks,
            "params_bytes": self.params_bytes, "params_after_step_bytes": self.params_after_step_bytes,
            "grads_bytes": self.grads_bytes,
            "optimizer_bytes": self.optimizer_bytes, "activations_bytes": self.activations_bytes,
            "buffers_bytes": self.buffers_bytes, "allocated_bytes": self.allocated_bytes,
            "runtime_bytes": self.runtime_total_bytes, "reserved_bytes": self.reserved_bytes,
            "total_bytes": self.total_bytes, "host_bytes": self.host_bytes, "nvme_bytes": self.nvme_bytes,
            "activations": None if act is None else {
                "blocks_bytes": act.blocks_bytes, "recompute_working_bytes": act.recompute_working_bytes,
                "embedding_bytes": act.embedding_bytes, "head_bytes": act.head_bytes,
                "loss_working_bytes": act.loss_working_bytes,
                "attention_scores_bytes": act.scores_bytes, "micro_batches_in_flight": act.micro_batches_in_flight},
            "buffers": {"grad_buckets_bytes": self.buffers.grad_buckets_bytes,
                        "gathered_params_bytes": self.buffers.gathered_params_bytes,
                        "held_grads_bytes": self.buffers.held_grads_bytes,
                        "fp8_weights_bytes": self.buffers.fp8_weights_bytes,
                        "autocast_weights_bytes": self.buffers.autocast_weights_bytes,
                        "optimizer_step_bytes": self.buffers.optimizer_step_bytes},
            "forward_peak_bytes": self.forward_peak_bytes, "step_peak_bytes": self.step_peak_bytes,
            "runtime": {"cublas_workspace_bytes": self.runtime.cublas_workspace_bytes,
                        "allocator_slack_bytes": self.runtime.allocator_slack_bytes,
                        "cuda_context_bytes": self.runtime.cuda_context_bytes,
                        "nccl_buffers_bytes": self.runtime.nccl_buffers_bytes},
            "host": {"params_bytes": self.placed.host_params_bytes, "grads_bytes": self.placed.host_grads_bytes,
                     "optimizer_bytes": self.placed.host_optimizer_bytes,
                     "swap_buffers_bytes": self.placed.host_swap_buffers_bytes,
                     "activation_checkpoints_bytes": self.host_activation_bytes},
        }
