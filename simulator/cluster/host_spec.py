"""The host side of a node: CPU memory, PCIe, NVMe, the CPU optimizer, and the host time frameworks add.

Every host-time field is measured by ``trainplan calibrate --compute`` on the machine it describes (its source
key says how); 0 or None on a preset means not modelled there. Read by :mod:`simulator.host_overhead`,
:mod:`simulator.step_loop` and the offload and input-pipeline models.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.checks import non_negative_number, positive_int, positive_number
from simulator.cluster.comm import CpuVendor


@dataclass(frozen=True, kw_only=True)
class HostSpec:
    """The host side of a node: what ZeRO-Offload/Infinity and the input pipeline need."""

    cpu_memory_bytes: int
    """Host DRAM per node, bytes."""
    h2d_bw_GBps: float
    """Host-to-device PCIe bandwidth per GPU, per direction, decimal GB/s."""
    h2d_latency_us: float
    """Latency of one host↔device PCIe hop, µs (also the staging hop without GPUDirect RDMA)."""
    nvme_bytes: int = 0
    """NVMe capacity per node for ZeRO-Infinity offload, bytes (0: none)."""
    nvme_read_GBps: float = 0.0
    """Aggregate NVMe read bandwidth per node, GB/s."""
    nvme_write_GBps: float = 0.0
    """Aggregate NVMe write bandwidth per node, GB/s."""
    cpu_adam_params_per_s: float = 0.0
    """CPU optimizer throughput per node, parameters updated per second (0: unknown)."""
    storage_read_GBps: float = 0.0
    """Read bandwidth from training-data storage per node, GB/s (0: unknown)."""
    cpu_vendor: CpuVendor | None = None
    """Host CPU vendor (NCCL's LL cap across nodes depends on it, ``Protocol.bus_bw_cap``); None: not
    stated, read as NCCL reads any host that is not AMD."""
    fsdp2_forward_module_us: float = 0.0
    """Host time FSDP2 adds per ``fully_shard`` module per forward, µs (all-gather copy-in/out, reshard);
    :func:`simulator.framework_host.with_host_modules`. Measured by ``trainplan calibrate --compute`` on a fake
    2-rank group, FSDP2's multi-rank path (:mod:`executor.fsdp2_host_bench`) [src: own-fsdp2-fake-group-probe].
    0: not modelled."""
    fsdp2_backward_module_us: float = 0.0
    """Host time FSDP2 adds per ``fully_shard`` module per backward, µs (re-gather, reduce-scatter,
    post-backward). 0: not modelled."""
    tp_forward_module_us: float = 0.0
    """Host time torch's tensor parallelism (DTensor weights, ``parallelize_module``) adds per tensor-parallel
    module per forward, µs (DTensor dispatch, the parallel styles' hooks);
    :func:`simulator.framework_host.with_host_modules`. 0: not modelled (GPU presets: not measured)."""
    tp_backward_module_us: float = 0.0
    """The same per backward, µs. 0: not modelled."""
    checkpoint_forward_region_us: float = 0.0
    """Host time ``torch.utils.checkpoint`` adds per checkpointed region per forward, µs;
    :func:`simulator.framework_host.with_host_modules`. 0: not modelled (GPU presets: not measured)."""
    checkpoint_backward_region_us: float = 0.0
    """The same per backward, beyond the recomputed kernels, µs. 0: not modelled."""
    ddp_forward_call_us: float = 0.0
    """Host time torch ``DistributedDataParallel`` adds per forward call of the wrapped model, µs;
    :func:`simulator.framework_host.with_host_modules`. 0: not modelled (GPU presets: not measured)."""
    ddp_sync_backward_us: float = 0.0
    """Host time DDP's synchronising backward adds per step (reducer hooks, bucket copies, finalisation; not the
    collective), µs; :func:`simulator.framework_host.with_ddp_sync`. 0: not modelled."""
    pipeline_action_us: float = 0.0
    """Host time torch's pipeline schedule runtime (``torch.distributed.pipelining``'s ``_PipelineScheduleRuntime``)
    spends per action of a rank's list (compute, send, receive) outside the action's kernels and transfers, µs:
    the loop's dispatch and profiler range, the loss and output handling around a compute action and the building
    of each p2p op list (not the stage's bookkeeping inside ``forward_one_chunk`` / ``backward_one_chunk``, which
    the executor times as forward and backward: :attr:`pipeline_chunk_us`);
    :func:`simulator.framework_host.with_host_modules` charges it per compute action with the sends and receives
    the runtime adds around it (:func:`simulator.host_overhead.pipeline_actions`). Measured on the CPU by
    ``trainplan calibrate --compute`` (:mod:`executor.pipeline_host_bench`) [src: own-pipeline-action-probe].
    0: not modelled (GPU presets: not measured on a GPU; there the chunk terms take the larger of the phase's
    kernels and the host time, and a real model's stage kernels outlast tens of µs per action)."""
    tp_dtensor_call_us: float | None = None
    """Host time an AdamW operator call on a DTensor weight of torch's tensor parallelism (``parallelize_module``)
    costs beyond the same call on a plain tensor, µs per call: :func:`simulator.host_overhead.dtensor_call_us`
    charges it on the DTensor tensors' calls of a torch-TP rank's optimizer step in place of
    ``Device.dtensor_call_overhead_us`` (FSDP2's figure). Measured by ``trainplan calibrate --compute`` from the tp
    probe's AdamW steps after a backward on a 2-process tp group (:mod:`executor.tp_host_bench`)
    [src: own-tp-dtensor-in-step-probe]. None: not stated, ``Device.dtensor_call_overhead_us`` prices it."""
    fsdp2_zero2_backward_module_us: float | None = None
    """:attr:`fsdp2_backward_module_us` for FSDP2 at ZeRO-2 (``reshard_after_forward=False``), whose backward
    does not re-gather the module, µs; measured by ``trainplan calibrate --compute`` with the same probe
    (:mod:`executor.fsdp2_host_bench`) [src: own-fsdp2-fake-group-probe]. None: not stated, ZeRO-2 is charged
    :attr:`fsdp2_backward_module_us` as ZeRO-3 is."""
    pipeline_p2p_post_us: float = 0.0
    """Host time torch's pipeline runtime blocks a rank's thread posting one send or receive of its list
    (``_batch_p2p``: ``dist.isend`` / ``dist.irecv`` through the backend, which for gloo takes the pair's lock and
    writes the rendezvous notice on the calling thread), µs: not in :attr:`pipeline_action_us` (the executor books
    posting as pp time, outside no phase); :func:`simulator.framework_host.with_host_modules` charges it per send and
    receive the runtime puts around a forward or backward (:func:`simulator.pipeline_runtime.p2p_actions`).
    Measured on the CPU by ``trainplan calibrate --compute`` (:mod:`executor.pipeline_host_bench`)
    [src: own-pipeline-post-probe]. 0: not modelled (GPU presets: not measured on a GPU)."""
    pipeline_chunk_us: float = 0.0
    """Host time a pipeline stage of ``torch.distributed.pipelining`` spends per ``forward_one_chunk`` or
    ``backward_one_chunk`` around its module's forward and torch's ``stage_backward``, µs: retrieving the received
    activations or gradients, flattening and caching the inputs and outputs, detaching the last stage's output
    (torch 2.13 ``pipelining/stage.py`` ``forward_one_chunk``, ``backward_one_chunk``) [src: torch-pipelining]. The
    executor books it in the forward and backward phases, so :attr:`pipeline_action_us` (time outside every phase)
    leaves it out; :func:`simulator.framework_host.with_host_modules` charges it once per forward and per backward
    of a chunk. Measured by ``trainplan calibrate --compute`` in the same steps as :attr:`pipeline_action_us`
    (:mod:`executor.pipeline_host_bench`) [src: own-pipeline-chunk-probe]. 0: not modelled."""
    step_loop_us: float = 0.0
    """Host time a rank's training loop spends per step outside every phase, µs: taking the step's batch and the
    replica's samples, slicing the micro-batches, entering and leaving the accumulation context, ``zero_grad``,
    the phase clocks' own calls; :func:`simulator.step_loop.step_loop_s` charges it once per step with the
    optimizer. Measured by ``trainplan calibrate --compute`` as the time outside the phases of the tiny model's
    step on 2 gloo processes (:mod:`executor.step_bench`) [src: own-step-loop-probe]. 0: not modelled (GPU
    presets: not measured on a GPU)."""
    first_microbatch_cold_us: float = 0.0
    """Extra host time of a step's first micro-batch forward over a later one's, µs: the first torch calls after
    the barrier and the between-step bookkeeping find their code and data cold; charged once per step by
    :func:`simulator.step_loop.step_loop_s`. Measured by ``trainplan calibrate --compute`` from the same probe's
    steps as the first micro-batch's forward less the mean of the others' [src: own-step-loop-probe]. 0: not
    modelled (GPU presets: not measured)."""
    fsdp2_sync_switch_us: float = 0.0
    """Host time of one ``FSDPModule.set_requires_gradient_sync`` call, µs: the executor's data-parallel runner calls
    it on the root before every micro-batch under FSDP2 (it walks every FSDP module of the model to set the flag),
    outside every phase; :func:`simulator.step_loop.step_loop_s` charges it micro-batches times per step where FSDP2
    wraps the model. Measured by ``trainplan calibrate --compute`` around the call in the rank-step probe's FSDP2
    steps (:mod:`executor.step_bench`) [src: own-fsdp2-loop-probe]. 0: not modelled (GPU presets: not measured)."""
    fsdp2_zero_grad_us: float = 0.0
    """Host time ``zero_grad(set_to_none=False)`` over FSDP2's DTensor shards' gradients costs per step beyond the
    plain tensors' that :attr:`step_loop_us` holds, µs (each ``zero_`` a DTensor dispatch), outside every phase;
    charged once per step where FSDP2 wraps the model. Measured by ``trainplan calibrate --compute`` around the call
    in the rank-step probe's FSDP2 steps less the plain steps' (:mod:`executor.step_bench`)
    [src: own-fsdp2-loop-probe]. 0: not modelled (GPU presets: not measured)."""
    rank_jitter_sd_fraction: float = 0.0
    """Spread of a rank's step time that its peers do not share, as a fraction of the step (dimensionless, a normal
    σ): the measured step is each step's slowest rank, whose median lies above one rank's median by this spread times
    z(0.5^(1/n)) for n ranks (:func:`simulator.rank_max.rank_max_gain`: each chunk's compute and the optimizer
    step scale by 1 + that). Set by hand in a cluster file: ``trainplan calibrate --compute`` does not write it,
    because its 2-process rank-step probe (:mod:`executor.step_bench`, ``step_independent_sd_fraction``) read 0.364
    and 0.041 a minute apart (docs/validation.md, max23 and the quiet suites of 2026-11-26)
    [src: own-rank-jitter-probe]. 0: not modelled (the default; GPU presets: not measured on a GPU)."""
    cpu_cores: int | None = None
    """CPU cores of the node's host that run its processes (``os.sched_getaffinity``; ``trainplan calibrate
    --compute`` writes it): more active processes than cores time-share them
    (:func:`simulator.host_overhead.core_share`); None: not stated, no time-sharing modelled."""

    def __post_init__(self) -> None:
        positive_number("host.cpu_memory_GB", self.cpu_memory_bytes)
        positive_number("host.h2d_bw_GBps", self.h2d_bw_GBps)
        non_negative_number("host.h2d_latency_us", self.h2d_latency_us)
        for name in ("nvme_bytes", "nvme_read_GBps", "nvme_write_GBps", "cpu_adam_params_per_s",
                     "storage_read_GBps"):
            non_negative_number(f"host.{name}", getattr(self, name))
        if self.cpu_cores is not None:
            positive_int("host.cpu_cores", self.cpu_cores)
        non_negative_number("host.rank_jitter_sd_fraction", self.rank_jitter_sd_fraction)
        non_negative_number("host.fsdp2_forward_module_us", self.fsdp2_forward_module_us)
        non_negative_number("host.fsdp2_backward_module_us", self.fsdp2_backward_module_us)
        non_negative_number("host.tp_forward_module_us", self.tp_forward_module_us)
        non_negative_number("host.tp_backward_module_us", self.tp_backward_module_us)
        non_negative_number("host.checkpoint_forward_region_us", self.checkpoint_forward_region_us)
        non_negative_number("host.checkpoint_backward_region_us", self.checkpoint_backward_region_us)
        non_negative_number("host.ddp_forward_call_us", self.ddp_forward_call_us)
        non_negative_number("host.ddp_sync_backward_us", self.ddp_sync_backward_us)
        non_negative_number("host.pipeline_action_us", self.pipeline_action_us)
        non_negative_number("host.pipeline_p2p_post_us", self.pipeline_p2p_post_us)
        non_negative_number("host.pipeline_chunk_us", self.pipeline_chunk_us)
        non_negative_number("host.step_loop_us", self.step_loop_us)
        non_negative_number("host.first_microbatch_cold_us", self.first_microbatch_cold_us)
        non_negative_number("host.fsdp2_sync_switch_us", self.fsdp2_sync_switch_us)
        non_negative_number("host.fsdp2_zero_grad_us", self.fsdp2_zero_grad_us)
        if self.fsdp2_zero2_backward_module_us is not None:
            non_negative_number("host.fsdp2_zero2_backward_module_us", self.fsdp2_zero2_backward_module_us)
        if self.tp_dtensor_call_us is not None:
            non_negative_number("host.tp_dtensor_call_us", self.tp_dtensor_call_us)
