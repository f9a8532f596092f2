"""Host time of a rank's training loop per step, outside every phase the executor times.

Each step of a rank runs, besides its forward, backward, optimizer and communication, the loop's own Python: it
takes the step's batch and the replica's samples, slices the micro-batches, enters and leaves the accumulation
context, zeroes the gradients; and its first micro-batch's forward, right after the step's barrier and the
previous step's bookkeeping, finds code and data cold and costs more than the later ones (docs/validation.md,
"Per-operator host time in the rank's step"). Per step and rank

    t_loop = (Host.step_loop_us + Host.first_microbatch_cold_us) · 1e-6 · share

with ``share`` the processes per host core (:func:`simulator.host_overhead.core_share`), both measured by
``trainplan calibrate --compute`` on the tiny model's step (:mod:`executor.step_bench`), whose steps follow the
executor's own between-step work (the gather, the status files and rank 0's step-journal line:
``executor.run_record.between_steps``) [src: own-step-loop-probe]. A third term, ``Host.step_after_save_us``, priced
the step after the executor's whole-file results rewrite between steps (2026-11-25, ddp16); the executor no longer
rewrites between steps (2026-11-26, cal19: docs/validation.md), so the term is retired (a cluster file stating it
still loads; the value is ignored). It is charged once per step with the optimizer step
(:func:`simulator.compile.step.stage_work`), which both engines read. On an ``async`` device (a GPU) 0: the loop's
Python runs while the device's queued kernels do, and the GPU presets do not state the terms.

One figure for every family, checked against what each of the executor's loops runs (2026-11-25, pipe15,
``benchmarks/loop_parts.py`` [src: own-loop-parts-probe]): every runner takes the batch and its replica's share
(~55-75 µs); the data-parallel runner zeroes with ``zero_grad(set_to_none=False)``, the tensor and pipeline runner
with ``set_to_none=True`` (within ~15 µs of each other); the parameter-server worker resets its gradients by
assignment (~5-10 µs, no optimizer on the rank), times its batch inside its ``forward`` phase, and adds its own
flatten, message and write-back (~145-190 µs, in its ``dp`` phase), so its loop is within ~0.1 ms of the others'.
The one part that differed by more, the data-parallel runner's exposed-sync hook (~0.15 ms per step with overlapped
reduction), was the executor's own clock; the executor no longer registers it (the exposed sync is stamped from
DDP's comm hook at its last bucket, :func:`executor.strategies.ddp_sync.backward_with_exposed_sync`), so no
family-specific term was charged until 2026-11-26.

FSDP2 (fsdp29, 2026-11-26): where FSDP2 wraps the model (``layout.framework`` FSDP2) the executor's data-parallel
loop also calls ``set_requires_gradient_sync`` on the root before each of the step's m micro-batches (a walk over
every FSDP module) and zeroes DTensor shards' gradients, each ``zero_`` a DTensor dispatch; per step it adds

    t_fsdp2 = (m · Host.fsdp2_sync_switch_us + Host.fsdp2_zero_grad_us) · 1e-6 · share

both measured by the same probe on the model under the executor's FSDP2 ZeRO-3 wrap [src: own-fsdp2-loop-probe]
(docs/validation.md, fsdp29: 0.08-0.11 ms per switch call and 0.26-0.43 ms of ``zero_grad`` against DDP's
0.09-0.12 ms in the executor's own zero2 / zero3 runs).
"""

from __future__ import annotations

from simulator.cluster.spec import Cluster, KernelDispatch


def step_loop_s(cluster: Cluster, share: float = 1.0, layout=None) -> float:
    """Seconds the loop adds to each step of a rank (the module docstring's formulas: ``t_loop``, and ``t_fsdp2``
    where ``layout`` is given and FSDP2 wraps its model); 0 without a host section, on an ``async`` device, or where
    the terms are 0."""
    host = cluster.node.host
    if host is None or cluster.device.kernel_dispatch is not KernelDispatch.INLINE:
        return 0.0
    return (host.step_loop_us + host.first_microbatch_cold_us + fsdp2_loop_us(host, layout)) * 1e-6 * share


def first_cold_s(cluster: Cluster, share: float = 1.0) -> float:
    """The part of :func:`step_loop_s` that is the first micro-batch's cold forward, ``first_microbatch_cold_us ·
    1e-6 · share``: the executor times it inside its ``forward`` phase (the probe reads it as forward_1 − the later
    forwards' mean, :mod:`executor.step_bench`), while the rest of the loop is outside every phase; 0 where
    :func:`step_loop_s` charges nothing."""
    host = cluster.node.host
    if host is None or cluster.device.kernel_dispatch is not KernelDispatch.INLINE:
        return 0.0
    return host.first_microbatch_cold_us * 1e-6 * share


def fsdp2_loop_us(host, layout) -> float:
    """µs FSDP2's loop adds per step (``t_fsdp2`` of the module docstring, before the core share): m switch calls
    and the shards' ``zero_grad`` surcharge; 0 where ``layout`` is None or FSDP2 does not wrap its model."""
    from simulator.strategy.framework import Framework

    if layout is None or layout.framework is not Framework.FSDP2:
        return 0.0
    return layout.micro_batches * host.fsdp2_sync_switch_us + host.fsdp2_zero_grad_us
