"""executor.model.build_gpt: parameter names, shapes, order and counts match the memory contract.

Expected names/shapes are written out here from notes/MEMORY_CONTRACT.md (independently of the
simulator), and, once ``simulator.memory`` is merged, also compared with its
``transformer_param_shapes``. Counts are checked against ``TransformerSpec.params`` exactly.
"""

from __future__ import annotations

import pytest
import torch

from executor.model import build_gpt
from simulator.workload import ActivationKind, BiasKind, NormKind, PositionKind, TransformerSpec

GPT2_TINY = TransformerSpec(name="gpt2-tiny", layers=2, hidden=64, heads=4, vocab=128, seq_len=16)
LLAMA_TINY = TransformerSpec(name="llama-tiny", layers=2, hidden=64, heads=4, kv_heads=2, vocab=128, seq_len=16,
                             ffn=172, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                             position=PositionKind.ROTARY, bias=BiasKind.NONE, tied_embeddings=False)
QWEN_TINY = TransformerSpec(name="qwen-tiny", layers=3, hidden=48, heads=6, kv_heads=1, vocab=100, seq_len=8,
                            ffn=96, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                            position=PositionKind.ROTARY, bias=BiasKind.QKV, tied_embeddings=True)
GPT_HEADDIM = TransformerSpec(name="gpt-headdim", layers=1, hidden=32, heads=4, head_dim=16, vocab=50, seq_len=8,
                              max_positions=12, tied_embeddings=False)
SPECS = [GPT2_TINY, LLAMA_TINY, QWEN_TINY, GPT_HEADDIM]


def contract_shapes(spec: TransformerSpec) -> list[tuple[str, tuple[int, ...]]]:
    """The contract's list, written out by hand from MEMORY_CONTRACT.md."""
    h, q, kv, f, V = spec.hidden, spec.q_dim, spec.kv_dim, spec.ffn_size, spec.vocab
    ln = spec.norm is NormKind.LAYERNORM
    out = [("embed.tok.weight", (V, h))]
    if spec.position is PositionKind.LEARNED:
        out.append(("embed.pos.weight", (spec.positions, h)))

    def norm(name):
        return [(f"{name}.weight", (h,))] + ([(f"{name}.bias", (h,))] if ln else [])

    all_b = spec.bias is BiasKind.ALL
    for i in range(spec.layers):
        p = f"layers.{i}"
        out += norm(f"{p}.norm1")
        out.append((f"{p}.attn.qkv.weight", (q + 2 * kv, h)))
        if spec.bias is not BiasKind.NONE:
            out.append((f"{p}.attn.qkv.bias", (q + 2 * kv,)))
        out.append((f"{p}.attn.out.weight", (h, q)))
        if all_b:
            out.append((f"{p}.attn.out.bias", (h,)))
        out += norm(f"{p}.norm2")
        up = 2 * f if spec.activation is ActivationKind.SWIGLU else f
        out.append((f"{p}.mlp.up.weight", (up, h)))
        if all_b:
            out.append((f"{p}.mlp.up.bias", (up,)))
        out.append((f"{p}.mlp.down.weight", (h, f)))
        if all_b:
            out.append((f"{p}.mlp.down.bias", (h,)))
    out += norm("norm_f")
    if not spec.tied_embeddings:
        out.append(("head.weight", (V, h)))
    return out


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_param_count_equals_spec(spec):
    model = build_gpt(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.params


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_names_shapes_order_match_contract(spec):
    model = build_gpt(spec)
    got = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    assert got == contract_shapes(spec)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_matches_simulator_shapes_when_merged(spec):
    memory = pytest.importorskip("simulator.memory", reason="simulator.memory not merged yet (branch memory)")
    model = build_gpt(spec)
    got = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    assert got == [(n, tuple(s)) for n, s in memory.transformer_param_shapes(spec)]


def test_gpt2_tiny_count_by_hand():
    # Narayanan et al. SC'21 eq. 2 per block 12h² + 13h, plus V·h + s·h and the final norm 2h:
    # 2·(12·4096 + 13·64) + 128·64 + 16·64 + 128 = 98304 + 1664 + 8192 + 1024 + 128 = 109312.
    assert sum(p.numel() for p in build_gpt(GPT2_TINY).parameters()) == 109_312


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_forward_backward_runs_and_loss_is_near_log_vocab(spec):
    model = build_gpt(spec)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, spec.vocab, (2, spec.seq_len), generator=g)
    loss = model(tokens, tokens.roll(-1, dims=1))
    loss.backward()
    # Untrained weights give near-uniform logits: loss ≈ ln V (within 1.0 nats for these default inits).
    assert abs(loss.item() - torch.log(torch.tensor(float(spec.vocab))).item()) < 1.0
    assert all(p.grad is not None for p in model.parameters())


def test_seed_is_deterministic_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b, c = build_gpt(GPT2_TINY, seed=3), build_gpt(GPT2_TINY, seed=3), build_gpt(GPT2_TINY, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.embed.tok.weight, c.embed.tok.weight)


def test_causal_prefix_invariance():
    # Causal attention: logits at position t do not depend on tokens after t.
    model = build_gpt(LLAMA_TINY)
    tokens = torch.randint(0, LLAMA_TINY.vocab, (1, 8))
    changed = tokens.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % LLAMA_TINY.vocab
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert torch.allclose(a[0, :5], b[0, :5], atol=1e-5)
    assert not torch.allclose(a[0, 5:], b[0, 5:], atol=1e-5)
