"""What a planner needs of a memory report, computed over the pipeline stages as arrays.

A search reads two things of a layout's :class:`~simulator.memory.report.MemoryReport`: its most loaded
rank's device total (``worst.total_bytes``, the memory per GPU it ranks and prints) and its reasons not to
fit. :func:`memory_verdict` gives both without building a :class:`~simulator.memory.stage.StageMemory` per
stage: the model states and buffers per stage come from the report's own shared cache (one
``_states`` per stage and set of state inputs) and are kept as arrays there; the activations are the
report's (:func:`~simulator.memory.stage_acts.stage_activations`); the peaks are
:class:`StageMemory`'s, elementwise over the stages, each sum in its order::

    buffers   = grad_buckets + gathered + fp8 + autocast·copies        (BufferBytes.total_bytes)
    forward   = params + grads + optimizer + activations + buffers     (StageMemory.forward_peak_bytes)
    step      = params_after_step + grads + optimizer + grad_buckets + optimizer_step
    total     = (max(forward, step) + cuBLAS) + allocator slack + (CUDA context + NCCL buffers)

IEEE-754 addition, multiplication and max of float64 arrays round as Python's floats do, so every stage's
total is the report's bit for bit (``tests/test_memory_verdict.py``, on generated layouts). The worst rank
is the first stage with the largest total, as :attr:`MemoryReport.worst` picks it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.cluster.spec import Cluster
from simulator.memory.offload import HOST_BUFFER_FACTOR
from simulator.memory.report import (DeviceKey, _cast_copies, _states, _states_key, checked_inputs, device_key,
                                     memory_report, reasons)
from simulator.memory.runtime import runtime_bytes
from simulator.memory.stage import StageMemory
from simulator.memory.stage_acts import layout_activations, stage_activations
from simulator.strategy import ParallelLayout, Strategy


@dataclass(frozen=True)
class MemoryVerdict:
    """The most loaded rank's device bytes and stage, and why the layout does not fit (empty: it fits)."""

    total_bytes: float
    stage: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class _StateArrays:
    """Per stage, what the model states and buffers put into the peaks (one entry per pipeline stage)."""

    params: np.ndarray
    grads: np.ndarray
    optimizer: np.ndarray
    params_after_step: np.ndarray
    grad_buckets: np.ndarray
    gathered: np.ndarray
    held_grads: np.ndarray
    fp8: np.ndarray
    autocast: np.ndarray
    """One set of autocast weight copies (multiplied by the copies alive per stage)."""
    optimizer_step: np.ndarray
    host: list
    """Host bytes of the placed states (Python numbers, as :attr:`PlacedStates.host_bytes` gives them)."""
    nvme: list


def _state_arrays(model, layout: ParallelLayout, own: dict, dev: DeviceKey) -> _StateArrays:
    """The stages' states as arrays, read through :class:`StageMemory`'s own properties once per set of
    state inputs (``own``: the report cache's dict for them, which keeps each stage's ``_states``)."""
    key = ("arrays", dev)
    if key not in own:
        rows = []
        for k in range(layout.pp):
            if (k, dev) not in own:
                own[k, dev] = _states(model, layout, k, dev)
            blocks, placed, buffers = own[k, dev]
            st = StageMemory(stage=k, blocks=len(blocks), placed=placed, activations=None, buffers=buffers,
                             runtime=None)
            rows.append((st.params_bytes, st.grads_bytes, st.optimizer_bytes, st.params_after_step_bytes,
                         buffers.grad_buckets_bytes, buffers.gathered_params_bytes, buffers.held_grads_bytes,
                         buffers.fp8_weights_bytes,
                         buffers.autocast_weights_bytes, buffers.optimizer_step_bytes))
        cols = [np.array(c, dtype=float) for c in zip(*rows)]
        states = [own[k, dev][1] for k in range(layout.pp)]
        own[key] = _StateArrays(*cols, host=[p.host_bytes for p in states], nvme=[p.nvme_bytes for p in states])
    return own[key]


def memory_verdict(model, cluster: Cluster, layout: ParallelLayout | Strategy, *,
                   cache: dict | None = None) -> MemoryVerdict:
    """:class:`MemoryVerdict` of ``model`` trained with ``layout`` on ``cluster``: the same numbers and
    reasons as :func:`~simulator.memory.report.memory_report` (a bare parameter count goes through it);
    ``cache``: the dict a search shares with its reports (model states by state inputs)."""
    layout = checked_inputs(model, cluster, layout)
    if not model.has_activation_shapes:
        report = memory_report(model, cluster, layout, cache=cache)
        return MemoryVerdict(report.worst.total_bytes, report.worst.stage, report.reasons)
    own = {} if cache is None else cache.setdefault(_states_key(model, layout), {})
    a = _state_arrays(model, layout, own, device_key(cluster.device))
    shared = layout_activations(model, layout)
    acts = [stage_activations(model, layout, k, shared) for k in range(layout.pp)]
    act_gpu = np.array([x.gpu_bytes for x in acts], dtype=float)
    autocast = a.autocast
    if autocast.any():
        copies = np.array([_cast_copies(layout, k) for k in range(layout.pp)], dtype=float)
        autocast = np.where(autocast != 0, autocast * copies, autocast)
    buffers = a.grad_buckets + a.gathered + a.held_grads + a.fp8 + autocast
    runtime = runtime_bytes(cluster.device, layout, transient_bytes=act_gpu + buffers)
    forward = a.params + np.where(a.held_grads > 0, 0.0, a.grads) + a.optimizer + act_gpu + buffers  # StageMemory
    step = a.params_after_step + a.grads + a.optimizer + a.grad_buckets + a.optimizer_step
    total = np.maximum(forward, step) + runtime.cublas_workspace_bytes + runtime.allocator_slack_bytes \
        + runtime.outside_allocator_bytes
    worst = int(np.argmax(total))
    host_act = [x.host_checkpoint_bytes for x in acts]
    rank = max(range(layout.pp), key=lambda k: a.host[k] + host_act[k])
    per_node = min(layout.world_size, cluster.node.gpus_per_node)
    host_node = per_node * (a.host[rank] * HOST_BUFFER_FACTOR + host_act[rank])
    host = cluster.node.host
    why = reasons(worst, float(total[worst]), cluster.device.memory_bytes, host_node,
                  host.cpu_memory_bytes if host else None, per_node * max(a.nvme),
                  host.nvme_bytes if host else None)
    return MemoryVerdict(float(total[worst]), worst, why)
