"""A real GPT-style torch model built from a :class:`~simulator.workload.TransformerSpec`.

Its ``named_parameters()`` follow the parameter list of ``simulator.memory.shapes`` (``transformer_param_shapes``) exactly, in
names, shapes and order, so the simulator's ``transformer_param_shapes(spec)`` and this model
describe the same tensors::

    embed.tok.weight (V, h); embed.pos.weight (positions, h)            [learned positions]
    layers.{i}.norm1.weight (h,) [+ bias for LayerNorm]
    layers.{i}.attn.qkv.weight (q + 2·kv, h) [+ bias: BiasKind.QKV or ALL]
    layers.{i}.attn.out.weight (h, q) [+ bias: ALL]
    layers.{i}.norm2.weight (h,) [+ bias]
    layers.{i}.mlp.up.weight (f or 2f, h) [+ bias: ALL]; layers.{i}.mlp.down.weight (h, f) [+ bias: ALL]
    layers.{i}.moe.router.weight (E, h), .moe.shared.up/down, .moe.shared_gate, .moe.experts.{j}.up/down
                                                                       [a MoE block: executor.moe]
    norm_f.weight (h,) [+ bias]; head.weight (V, h)                   [untied embeddings]

Blocks are pre-norm; attention is causal ``scaled_dot_product_attention`` (grouped-query when
``kv_heads < heads``); rotary positions rotate Q and K by position (Su et al. 2021, RoFormer);
SwiGLU's gate and up projections are one fused matrix, gate first (Shazeer 2020).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from executor.moe import MoE
from executor.strategies.base import check_model
from simulator.workload.transformer import (ActivationKind, BiasKind, NormKind, PositionKind,
                                            TransformerSpec)

ROPE_BASE = 10000.0
"""Rotary frequency base θ (Su et al. 2021; Llama's value)."""
INIT_STD = 0.02
"""Std of the normal init of embeddings and linear weights (GPT-2's value, Radford et al. 2019 code);
biases start at 0 and norms at scale 1, so an untrained model's loss is close to ln V."""


def _norm(spec: TransformerSpec) -> nn.Module:
    if spec.norm is NormKind.LAYERNORM:
        return nn.LayerNorm(spec.hidden)
    return nn.RMSNorm(spec.hidden)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on ``(b, heads, s, d)``: pairs (x1, x2) of the two halves turn by angle pos·θ_i. The
    fp32 tables are cast to ``x``'s dtype first (as Hugging Face's Llama does), so bf16 Q and K stay bf16 and
    match V's dtype in the attention call."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def _rope_tables(positions: torch.Tensor, d_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = ROPE_BASE ** (-torch.arange(0, d_head, 2, device=positions.device, dtype=torch.float32) / d_head)
    angles = torch.outer(positions.to(torch.float32), inv_freq)
    return angles.cos(), angles.sin()


class Attention(nn.Module):
    """Fused QKV projection, causal SDPA (GQA via ``enable_gqa``), output projection."""

    def __init__(self, spec: TransformerSpec):
        super().__init__()
        self.spec = spec
        self.heads, self.kv_heads = spec.heads, spec.n_kv_heads
        """Heads this module computes: all of them, or its share under tensor parallelism."""
        self.qkv = nn.Linear(spec.hidden, spec.q_dim + 2 * spec.kv_dim, bias=spec.bias is not BiasKind.NONE)
        self.out = nn.Linear(spec.q_dim, spec.hidden, bias=spec.bias is BiasKind.ALL)
        self.eager = False
        """Unfused attention core (see :meth:`core`); set by ``executor.recompute.apply_attention``."""
        self.positions: torch.Tensor | None = None
        """Global positions of the tokens this module sees (rotary angles); None: 0..s−1. Set, with
        ``core``, by ``executor.context.apply_context`` when the sequence is split over cp ranks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d_head = self.spec.d_head
        b, s, _ = x.shape
        q_dim, kv_dim = self.heads * d_head, self.kv_heads * d_head
        q, k, v = self.qkv(x).split((q_dim, kv_dim, kv_dim), dim=-1)
        q = q.view(b, s, self.heads, d_head).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, d_head).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, d_head).transpose(1, 2)
        if self.spec.position is PositionKind.ROTARY:
            positions = torch.arange(s, device=x.device) if self.positions is None else self.positions.to(x.device)
            cos, sin = _rope_tables(positions, d_head)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        y = self.core(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, s, q_dim))

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The attention core softmax(QKᵀ/√d + causal mask)·V on ``(b, heads, s, d)``: the part selective
        recomputation reruns. Fused SDPA by default; ``eager`` materialises the scores (Megatron-LM's
        unfused attention, what the simulator's ``attention eager`` counts)."""
        gqa = self.kv_heads != self.heads
        if not self.eager:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        if gqa:
            group = self.heads // self.kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        s = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        return scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v


