"""torch.utils.checkpoint's host time per region in a rank's DDP step (executor/step_checkpoint_bench.py).

Hand-worked, 2 blocks: forward 0.70 / 0.74 ms per micro-batch checkpointed against 0.40 / 0.44 plain gives
(0.72 − 0.42) / 2 = 150 µs per region; backward 1.60 / 1.64 against 0.60 / 0.64 ms, less a recompute of 135 µs per
block, gives (1.62 − 0.62) / 2 − 0.135 = 0.365 ms = 365 µs; a checkpointed step faster than the plain gives 0. Two
gloo ranks run the interleaved probe."""

from __future__ import annotations

import dataclasses

import pytest

from executor.compute_bench import Timing
from executor.compute_grid import executed, tiny_model
from executor.step_checkpoint_bench import (StepCheckpointTiming, step_checkpoint_dict, step_checkpoint_line,
                                            time_step_checkpoint, with_recompute, with_step_checkpoint)
from simulator.cluster.io import load_cluster
from simulator.workload import DtypePolicy, load_model


def _t(ms: float) -> Timing:
    return Timing(median_s=ms * 1e-3, p10_s=ms * 1e-3, p90_s=ms * 1e-3)


def _timing(ck_fwd=(0.70, 0.74), ck_bwd=(1.60, 1.64)) -> StepCheckpointTiming:
    return with_recompute(StepCheckpointTiming(blocks=2, plain_forward=(_t(0.40), _t(0.44)),
                                               checkpointed_forward=tuple(map(_t, ck_fwd)),
                                               plain_backward=(_t(0.60), _t(0.64)),
                                               checkpointed_backward=tuple(map(_t, ck_bwd))), 135e-6)


def test_the_terms_are_the_checkpointed_step_less_the_plain_per_region():
    t = _timing()
    assert t.forward_region_us == pytest.approx(150.0, rel=1e-9)
    assert t.backward_region_us == pytest.approx(365.0, rel=1e-9)
    fast = _timing(ck_fwd=(0.30, 0.30), ck_bwd=(0.70, 0.70))  # 40 µs per region above plain: below the recompute
    assert (fast.forward_region_us, fast.backward_region_us) == (0.0, 0.0)
    assert "150.0 us per region forward" in step_checkpoint_line(t)
    assert step_checkpoint_dict(t)["checkpoint_backward_region_us"] == pytest.approx(365.0)
    assert step_checkpoint_dict(None) is None and with_recompute(None, 1e-4) is None


def test_the_writer_replaces_both_checkpoint_fields_only():
    node = load_cluster("localhost-cpu").node
    written = with_step_checkpoint(node, _timing())
    assert (written.host.checkpoint_forward_region_us, written.host.checkpoint_backward_region_us) == pytest.approx(
        (150.0, 365.0))
    assert written == dataclasses.replace(node, host=dataclasses.replace(
        node.host, checkpoint_forward_region_us=written.host.checkpoint_forward_region_us,
        checkpoint_backward_region_us=written.host.checkpoint_backward_region_us))
    assert with_step_checkpoint(node, None) is node


def test_two_ranks_alternate_the_plain_and_the_checkpointed_model():
    spec = executed(tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32))
    t = time_step_checkpoint(spec, 2, repeats=3, warmup=1)
    assert t.blocks == spec.layers == 2
    every = t.plain_forward + t.checkpointed_forward + t.plain_backward + t.checkpointed_backward
    assert len(every) == 8 and all(x.p10_s <= x.median_s <= x.p90_s and x.median_s > 0 for x in every)
    assert t.recompute_region_s == 0.0 and t.forward_region_us >= 0.0
