"""Validate compares model states as the run measures them: at rest after the last step (``executor/run.py`` reads
``model_state_bytes()`` once the loop ends). Under FSDP2 ZeRO-2 (``reshard_after_forward=False``) the unsharded
parameters live only from forward to the end of backward, so at rest a rank holds ZeRO-3's shards (the recorded
zero2 run of 2026-11-25 17:00 UTC measured 60,160 + 60,160 + 120,432 = 240,752 B per rank, as zero3 did)."""

from __future__ import annotations

from types import SimpleNamespace

from simulator.memory.states import ModelStateBytes, model_state_bytes
from simulator.strategy.framework import Framework
from simulator.strategy.kinds import ZeroStage
from simulator.validate import _estimated_states
from simulator.workload.kinds import DtypePolicy

# the suite's tiny gpt3-125m: 30,080 fp32 parameters in 28 tensors, dp 2 (tests/test_zero1_broadcasts.py)
LAYER = [(32,), (32,), (96, 32), (96,), (32, 32), (32,), (32,), (32,), (128, 32), (128,), (32, 128), (32,)]
SHAPES = [("t", s) for s in [(128, 32), (16, 32)] + LAYER * 2 + [(32,), (32,)]]


def _placed(states: ModelStateBytes):
    placed = SimpleNamespace(gpu=states, host_params_bytes=0, host_grads_bytes=0, host_optimizer_bytes=0)
    return SimpleNamespace(memory=SimpleNamespace(worst=SimpleNamespace(placed=placed)))


def test_fsdp2_zero2_states_at_rest_are_zero3s():
    """By hand: each rank's shard is 15,040 elements (every tensor's dim 0 halves: 60,160 B), grads the same,
    AdamW 2 × 60,160 + 28 step counters × 4 B = 120,432 B; the peak adds the gathered copy (2 × 60,160 B)."""
    kw = dict(dp=2, dtype=DtypePolicy.FP32, framework=Framework.FSDP2)
    zero2 = model_state_bytes(SHAPES, zero=ZeroStage.ZERO2, **kw)
    zero3 = model_state_bytes(SHAPES, zero=ZeroStage.ZERO3, **kw)
    assert zero2.params_bytes == 180_480 and zero2.params_at_rest_bytes == 60_160
    assert zero2.total_bytes == 361_072  # what validate compared before: +50.0 % against the run
    assert _estimated_states(_placed(zero2)) == 240_752 == _estimated_states(_placed(zero3))
