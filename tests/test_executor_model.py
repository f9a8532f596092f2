"""executor.model.build_gpt: parameter names, shapes, order and counts match the memory contract.

Expected names/shapes are written out here by hand (independently of the simulator) and also
compared with ``simulator.memory.shapes.transformer_param_shapes``. Counts are checked against ``TransformerSpec.params`` exactly.
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
    """The parameter list, written out by hand (Megatron-style names; see executor/model.py)."""
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
def test_matches_simulator_shapes(spec):
    from simulator import memory

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


# --- executor.layers.layer_list: a real torch model as a generic layer list --------------------------

def test_layer_list_mlp_hand_counted():
    from torch import nn

    from executor.layers import layer_list
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    got = layer_list(mlp, torch.randn(2, 8)).layers
    # per sample: FLOPs 2·8·16 = 256 and 2·16·4 = 128; Linear 0 saves its input (8 fp32 = 32 B),
    # ReLU saves its output (16 fp32 = 64 B), Linear 2 saves that same tensor (not counted twice).
    assert [(l.name, l.params, l.fwd_flops, l.activation_bytes, l.output_bytes) for l in got] == [
        ("0", 8 * 16 + 16, 256.0, 32, 64), ("1", 0, 0.0, 64, 64), ("2", 16 * 4 + 4, 128.0, 0, 16)]


def test_layer_list_cnn_hand_counted():
    from torch import nn

    from executor.layers import layer_list
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 10))
    w = layer_list(cnn, torch.randn(3, 1, 8, 8), name="cnn")
    # conv: 2 · (4·6·6 outputs) · (1·3·3 MACs each) = 2592 FLOPs (bias adds not counted by FlopCounterMode);
    # linear: 2·144·10 = 2880. Saved: conv input 64 fp32 = 256 B; ReLU output 144 fp32 = 576 B;
    # Flatten and the Linear reuse ReLU's storage (views): 0.
    assert [(l.params, l.fwd_flops, l.activation_bytes) for l in w.layers] == [
        (4 * 9 + 4, 2592.0, 256), (0, 0.0, 576), (0, 0.0, 0), (1450, 2880.0, 0)]
    assert w.name == "cnn" and w.params == sum(p.numel() for p in cnn.parameters())


def test_layer_list_gpt_counts_every_param_once_and_keeps_outside_work():
    from executor.layers import OUTSIDE, layer_list
    model = build_gpt(GPT2_TINY)
    w = layer_list(model, torch.randint(0, GPT2_TINY.vocab, (2, GPT2_TINY.seq_len)))
    assert w.params == GPT2_TINY.params  # the tied head reuses embed.tok.weight: counted once
    outside = next(l for l in w.layers if l.name == OUTSIDE)
    # the tied head runs as F.linear in GPT.forward: 2·s·h·V = 2·16·64·128 FLOPs per sample, at least
    assert outside.fwd_flops >= 2 * 16 * 64 * 128


def test_layer_list_rejects_input_without_batch():
    from torch import nn

    from executor.layers import layer_list
    from simulator.errors import SpecError
    with pytest.raises(SpecError, match="sample_input"):
        layer_list(nn.Linear(2, 2), torch.tensor(1.0))
