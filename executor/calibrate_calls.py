"""Step 3 of ``trainplan calibrate --compute`` (:mod:`executor.calibrate_compute`): the host time per call from
one timed block, by the formula the compute model charges every kernel with.

On an ``inline`` device (the CPU) with the block's forward and backward timed apart, per phase

    kernel_launch_overhead_us = (t_fwd − roofline_fwd) / calls_fwd
    backward_call_overhead_us = (t_bwd − roofline_bwd) / calls_bwd

with the calls the operators eager torch dispatches (``Kernel.dispatches``,
:mod:`simulator.workload.eager_dispatch`) and one more in backward: the bench's leaf input's ``.grad``
accumulation. Without the phases, one figure for both from the whole block. On an ``async`` device (a GPU) a
host-bound block gives ``o = t_block / launches``; a device-bound one only bounds ``o`` (the base's kept).

On the CPU the fields are then taken from the whole model timed in a rank's step instead
(:func:`step_call_overheads`, :mod:`executor.step_bench`): the block's tight loop stays in the report.
"""

from __future__ import annotations

from dataclasses import replace

from executor.compute_bench import Timing
from simulator.cluster.spec import Device, KernelDispatch
from simulator.compute import Phase, edge_times, layer_times, total_time
from simulator.host_overhead import host_calls
from simulator.workload.eager_dispatch import ACCUMULATE_GRAD
from simulator.workload.ops import edge_work, layer_work
from simulator.workload.transformer import TransformerSpec


def block_call_overheads(base: Device, device: Device, spec: TransformerSpec, micro_batch: int, block: Timing,
                         phases: tuple[Timing, Timing] | None) -> tuple[Device, int, float]:
    """``device`` (calibrated rates, no host time yet) with its per-call fields from the timed ``block`` of ``spec``
    (as the executor runs it), its host calls and its roofline seconds (module docstring); ``base``: the figure a
    device-bound GPU block keeps."""
    rows = layer_times(spec, device, micro_batch)
    roofline = total_time(rows)
    works = layer_work(spec, micro_batch)
    inline = device.kernel_dispatch is KernelDispatch.INLINE
    calls = (host_calls(device, tuple(w.fwd for w in works)),
             host_calls(device, tuple(w.bwd for w in works)) + (ACCUMULATE_GRAD if inline else 0))
    total = sum(calls)
    if inline and phases is not None:  # t_phase = roofline_phase + calls_phase · o_phase
        fwd_us, bwd_us = (max(0.0, (t.median_s - total_time(rows, phase)) / n * 1e6)
                          for t, phase, n in zip(phases, (Phase.FWD, Phase.BWD), calls))
        return replace(device, kernel_launch_overhead_us=fwd_us, backward_call_overhead_us=bwd_us), total, roofline
    if inline:  # t_block = roofline + calls · o
        overhead_us = max(0.0, (block.median_s - roofline) / total * 1e6)
    elif block.median_s > roofline:  # async and host-bound: t_block = launches · o
        overhead_us = block.median_s / total * 1e6
    else:  # async and device-bound: the block says only o ≤ t_block / launches; keep the base's figure
        overhead_us = base.kernel_launch_overhead_us
    return replace(device, kernel_launch_overhead_us=overhead_us, backward_call_overhead_us=None), total, roofline


def model_calls_and_roofline(device: Device, spec: TransformerSpec, micro_batch: int
                             ) -> tuple[tuple[int, int], tuple[float, float]]:
    """((forward calls, backward calls), (forward roofline s, backward roofline s)) of one micro-batch through the
    whole model ``spec`` on ``device``: ``layers`` blocks plus the edges (embedding, final norm, head, loss), the
    calls by :func:`simulator.host_overhead.host_calls` (``Kernel.dispatches`` on an inline device: 78 / 159 for the
    suite's tiny GPT, ``benchmarks/eager_dispatch_count.py``); the roofline without host time (``device``'s
    per-call fields set to 0, as the rows would otherwise carry them)."""
    device = replace(device, kernel_launch_overhead_us=0.0, backward_call_overhead_us=0.0)
    block, edges = layer_work(spec, micro_batch), edge_work(spec, micro_batch)
    calls = tuple(spec.layers * host_calls(device, tuple(getattr(w, p) for w in block))
                  + host_calls(device, tuple(getattr(w, p) for w in edges)) for p in ("fwd", "bwd"))
    rows, edge_rows = layer_times(spec, device, micro_batch), edge_times(spec, device, micro_batch)
    roofline = tuple(spec.layers * total_time(rows, phase) + total_time(edge_rows, phase)
                     for phase in (Phase.FWD, Phase.BWD))
    return calls, roofline


def step_call_overheads(device: Device, spec: TransformerSpec, micro_batch: int, forward_s: float,
                        backward_s: float) -> Device:
    """``device`` with its per-operator fields from the whole model's forward and backward per micro-batch as a
    rank's step runs them (:class:`executor.step_timing.RankStepTiming`), by the formula the model charges:

        kernel_launch_overhead_us = (t_fwd − roofline_fwd(model)) / calls_fwd(model)
        backward_call_overhead_us = (t_bwd − roofline_bwd(model)) / calls_bwd(model)

    each at least 0 (:func:`model_calls_and_roofline`) [src: own-rank-step-probe]."""
    calls, roofline = model_calls_and_roofline(device, spec, micro_batch)
    fwd_us, bwd_us = (max(0.0, (t - r) / n * 1e6) for t, r, n in zip((forward_s, backward_s), roofline, calls))
    return replace(device, kernel_launch_overhead_us=fwd_us, backward_call_overhead_us=bwd_us)
