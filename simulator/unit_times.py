"""Times from the per-kernel roofline (:func:`simulator.compute.rates_for`) for what is not a transformer's op list:
the compiled work units of a chunk (:func:`unit_times`, :func:`unit_host_split`: each phase one stream of kernels
plus its host calls, :mod:`simulator.host_overhead`) and a generic layer list (:func:`layer_list_times`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.cluster.spec import Device
from simulator.compute import Phase, rates_for
from simulator.kernel_roofline import Bound
from simulator.host_overhead import host_calls, stream_s
from simulator.workload.chunks import layer_kernel
from simulator.workload.kinds import DtypePolicy
from simulator.workload.layers import LayerListWorkload
from simulator.workload.protocol import WorkUnit


@dataclass(frozen=True, kw_only=True)
class LayerTime:
    """One row for a generic layer list: a layer in one phase."""

    layer: str
    phase: Phase
    flops: float
    bytes: float
    time_s: float
    bound: Bound


def layer_list_times(workload: LayerListWorkload, device: Device, micro_batch: int) -> list[LayerTime]:
    """Roofline per layer of a generic workload: forward reads the weights and writes the activations
    (``params·param_bytes + b·activation_bytes``); backward is 2× the FLOPs and 2× the bytes
    (:func:`simulator.workload.chunks.layer_kernel`)."""
    rates = rates_for(workload.dtype, device)
    rows = []
    for phase, factor in ((Phase.FWD, 1), (Phase.BWD, 2)):
        for layer in workload.layers:
            kernel = layer_kernel(layer, micro_batch, workload.dtype, factor)
            t, bound = rates.time(kernel)
            rows.append(LayerTime(layer=layer.name, phase=phase, flops=kernel.flops, bytes=kernel.bytes, time_s=t,
                                  bound=bound))
    return rows


def unit_phase_sums(unit: WorkUnit, device: Device, dtype: DtypePolicy) -> tuple[tuple[float, int], ...]:
    """Per phase (forward, backward, recompute) of one repetition of ``unit``: (Σ of its kernels' roofline seconds,
    its :func:`host_calls`), what :func:`unit_times` and :func:`unit_host_split` both read; each kernel timed once
    (a compiled chunk asks both, :func:`simulator.compile.compute_part.chunk_compute`)."""
    rates = replace(rates_for(dtype, device), overhead_s=0.0)
    return tuple((sum(sum(rates.time(k)[0] for k in kernels) for kernels in ops), host_calls(device, ops))
                 for ops in (unit.fwd, unit.bwd, unit.recompute))


def unit_host_split(unit: WorkUnit, device: Device, dtype: DtypePolicy,
                    sums: tuple[tuple[float, int], ...] | None = None) -> tuple[tuple[float, float], ...]:
    """(device seconds, host seconds) of one repetition of ``unit`` per phase (forward, backward, recompute):
    the kernels' roofline times and their :func:`host_calls` × the phase's ``Device.call_overhead_us``, before
    time-sharing. ``sums``: :func:`unit_phase_sums` of the same arguments, if already read."""
    sums = unit_phase_sums(unit, device, dtype) if sums is None else sums
    return tuple((device_s, calls * device.call_overhead_us(backward) * 1e-6)
                 for (device_s, calls), backward in zip(sums, (False, True, False)))


def unit_times(unit: WorkUnit, device: Device, dtype: DtypePolicy, share: float = 1.0,
               sums: tuple[tuple[float, int], ...] | None = None) -> tuple[float, float, float]:
    """(forward, backward, recompute) seconds of one repetition of ``unit``: each phase one stream of
    kernels (:func:`simulator.host_overhead.stream_s`): device time the sum of its kernels' roofline
    times, host time its :func:`host_calls` × the phase's ``Device.call_overhead_us``, added on an ``inline``
    device (as :func:`simulator.compute.total_time` adds the rows of :func:`simulator.compute.layer_times`), the
    larger of the two on an ``async`` one;
    ``share``: processes per host core (:func:`simulator.host_overhead.core_share`). ``sums``:
    :func:`unit_phase_sums` of the same unit, device and dtype, if already read."""
    sums = unit_phase_sums(unit, device, dtype) if sums is None else sums
    fwd, bwd, rec = (stream_s(device, device_s, calls, share, per_call_us=device.call_overhead_us(backward))
                     for (device_s, calls), backward in zip(sums, (False, True, False)))
    return fwd, bwd, rec
