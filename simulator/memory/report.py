"""The per-rank memory breakdown of a training layout, per pipeline stage, with a fits verdict.

``memory_report(model, cluster, layout)`` (a :class:`~simulator.strategy.ParallelLayout`, or a
:class:`~simulator.strategy.Strategy` that is laid out over the whole cluster) puts together, for one rank of each pipeline stage
(tensor-parallel rank 0, the most loaded data-parallel rank): model states
(:mod:`~simulator.memory.states`), their placement under offload (:mod:`~simulator.memory.offload`),
activations (:mod:`~simulator.memory.activations`), temporary buffers (:mod:`~simulator.memory.buffers`)
and the runtime's own memory (:mod:`~simulator.memory.runtime`). Each rank reports, as the frameworks
do, its peak ``allocated`` (``torch.cuda.max_memory_allocated``) and ``reserved``
(``max_memory_reserved``), and the device total (reserved + CUDA context + NCCL buffers) that
decides fit. The most loaded stage decides the verdict: it fits
when its GPU total is within the device memory and, per node, the host bytes (times
:data:`~simulator.memory.offload.HOST_BUFFER_FACTOR`) and NVMe bytes are within the node's capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from math import ceil

from simulator.cluster.spec import Cluster
from simulator.errors import SpecError
from simulator.memory.activations import in_flight
from simulator.memory.autocast import cast_weight_bytes, optimizer_step_bytes
from simulator.memory.buffers import buffer_bytes
from simulator.memory.fp8 import with_fp8
from simulator.memory.moe import add_states, split_experts
from simulator.memory.offload import HOST_BUFFER_FACTOR, place_states
from simulator.memory.runtime import is_cuda, runtime_bytes
from simulator.memory.shapes import (embedding_shapes, head_shapes, layer_param_shapes, numel,
                                     stage_param_shapes)
from simulator.memory.stage import StageMemory
from simulator.memory.stage_acts import LayoutActivations, layout_activations, stage_activations
from simulator.memory.partition import ShapeCounts, partition_numels, shape_counts
from simulator.memory.states import ADAM_STATE_BYTES, model_state_bytes
from simulator.strategy.formats import autocast_of, grad_reduce_dtype
from simulator.strategy import Offload, ParallelLayout, Strategy, build_layout
from simulator.strategy.sync import AllReduceSync, pipeline_defers_grad_sync
from simulator.units import GB
from simulator.workload import Recompute
from simulator.workload.fp8 import fp8_needs_transpose
from simulator.workload.layers import ParamCountModel
from simulator.workload.transformer import TransformerSpec


@dataclass(frozen=True, kw_only=True)
class MemoryReport:
    """Per-stage breakdowns, the most loaded rank, and the verdict against the cluster."""

    model_name: str
    layout: ParallelLayout
    seq: int | None
    """Tokens per sample (None for a bare parameter count)."""
    device_name: str
    device_memory_bytes: int
    ranks_per_node: int
    host_capacity_bytes: int | None
    nvme_capacity_bytes: int | None
    stages: tuple[StageMemory, ...]
    notes: tuple[str, ...] = ()

    @cached_property
    def worst(self) -> StageMemory:
        """The most loaded rank (largest GPU total; the earliest stage on a tie); computed once."""
        return max(self.stages, key=lambda s: (s.total_bytes, -s.stage))

    @cached_property
    def host_node_bytes(self) -> float:
        """Host bytes one node needs: its ranks × the most host-loaded rank, states × the allowance."""
        rank = max(self.stages, key=lambda s: s.host_bytes)
        return self.ranks_per_node * (rank.placed.host_bytes * HOST_BUFFER_FACTOR + rank.host_activation_bytes)

    @cached_property
    def nvme_node_bytes(self) -> float:
        return self.ranks_per_node * max(s.nvme_bytes for s in self.stages)

    @cached_property
    def reasons(self) -> tuple[str, ...]:
        """Why it does not fit (empty when it fits); computed once (a planner's search asks it of one
        report for every candidate that shares the report)."""
        return reasons(self.worst.stage, self.worst.total_bytes, self.device_memory_bytes, self.host_node_bytes,
                       self.host_capacity_bytes, self.nvme_node_bytes, self.nvme_capacity_bytes)

    @property
    def fits(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict:
        """The ``--json`` object: the most loaded rank's fields at the top level, then the rest."""
        lay = self.layout
        s = lay.strategy
        top = {k: v for k, v in self.worst.to_dict().items() if k.endswith("_bytes")}
        return top | {
            "fits": self.fits, "reasons": list(self.reasons), "most_loaded_stage": self.worst.stage,
            "device": self.device_name, "device_memory_bytes": self.device_memory_bytes,
            "host_node_bytes": self.host_node_bytes, "host_capacity_bytes": self.host_capacity_bytes,
            "nvme_node_bytes": self.nvme_node_bytes, "nvme_capacity_bytes": self.nvme_capacity_bytes,
            "ranks_per_node": self.ranks_per_node, "model": self.model_name,
            "strategy": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "zero": int(s.zero),
                         "offload": s.offload.value,
                         "offload_activations": s.offload_activations, "mbs": s.micro_batch,
                         "gbs": s.global_batch, "seq": self.seq, "recompute": s.recompute.value, "sp": lay.sequence_parallel,
                         "schedule": s.schedule.value, "microbatches": lay.micro_batches, "virtual_stages": lay.v,
                         "layers_per_stage": list(lay.layers_per_stage),
                         "partitioning": lay.partitioning.value, "framework": lay.framework.value,
                         "gradient_as_bucket_view": s.gradient_as_bucket_view, "attention": s.attention.value},
            "stages": [st.to_dict() for st in self.stages], "notes": list(self.notes),
        }


