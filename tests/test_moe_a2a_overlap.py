"""Megatron-Core's batch-level overlap of the expert-parallel all-to-alls (:func:`simulator.compile.ep_part.batch_overlap`,
strategy field ``moe_a2a_overlap``; ``overlap_moe_expert_parallel_comm`` [src: megatron-core-moe-a2a-overlap]): a
chunk's all-to-alls of ``A`` seconds under ``C`` seconds of the paired micro-batch's compute leave
``max(A − C, f·A)`` exposed, ``f`` the SMs the collective kernels take.

Hand-worked: calls of 1 and 2 s (A = 3 s), f = 0.1. Under C = 1 s: max(2, 0.3) = 2 s exposed, every EP call × 2/3.
Under C = 2.9 s: max(0.1, 0.3) = 0.3 s, × 0.1 (the SMs the all-to-alls take from the compute under them)."""

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import compile_step
from simulator.compile.ep_part import batch_overlap
from simulator.errors import SpecError
from simulator.interference import cluster_sm_fraction
from simulator.strategy import Framework, Strategy, ZeroStage
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport
from simulator.workload import get_preset


def _a2a(t: float) -> CommCall:
    return CommCall(kind=CommKind.EP, op=Op.ALL_TO_ALL, group=(0, 1), nbytes=1 << 20, transport=Transport.COLLECTIVE,
                    time_s=t, algorithm=CollectiveAlgorithm.DIRECT)


TP = CommCall(kind=CommKind.TP, op=Op.ALL_REDUCE, group=(0, 1), nbytes=1 << 20, transport=Transport.COLLECTIVE,
              time_s=0.5, algorithm=CollectiveAlgorithm.RING)


@pytest.mark.parametrize("compute_s, scale", [(1.0, 2 / 3), (2.9, 0.1)])
def test_hand_worked_remainder(compute_s, scale):
    fwd, bwd = batch_overlap((_a2a(1.0), TP), (_a2a(2.0),), compute_s, 0.1)
    assert fwd[1] is TP  # other calls are left as they are
    assert [c.time_s for c in (fwd[0], bwd[0])] == pytest.approx([1.0 * scale, 2.0 * scale], rel=1e-12)
    assert all(c.transport is Transport.OVERLAPPED and c.algorithm is None and c.nbytes == 1 << 20
               for c in (fwd[0], bwd[0]))


CLUSTER = load_preset("dgx-h100", 2)
MODEL = get_preset("deepseek-v2-lite").with_seq(4096)
BASE = Strategy(global_batch=64, micro_batch=1, dp=16, ep=16, framework=Framework.MEGATRON)


def _ep_s(chunk) -> float:
    return sum(c.time_s for c in chunk.tp_fwd + chunk.tp_bwd if c.kind is CommKind.EP)


def test_the_compiled_chunk_keeps_only_the_remainder():
    """Removing the term gives back the blocking all-to-alls; with it, the chunk's EP seconds are the formula's."""
    plain = compile_step(CLUSTER, MODEL, BASE, memory=False).stages[0].chunks[0]
    hidden = compile_step(CLUSTER, MODEL, replace(BASE, moe_a2a_overlap=True), memory=False).stages[0].chunks[0]
    a, c = _ep_s(plain), plain.fwd_s + plain.bwd_s + plain.recompute_s
    assert a > 0
    assert _ep_s(hidden) == pytest.approx(max(a - c, cluster_sm_fraction(CLUSTER) * a), rel=1e-9)
    assert _ep_s(hidden) < a
    assert (hidden.fwd_s, hidden.bwd_s) == (plain.fwd_s, plain.bwd_s)


@pytest.mark.parametrize("change", [dict(framework=Framework.FSDP2, zero=ZeroStage.ZERO3), dict(ep=1, dp=16)])
def test_only_megatron_with_experts(change):
    with pytest.raises(SpecError, match="^moe_a2a_overlap: is Megatron-Core's overlap"):
        replace(BASE, moe_a2a_overlap=True, **change)
