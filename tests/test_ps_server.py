"""``simulator.compile.ps_server``: the parameter server's AdamW step on its shard, charged to the worker."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.compile.offload_part import UNFUSED_ADAMW_ELEMENT_BYTES, UNFUSED_ADAMW_PASSES
from simulator.compute import achievable_hbm_Bps
from simulator.strategy import ParamServerSync, Strategy
from simulator.workload import DtypePolicy, get_preset


def _optimizer_s(cluster, model, shards: int) -> float:
    s = Strategy(global_batch=8, micro_batch=2, dp=2, dp_sync=ParamServerSync(shards=shards))
    return compile_step(cluster, model, s, memory=False).stages[0].optimizer_s


def test_the_server_update_is_its_shards_memory_passes_plus_one_tensors_calls():
    """On the CPU (an inline device: torch's per-tensor AdamW loop, 80 B per parameter: offload_part), a shard
    of params/k parameters: going from 1 to 2 shards removes params/2 × 80 B of passes at the achievable
    bandwidth, and the host calls of one tensor stay (so the update is more than its passes)."""
    cluster, model = load_preset("localhost-cpu", 1), replace(get_preset("gpt3-125m"), dtype=DtypePolicy.FP32)
    one, two = _optimizer_s(cluster, model, 1), _optimizer_s(cluster, model, 2)
    passes = model.params / 2 * UNFUSED_ADAMW_PASSES * UNFUSED_ADAMW_ELEMENT_BYTES / achievable_hbm_Bps(cluster.device)
    assert one - two == pytest.approx(passes, rel=1e-6)
    assert two > passes  # the half shard's own passes plus one tensor's calls: the update is not 0 any more