def reasons(stage: int, total_bytes: float, device_memory_bytes: int, host_node_bytes: float,
            host_capacity_bytes: int | None, nvme_node_bytes: float,
            nvme_capacity_bytes: int | None) -> tuple[str, ...]:
    """Why a layout does not fit (empty when it fits): its most loaded rank (``stage``, ``total_bytes``) over
    the device memory, a node's host or NVMe bytes over the node's capacity (:class:`MemoryReport`)."""
    out = []
    if total_bytes > device_memory_bytes:
        out.append(f"GPU: stage {stage} needs {total_bytes / GB:.1f} GB of {device_memory_bytes / GB:.1f} GB")
    if host_node_bytes > 0 and host_capacity_bytes is not None and host_node_bytes > host_capacity_bytes:
        out.append(f"host: a node needs {host_node_bytes / GB:.1f} GB of {host_capacity_bytes / GB:.1f} GB RAM")
    if nvme_node_bytes > 0 and nvme_node_bytes > (nvme_capacity_bytes or 0):
        out.append(f"NVMe: a node needs {nvme_node_bytes / GB:.1f} GB of {(nvme_capacity_bytes or 0) / GB:.1f} GB")
    return tuple(out)


def _largest_block(spec: TransformerSpec, tp: int, blocks: range, stage: int, pp: int, ep: int = 1) -> int:
    """Elements of the largest unit ZeRO-3 gathers at once on this stage (block, embedding or head)."""
    kinds = blocks if spec.moe is not None else blocks[:1]  # dense blocks are all alike
    units = [sum(numel(d) for _, d in layer_param_shapes(spec, i, tp, ep)) for i in kinds]
    if stage == 0:
        units.append(sum(numel(d) for _, d in embedding_shapes(spec, tp)))
    if stage == pp - 1:
        units.append(sum(numel(d) for _, d in head_shapes(spec, tp, separate_stage=pp > 1)))
    return max(units)


@dataclass(frozen=True)
class DeviceKey:
    """What a stage's states and buffers read of the device (part of their cache key): whether it is a CUDA
    device (torch's foreach optimizer temporaries) and whether Transformer Engine keeps a transposed copy of
    each cached FP8 weight there (:func:`~simulator.workload.fp8.fp8_needs_transpose`: not on SM 10.x)."""

    cuda: bool
    fp8_transpose: bool


def device_key(device) -> DeviceKey:
    """:class:`DeviceKey` of ``device``."""
    return DeviceKey(cuda=is_cuda(device), fp8_transpose=fp8_needs_transpose(device.compute_capability))


