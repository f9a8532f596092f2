"""Host time of torch's pipeline schedule runtime, per action of a rank's list.

Where torch runs the pipeline (torch DDP or FSDP2 with pp > 1: ``torch.distributed.pipelining``'s
``_PipelineScheduleRuntime``, as :mod:`executor.strategies.pipeline` loads it), every action of a rank's list costs
host time outside its kernels and transfers: the loop's dispatch and profiler range, the stage's bookkeeping, the
building of each p2p op list [src: torch-pipelining]. The list holds, per stage and step (``_add_send_recv`` and
``_add_unshard_reshard`` / ``_add_reduce_grad`` of ``schedules.py``, torch 2.13):

- each compute action (F or B of one micro-batch), with the receive before it and the send after it where the
  neighbouring stage exists (a forward receives unless its stage is first and sends unless it is last, a backward
  the other way round): :func:`pipeline_actions` per forward and per backward;
- :data:`STEP_ACTIONS_PER_STAGE` more per stage and step: ``UNSHARD``, ``REDUCE_GRAD`` (the stage's gradients
  scaled by 1/m, ``scale_grads``) and ``RESHARD``: :func:`step_actions`.

Each costs ``Host.pipeline_action_us`` (measured by ``trainplan calibrate --compute``,
:mod:`executor.pipeline_host_bench`) [src: own-pipeline-action-probe]: the per-micro-batch ones are charged in the
chunk's forward and backward (:func:`simulator.framework_host.with_host_modules`), the per-step ones after the last
backward with the optimizer step (:func:`step_host_s`), where ``REDUCE_GRAD`` runs. Both engines read those times.
"""

from __future__ import annotations

from simulator.cluster.spec import Cluster, KernelDispatch

STEP_ACTIONS_PER_STAGE = 3
"""Actions torch's runtime adds once per stage and step: ``UNSHARD`` before its first compute action,
``REDUCE_GRAD`` after its last backward, ``RESHARD`` at the end (``_PipelineScheduleRuntime._load_csv`` through
``_add_unshard_reshard`` and ``_add_reduce_grad``, torch 2.13) [src: torch-pipelining]."""


def torch_pipeline(layout) -> bool:
    """Whether torch's schedule runtime runs the pipeline: pp > 1 under torch DDP or FSDP2 (Megatron-LM's and
    DeepSpeed's pipelines are their own engines, not modelled here)."""
    from simulator.strategy.framework import Framework

    return layout.pp > 1 and layout.framework in (Framework.TORCH_DDP, Framework.FSDP2)


def pipeline_actions(layout, chunk) -> int:
    """Actions the runtime runs per forward (and per backward) of ``chunk`` (a :class:`simulator.workload.ChunkSlice`):
    the compute action, plus a receive unless the chunk is the first stage and a send unless it is the last (the
    module docstring); 0 unless :func:`torch_pipeline`. With pp > 1 two neighbouring stages are never on one rank
    (looped placement), so every neighbour is reached by a send."""
    if not torch_pipeline(layout):
        return 0
    return 1 + (1 if chunk.index > 0 else 0) + (1 if chunk.index < chunk.count - 1 else 0)


def p2p_actions(layout, chunk) -> int:
    """Sends and receives among :func:`pipeline_actions` (all but the compute action): each posts one p2p op
    (``_batch_p2p``), whose host time is ``Host.pipeline_p2p_post_us``; 0 unless :func:`torch_pipeline`."""
    return max(0, pipeline_actions(layout, chunk) - 1)


def chunk_host_us(host, layout, chunk) -> tuple[float, float]:
    """(per-action, posting) µs the runtime adds to each forward (and each backward) of ``chunk``:
    :func:`pipeline_actions` × ``Host.pipeline_action_us`` and :func:`p2p_actions` × ``Host.pipeline_p2p_post_us``
    (before the core share); the executor's clock puts the first outside every phase and the second in ``pp``."""
    return (pipeline_actions(layout, chunk) * (host.pipeline_action_us or 0.0),
            p2p_actions(layout, chunk) * (host.pipeline_p2p_post_us or 0.0))


def chunk_parts_s(cluster: Cluster, layout, c: int, scale: float) -> dict[str, float]:
    """``ChunkWork.runtime_outside_s`` / ``runtime_post_s`` of chunk ``c``: the parts of its forward (and backward)
    that are the runtime's actions and posts (:func:`chunk_host_us`) × the core share and slowest-rank gain
    (``scale``), as :func:`simulator.framework_host.with_host_modules` adds them; none on an ``async`` device or
    without a pipeline."""
    from simulator.workload import ChunkSlice

    host = cluster.node.host
    if host is None or cluster.device.kernel_dispatch is not KernelDispatch.INLINE or not torch_pipeline(layout):
        return {}
    chunk = ChunkSlice(index=c, count=layout.pp * layout.v, start=sum(layout.layers_per_stage[:c]),
                       layers=layout.layers_per_stage[c])
    action_us, post_us = chunk_host_us(host, layout, chunk)
    return {"runtime_outside_s": action_us * 1e-6 * scale, "runtime_post_s": post_us * 1e-6 * scale}


def step_actions(layout) -> int:
    """Per-step actions of one rank: :data:`STEP_ACTIONS_PER_STAGE` for each of its ``v`` stages; 0 unless
    :func:`torch_pipeline`."""
    return STEP_ACTIONS_PER_STAGE * layout.v if torch_pipeline(layout) else 0


def step_host_s(cluster: Cluster, layout, share: float = 1.0) -> float:
    """Seconds the per-step actions add to a rank's step (charged with its optimizer step): :func:`step_actions`
    × ``Host.pipeline_action_us`` × ``share`` (:func:`simulator.host_overhead.core_share`); on an ``async`` device
    (a GPU) 0, since the device's optimizer kernels are queued behind them and a few host actions do not outlast
    them there (the chunk terms take the larger of phase and host time)."""
    host = cluster.node.host
    if host is None or not host.pipeline_action_us or cluster.device.kernel_dispatch is not KernelDispatch.INLINE:
        return 0.0
    return step_actions(layout) * host.pipeline_action_us * 1e-6 * share
