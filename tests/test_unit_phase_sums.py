"""A unit's kernels timed once for both of its answers (simulator/unit_times.py ``unit_phase_sums``), and the even
layer split built as runs (simulator/strategy/layer_split.py ``even_split``): each equal, to the bit, to the formula it
replaces, written out here as it stood (the reference; cold21, docs/planner.md)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.compute import rates_for
from simulator.host_overhead import host_calls, stream_s
from simulator.strategy.layer_split import even_split
from simulator.unit_times import unit_host_split, unit_phase_sums, unit_times
from simulator.workload import ChunkSlice, ComputeOptions, DtypePolicy, Recompute, get_preset


def _reference(unit, device, dtype, share):
    """unit_times and unit_host_split as written before the sums were shared: each times every kernel itself."""
    rates = dataclasses.replace(rates_for(dtype, device), overhead_s=0.0)

    def device_s(ops):
        return sum(sum(rates.time(k)[0] for k in kernels) for kernels in ops)

    phases = ((unit.fwd, False), (unit.bwd, True), (unit.recompute, False))
    times = tuple(stream_s(device, device_s(ops), host_calls(device, ops), share,
                           per_call_us=device.call_overhead_us(bw)) for ops, bw in phases)
    split = tuple((device_s(ops), host_calls(device, ops) * device.call_overhead_us(bw) * 1e-6) for ops, bw in phases)
    return times, split


def _units(dtype: DtypePolicy | None):
    """The units of a first, a middle and a last chunk of two models under recompute none and full (in ``dtype``;
    None: the model's own)."""
    for model in ("gpt3-175b", "llama2-7b"):
        workload = get_preset(model)
        workload = workload if dtype is None else dataclasses.replace(workload, dtype=dtype)
        for recompute in (Recompute.NONE, Recompute.FULL):
            options = ComputeOptions(micro_batch=2, tp=2, recompute=recompute)
            for index in (0, 1, 2):
                load = workload.chunk_load(ChunkSlice(index=index, count=3, start=0, layers=2), options)
                for _, unit in load.units:
                    yield workload.dtype, unit


def test_shared_sums_equal_each_answer_timing_its_own_kernels():
    # dgx-a100: async dispatch; localhost-cpu: inline dispatch, a backward call overhead of its own where given
    for preset, dtype in (("dgx-a100", None), ("localhost-cpu", DtypePolicy.FP32)):
        device = load_preset(preset, 1).device
        for dtype, unit in _units(dtype):
            for share in (1.0, 2.5):
                times, split = _reference(unit, device, dtype, share)
                sums = unit_phase_sums(unit, device, dtype)
                assert unit_times(unit, device, dtype, share, sums) == times
                assert unit_times(unit, device, dtype, share) == times
                assert unit_host_split(unit, device, dtype, sums) == split
                assert unit_host_split(unit, device, dtype) == split


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 400), st.integers(1, 400))
def test_even_split_is_the_rule_stage_by_stage(layers, stages):
    if stages > layers:
        return
    base, extra = divmod(layers, stages)
    assert even_split(layers, stages) == tuple(base + (1 if 1 <= i <= extra else 0) for i in range(stages))