def _states(model, layout: ParallelLayout, stage: int, dev: DeviceKey):
    """(blocks, placed states, buffers) of one stage: everything but the activations, so a search
    can share it between candidates that differ only in micro-batch, recomputation or schedule."""
    s, tp, pp, dp = layout.strategy, layout.tp, layout.pp, layout.dp_cp  # ZeRO shards over the dp-cp group
    dtype = model.dtype
    experts: list = []
    if model.has_activation_shapes:
        blocks = layout.layer_indices(stage)
        shapes = stage_param_shapes(model, tp=tp, pp=pp, stage=stage, layers=blocks, ep=layout.ep)
        largest = _largest_block(model, tp, blocks, stage, pp, layout.ep)
        shapes, experts = split_experts(shapes)  # routed experts: partitioned over the expert-dp group
    else:
        shapes = [("params", (ceil(model.params / (tp * pp)),))]
        blocks, largest = (), 0
    partitioning, framework = layout.partitioning, layout.framework
    mixed, reduce = s.resolved_mixed_precision, s.resolved_grad_reduce_dtype(dtype)
    counts = shape_counts(shapes)  # each tensor's elements, read once for the states, partition and sums below
    kept = pipeline_defers_grad_sync(s)  # torch's pipelining keeps gathered parameters (simulator.gather_reuse)
    states = model_state_bytes(counts, dp=dp, zero=s.zero, dtype=dtype, partitioning=partitioning,
                               framework=framework, mixed_precision=mixed, grad_reduce_dtype=reduce,
                               pipeline_keeps_gathered=kept)
    partition = max(partition_numels(counts, dp, partitioning))
    if experts:
        edp, expert_counts = dp // layout.ep, shape_counts(experts)
        states = add_states(states, model_state_bytes(expert_counts, dp=edp, zero=s.zero, dtype=dtype,
                                                      partitioning=partitioning, framework=framework,
                                                      mixed_precision=mixed, grad_reduce_dtype=reduce,
                                                      pipeline_keeps_gathered=kept))
        partition += max(partition_numels(expert_counts, edp, partitioning))
        shapes = shapes + experts
        counts = ShapeCounts(counts.dims + expert_counts.dims, counts.counts + expert_counts.counts)
    placed = place_states(states, partition_numel=partition, zero=s.zero, offload=s.offload,
                          param_bytes=dtype.param_bytes)
    local = sum(counts.counts)
    sync = s.dp_sync
    all_reduce = isinstance(sync, AllReduceSync)
    reduce_bytes = grad_reduce_dtype(dtype, s).grad_bytes
    bucket = None if layout.bucket_bytes is None else layout.bucket_bytes // reduce_bytes  # elements
    buffers = buffer_bytes(local_params=local, largest_block=largest, zero=s.zero, dtype=dtype, framework=framework,
                           gradient_as_bucket_view=s.gradient_as_bucket_view, bucket_elements=bucket,
                           overlap_grad_reduce=all_reduce and sync.overlap_grad_reduce, all_reduce=all_reduce,
                           mixed_precision=mixed, reduce_bytes=reduce_bytes, holds_grads=kept)
    if s.resolved_fp8_recipe is not None and blocks:
        block_numel = sum(numel(d) for _, d in layer_param_shapes(model, blocks[0], tp))
        buffers = with_fp8(buffers, model, layout, tuple(blocks), largest, block_numel, dev.fp8_transpose)
    # under autocast the states keep no fp32 master (state_dtype): the optimizer bytes are the two moments
    step = optimizer_step_bytes(impl=s.resolved_optimizer_impl(foreach_device=dev.cuda),
                                moment_bytes=placed.gpu.optimizer_bytes,
                                largest_moment_bytes=max(counts.counts) * ADAM_STATE_BYTES)
    # one set of autocast's weight copies; _stage multiplies it by the micro-batches in flight
    buffers = replace(buffers, optimizer_step_bytes=step,
                      autocast_weights_bytes=cast_weight_bytes(shapes, dtype=dtype,
                                                               autocast=autocast_of(framework, mixed)))
    return blocks, placed, buffers


def _states_key(model, layout: ParallelLayout) -> tuple:
    """What :func:`_states` depends on besides the stage (its layer indices: the split and pp)."""
    s = layout.strategy
    return (model, layout.tp, layout.pp, layout.dp_cp, layout.ep, layout.layers_per_stage, s.zero,
            s.offload, layout.partitioning, layout.framework, s.gradient_as_bucket_view, s.dp_sync,
            s.resolved_fp8_recipe, s.fp8_all_gather, s.resolved_mixed_precision, s.optimizer_impl,
            s.grad_reduce_dtype)


