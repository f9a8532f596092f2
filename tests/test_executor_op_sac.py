"""executor.recompute's op-level selective checkpointing (torchtitan's policy [src: torchtitan-op-sac]):
the policy keeps the 1st, 3rd, ... matmul of each pass and the fused attention kernel, and a tiny model
trained with it gets the gradients of a run without recomputation, with the recompute phase timed."""

from types import SimpleNamespace

import torch

import executor.recompute as rc
from executor.model import build_gpt
from simulator.workload import ActivationKind, NormKind, PositionKind, Recompute, TransformerSpec

LLAMA_TINY = TransformerSpec(name="llama-tiny", layers=2, hidden=32, heads=4, kv_heads=2, vocab=64, seq_len=16,
                             ffn=64, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                             position=PositionKind.ROTARY)


def test_policy_keeps_every_other_matmul_and_attention(monkeypatch):
    captured = []
    monkeypatch.setattr(rc, "create_selective_checkpoint_contexts", captured.append)
    rc.op_level_context()
    policy, aten = captured[0], torch.ops.aten
    ops = [aten.mm.default, aten.addmm.default, aten.mm.default, aten._scaled_dot_product_flash_attention.default,
           aten.silu.default, aten.mm.default]
    for recompute in (False, True):  # each pass counts its own matmuls
        kept = [policy(SimpleNamespace(is_recompute=recompute), op) is rc.CheckpointPolicy.MUST_SAVE for op in ops]
        assert kept == [True, False, True, True, False, False]


def _grads(recompute: Recompute):
    torch.manual_seed(0)
    model = build_gpt(LLAMA_TINY, seed=1)
    clock = rc.RecomputeClock()
    rc.apply_recompute(model, recompute, clock)
    tokens = torch.randint(0, LLAMA_TINY.vocab, (2, LLAMA_TINY.seq_len))
    model(tokens, tokens.roll(-1, 1)).backward()
    return [p.grad.clone() for p in model.parameters()], clock.seconds


def test_gradients_match_no_recompute_and_recompute_is_timed():
    reference, none_s = _grads(Recompute.NONE)
    grads, op_s = _grads(Recompute.SELECTIVE_OP)
    assert none_s == 0 and op_s > 0
    for a, b in zip(reference, grads):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
