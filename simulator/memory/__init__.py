"""Per-rank GPU, host and NVMe memory of a training layout: model states under ZeRO 0-3 and
offload, activations (Korthikanti et al. 2022) per pipeline stage, temporary buffers and the
runtime's own memory (CUDA context, cuBLAS workspaces, NCCL buffers, the allocator's reserve), as
allocated / reserved / device peaks with a fits verdict (``docs/memory.md``).

The layout comes from :mod:`simulator.strategy` (one Strategy, one ParallelLayout for every
consumer); :class:`ZeroStage`, :class:`Partitioning`, :class:`Framework`, :func:`resolve_framework`,
:class:`Offload` and :class:`ScheduleKind` are re-exported from there for convenience. Public API:
:func:`transformer_param_shapes`, :func:`stage_param_shapes`, :func:`stage_layers`;
:class:`ModelStateBytes`, :func:`model_state_bytes`, :func:`partition_numels`,
:func:`dim0_real_numels`, :func:`step_tensors`; :func:`layer_activation`, :func:`layout_activations`, :func:`stage_activations`; :func:`buffer_bytes`; :func:`runtime_bytes`;
:func:`place_states`; :class:`MemoryReport`, :class:`StageMemory`, :func:`memory_report`.
"""

from simulator.memory.activations import LayerActivation, StageActivations, in_flight, layer_activation
from simulator.memory.buffers import BufferBytes, buffer_bytes
from simulator.memory.offload import HOST_BUFFER_FACTOR, PlacedStates, place_states
from simulator.memory.report import MemoryReport, StageMemory, memory_report
from simulator.memory.runtime import RuntimeBytes, runtime_bytes
from simulator.memory.shapes import stage_layers, stage_param_shapes, transformer_param_shapes
from simulator.memory.stage_acts import LayoutActivations, layout_activations, stage_activations
from simulator.memory.states import (ModelStateBytes, dim0_real_numels, model_state_bytes,
                                     optimizer_bytes_per_param, partition_numels, step_tensors,
                                     whole_tensor_assignment)
from simulator.schedules import ScheduleKind
from simulator.strategy.framework import Framework, Partitioning, resolve_framework
from simulator.strategy.kinds import Offload, ZeroStage

__all__ = [
    "BufferBytes", "Framework", "dim0_real_numels", "resolve_framework", "step_tensors", "HOST_BUFFER_FACTOR", "LayerActivation", "LayoutActivations",
    "MemoryReport", "ModelStateBytes", "Offload", "Partitioning", "PlacedStates",
    "ScheduleKind", "StageActivations", "StageMemory", "ZeroStage", "buffer_bytes", "in_flight",
    "layer_activation", "layout_activations", "memory_report", "model_state_bytes", "optimizer_bytes_per_param", "RuntimeBytes", "runtime_bytes",
    "partition_numels", "place_states", "stage_activations", "stage_layers",
    "stage_param_shapes", "transformer_param_shapes", "whole_tensor_assignment",
]