def _stage(model, cluster: Cluster, layout: ParallelLayout, stage: int, cache: dict | None,
           acts: LayoutActivations | None = None) -> StageMemory:
    """``cache``: this layout's states by stage (the caller's dict under :func:`_states_key`), or None;
    ``acts``: the layout's :func:`layout_activations` (a transformer's; None: computed per stage)."""
    dev = device_key(cluster.device)
    if cache is None:
        blocks, placed, buffers = _states(model, layout, stage, dev)
    else:
        if (stage, dev) not in cache:
            cache[stage, dev] = _states(model, layout, stage, dev)
        blocks, placed, buffers = cache[stage, dev]
    if buffers.autocast_weights_bytes:
        buffers = replace(buffers, autocast_weights_bytes=buffers.autocast_weights_bytes * _cast_copies(layout, stage))
    stage_acts = stage_activations(model, layout, stage, acts) if model.has_activation_shapes else None
    act_gpu = stage_acts.gpu_bytes if stage_acts else 0.0
    runtime = runtime_bytes(cluster.device, layout, transient_bytes=act_gpu + buffers.total_bytes)
    return StageMemory(stage=stage, blocks=len(blocks), placed=placed, activations=stage_acts, buffers=buffers,
                       runtime=runtime)


def _cast_copies(layout: ParallelLayout, stage: int) -> float:
    """Sets of autocast weight copies alive at the stage's peak: one per micro-batch in flight, whose
    backward will read them; one under full recomputation, whose forward saves none (the cache alone
    holds them until the forward's autocast region exits) (:mod:`simulator.memory.autocast`)."""
    return 1.0 if layout.strategy.recompute is Recompute.FULL else in_flight(layout, stage)[0]


def _notes(model, stages: list[StageMemory], layout: ParallelLayout) -> tuple[str, ...]:
    notes = []
    if not model.has_activation_shapes:
        notes.append("a bare parameter count: activations and ZeRO-3 gathered blocks are not modelled; "
                     "give --model for them")
        return tuple(notes)
    scores = max(st.activations.scores_bytes for st in stages)
    if scores > 0.25 * max(st.activations_bytes for st in stages):
        notes.append(f"eager attention scores (s x s per head) are {scores / GB:.1f} GB of activations; "
                     "FlashAttention (--attention flash) or --recompute selective does not keep them")
    split = layout.layers_per_stage
    if len(split) > 1 and len(set(split)) > 1:
        notes.append(f"{model.layers} layers over {len(split)} stages split unevenly: {', '.join(map(str, split))}")
    return tuple(notes)


def checked_inputs(model, cluster: Cluster, layout: ParallelLayout | Strategy) -> ParallelLayout:
    """The layout (a :class:`Strategy` laid out over the whole cluster), or the error that a model, layout
    or cluster the memory model cannot size raises."""
    if isinstance(layout, Strategy):
        layout = build_layout(layout, cluster, model)
    elif not isinstance(layout, ParallelLayout):
        raise SpecError("layout", f"must be a ParallelLayout or a Strategy, got {type(layout).__name__}")
    s = layout.strategy
    if cluster.node.host is None and (s.offload is not Offload.NONE or s.offload_activations):
        raise SpecError("host", f"cluster {cluster.name} has no host section; offload needs host.cpu_memory_GB "
                        "(and host.nvme_GB for nvme), see docs/clusters.md")
    if not model.has_activation_shapes and model.layer_count is not None:
        raise SpecError("model", "the memory model needs a transformer (preset or config.json) or --params")
    return layout


def memory_report(model: TransformerSpec | ParamCountModel, cluster: Cluster,
                  layout: ParallelLayout | Strategy, *, cache: dict | None = None) -> MemoryReport:
    """Per-rank memory of ``model`` trained with ``layout`` on ``cluster`` (see module docstring).

    A :class:`Strategy` is laid out first (:func:`build_layout` over the whole cluster), so the memory
    report and the step estimate of one strategy always see the same layout. ``cache``: a dict the
    caller keeps across calls (a planner's search) to share each stage's model states and buffers
    between layouts that differ only in what decides activations.
    """
    layout = checked_inputs(model, cluster, layout)
    host = cluster.node.host
    own = None if cache is None else cache.setdefault(_states_key(model, layout), {})
    acts = layout_activations(model, layout) if model.has_activation_shapes else None  # once, not per stage
    stages = [_stage(model, cluster, layout, k, own, acts) for k in range(layout.pp)]
    return MemoryReport(
        model_name=model.name, layout=layout, seq=model.seq_len if model.has_activation_shapes else None, device_name=cluster.device.name,
        device_memory_bytes=cluster.device.memory_bytes,
        ranks_per_node=min(layout.world_size, cluster.node.gpus_per_node),
        host_capacity_bytes=host.cpu_memory_bytes if host else None,
        nvme_capacity_bytes=host.nvme_bytes if host else None,
        stages=tuple(stages), notes=_notes(model, stages, layout))
