"""FSDP2's copies on the compute stream (:mod:`simulator.compile.fsdp2_copies`) [src: torch-fsdp2-copies]: the
all-gather copy-out (read the gathered buffer, write the parameters) and the reduce-scatter copy-in (read the bf16
gradients, write the reduce-scatter input in ``reduce_dtype``), as memory-bound kernels; none under FSDP1's flat
parameters [src: torch-fsdp1-flat-param].

Hand-worked case: GPT-3 125M (h = 768, 12 blocks, vocabulary 50257, tied, learned positions 2048) on one dgx-h100
node, FSDP2 ZeRO-3 over dp 8. A block holds 12h² + 13h = 7,087,872 parameters, the edges (embedding, positions, final
norm) 50257·768 + 2048·768 + 2·768 = 40,171,776. One gather of the chunk moves 12·7,087,872·2 + 40,171,776·2 =
250,452,480 B, its copy-out reads and writes it: 500,904,960 B. The copy-in reads 2 B and writes 4 B (fp32 reduce,
torchtitan's default) per gradient: (12·7,087,872 + 40,171,776)·6 = 751,357,440 B. The preset's achievable HBM
bandwidth is 3350 GB/s × 0.866 = 2.9011e12 B/s: forward 172.66 µs, backward (a second copy-out under ZeRO-3 and the
copy-in) 431.65 µs per micro-batch.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import compile_step, step
from simulator.compile.costs import CostCache
from simulator.compile.fsdp2_copies import fsdp2_copies, fsdp2_copy_s
from simulator.errors import SpecError
from simulator.strategy import Framework, Strategy, ZeroStage, build_layout
from simulator.strategy.kinds import GradReduceDtype
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-h100"), get_preset("gpt3-125m")
FSDP2 = Strategy(global_batch=16, dp=8, zero=ZeroStage.ZERO3, framework=Framework.FSDP2)
HBM_BPS = 3350e9 * 0.866


def _copies(strategy: Strategy):
    layout, cache = build_layout(strategy, CLUSTER, MODEL), CostCache(CLUSTER)
    cc = step._chunk_compute(cache, MODEL, layout, 0)
    return cc, fsdp2_copies(MODEL, layout, cc), fsdp2_copy_s(cache, MODEL, layout, cc)


def test_hand_worked_bytes_and_seconds():
    cc, (out_b, in_b, bwd_gathers), (fwd_s, bwd_s) = _copies(FSDP2)
    assert (cc.layer_params, cc.edge_params, cc.blocks) == (7_087_872, 40_171_776, 12)
    assert (out_b, in_b, bwd_gathers) == (500_904_960, 751_357_440, 1.0)
    assert fwd_s == pytest.approx(500_904_960 / HBM_BPS, rel=1e-12)  # 172.66 µs
    assert bwd_s == pytest.approx((500_904_960 + 751_357_440) / HBM_BPS, rel=1e-12)  # 431.65 µs
    assert fwd_s == pytest.approx(172.66e-6, rel=1e-4) and bwd_s == pytest.approx(431.65e-6, rel=1e-4)


def test_zero2_gathers_once_and_a_bf16_reduce_copies_two_bytes():
    _, (out_b, in_b, bwd_gathers), (fwd_s, bwd_s) = _copies(replace(FSDP2, zero=ZeroStage.ZERO2))
    assert bwd_gathers == 0.0 and bwd_s == pytest.approx(in_b / HBM_BPS, rel=1e-12)  # reshard_after_forward=False
    _, (_, in_bf16, _), _ = _copies(replace(FSDP2, grad_reduce_dtype=GradReduceDtype.PARAM_DTYPE))
    assert in_bf16 == 125_226_240 * (2 + 2)


@pytest.mark.parametrize("strategy", [
    replace(FSDP2, fsdp1_flat_params=True),  # FSDP1: gathers into the FlatParameter, casts off the compute stream
    Strategy(global_batch=16, dp=8, zero=ZeroStage.ZERO3, framework=Framework.DEEPSPEED),
    Strategy(global_batch=16, dp=8, framework=Framework.MEGATRON, zero=ZeroStage.ZERO1),
])
def test_no_copies_outside_sharded_fsdp2(strategy):
    assert _copies(strategy)[1:] == ((0.0, 0.0, 0.0), (0.0, 0.0))


def test_the_compiled_step_charges_them_on_the_compute_stream():
    """The chunk's forward and backward grow by exactly the copies (FSDP1's flat parameters as the baseline)."""
    with_copies = compile_step(CLUSTER, MODEL, FSDP2, memory=False).stages[0].chunks[0]
    flat = compile_step(CLUSTER, MODEL, replace(FSDP2, fsdp1_flat_params=True), memory=False).stages[0].chunks[0]
    assert with_copies.fwd_s - flat.fwd_s == pytest.approx(500_904_960 / HBM_BPS, rel=1e-9)
    assert with_copies.bwd_s - flat.bwd_s == pytest.approx(1_252_262_400 / HBM_BPS, rel=1e-9)


def test_fsdp1_flat_params_needs_sharded_fsdp():
    with pytest.raises(SpecError, match="^fsdp1_flat_params: is torch FSDP1's sharding"):
        Strategy(global_batch=16, dp=8, fsdp1_flat_params=True)