class MLP(nn.Module):
    """GELU: down(gelu(up x)); SwiGLU: down(silu(gate x) · up x) with gate and up fused in ``up``."""

    def __init__(self, spec: TransformerSpec):
        super().__init__()
        self.swiglu = spec.activation is ActivationKind.SWIGLU
        width = (2 if self.swiglu else 1) * spec.ffn_size
        self.up = nn.Linear(spec.hidden, width, bias=spec.bias is BiasKind.ALL)
        self.down = nn.Linear(spec.ffn_size, spec.hidden, bias=spec.bias is BiasKind.ALL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            gate, up = self.up(x).chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm block: x + attn(norm1 x), then + mlp(norm2 x), or + moe(norm2 x) for a MoE layer."""

    def __init__(self, spec: TransformerSpec, index: int = 0):
        super().__init__()
        self.norm1 = _norm(spec)
        self.attn = Attention(spec)
        self.norm2 = _norm(spec)
        if spec.is_moe_layer(index):
            self.moe = MoE(spec)
        else:
            self.mlp = MLP(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + (self.moe if hasattr(self, "moe") else self.mlp)(self.norm2(x))


class GPT(nn.Module):
    """Embeddings, ``spec.layers`` blocks, final norm, logits (tied or not); cross-entropy when given targets."""

    def __init__(self, spec: TransformerSpec):
        super().__init__()
        check_model(spec)  # a stand-in would run and be measured as the model
        self.spec = spec
        self.embed = nn.Module()
        self.embed.tok = nn.Embedding(spec.vocab, spec.hidden)
        if spec.position is PositionKind.LEARNED:
            self.embed.pos = nn.Embedding(spec.positions, spec.hidden)
        self.layers = nn.ModuleList(Block(spec, i) for i in range(spec.layers))
        self.norm_f = _norm(spec)
        self.positions: torch.Tensor | None = None
        """Global positions of the input tokens (learned embedding); None: 0..s−1 (``executor.context``)."""
        if not spec.tied_embeddings:
            self.head = nn.Linear(spec.hidden, spec.vocab, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=INIT_STD)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """``tokens`` (b, s) int64 → logits (b, s, V), or the mean cross-entropy if ``targets`` is given."""
        x = self.embed.tok(tokens)
        if self.spec.position is PositionKind.LEARNED:
            pos = torch.arange(tokens.shape[1], device=tokens.device) if self.positions is None else self.positions
            x = x + self.embed.pos(pos.to(tokens.device))
        for block in self.layers:
            x = block(x)
        x = self.norm_f(x)
        logits = project_logits(x, self.embed.tok.weight if self.spec.tied_embeddings else self.head.weight)
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def project_logits(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Logits ``x · Wᵀ`` (b, s, V). A vocab-parallel ``weight`` (a DTensor ``Shard(0)`` over the tp
    mesh, :mod:`executor.strategies.tensor`) gives each tp rank its vocabulary slice of the logits
    (Megatron's column-parallel output layer); they are all-gathered into the full (b, s, V), so the
    loss is the unsplit model's. The backward of the gather hands each rank its slice's gradient, and
    that of the replicated input sums the ranks' partial input gradients (one all-reduce)."""
    from torch.distributed.tensor import DTensor, Replicate

    if not isinstance(weight, DTensor):
        return F.linear(x, weight)
    x = DTensor.from_local(x, weight.device_mesh, [Replicate()], run_check=False)
    return F.linear(x, weight).full_tensor()


def build_gpt(spec: TransformerSpec, seed: int = 0) -> GPT:
    """An fp32 GPT for ``spec``, initialised from ``seed`` (same seed → same weights, on every rank).

    The global RNG is left as it was (the seed is applied inside ``torch.random.fork_rng``).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT(spec)
