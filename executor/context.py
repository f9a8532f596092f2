"""Context parallelism for the executor: each sample's sequence split over the ``cp`` ranks of a replica.

Which implementation, and why: torch 2.13's own ``torch.distributed.tensor.experimental.context_parallel``
(ring attention on SDPA, ``_RotateMethod`` all-gather / all-to-all) was tried first, at tiny size on 2 gloo
ranks (2026-11-24). It fails on CPU: SDPA dispatches to ``aten._scaled_dot_product_flash_attention_for_cpu``,
for which the context-parallel dispatcher has no handler ("does not have a sharding strategy
registered"); its ring handlers cover only the CUDA flash, memory-efficient and cuDNN kernels
[src: torch-context-parallel], and neither of those has a CPU kernel. So the ring here is our own,
written on torch.distributed point-to-point operations, and runs on gloo and NCCL alike:

- **ring** (Liu et al. 2023 [src: liu-2023]; Transformer Engine's ``p2p`` [src: te-context-parallel]):
  in cp steps each rank attends its queries to the KV block it holds while ``isend``/``irecv`` pass that
  block to the next rank of the ring (the transfer of step i overlaps the attention of step i). Partial
  results merge by online softmax: with the log-sum-exp ``L = log Σ exp(s)`` of each partial,
  ``L = logaddexp(L₁, L₂)``, ``O = O₁·exp(L₁ − L) + O₂·exp(L₂ − L)`` (FlashAttention's rescaling,
  Dao et al. 2022 [src: dao-2022]). The backward is a custom ``autograd.Function``: with the saved output
  O and L, per block ``P = exp(S − L)``, ``dV = Pᵀ·dO``, ``dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O))``,
  ``dQ += dS·K/√d``, ``dK = dSᵀ·Q/√d`` (Dao et al. 2022, Alg. 4); the K, V blocks go round the ring
  again (each transfer overlapped with the gradients of the block held) and each block's dK, dV
  accumulator follows it one step behind, one last hop bringing it home (TE passes "KV and dKV" the
  same way). The causal mask compares global token positions, so it holds for any split.
- **all-to-all** (DeepSpeed-Ulysses, Jacobs et al. 2023 [src: jacobs-2023]): ``all_to_all_single`` turns
  Q, K, V from sequence-split into head-split, every rank runs causal SDPA over the whole sequence on
  heads/cp heads, and one all-to-all turns the output back (``dist.all_to_all_single``, which gloo
  supports, in a small autograd Function whose backward is the same all-to-all). Grouped-query K, V
  whose heads do not divide by cp are expanded to the query heads first.

Causal load balancing (ring, ``cp_balanced``): the sequence in 2·cp chunks, rank r holding chunks r and
2·cp−1−r (Megatron-Core's ``get_batch_on_this_cp_rank`` [src: megatron-cp]); otherwise, and always for
all-to-all (which needs the chunks in sequence order), rank r holds the r-th of cp contiguous chunks.
Weights are replicated over cp and their gradients reduced over the dp·cp group (the runner's DDP or
FSDP2 group, ``mesh["dp"]``): the mean loss over a sample is the mean of its cp equal-sized shares.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from simulator.workload.context import ContextKind, ContextSplit


def token_index(seq: int, split: ContextSplit, cp_rank: int) -> torch.Tensor:
    """Global positions (int64, ascending) of the tokens context rank ``cp_rank`` holds (module docstring)."""
    chunks = split.chunks()
    size = seq // chunks
    own = (cp_rank, chunks - 1 - cp_rank) if chunks == 2 * split.degree else (cp_rank,)
    return torch.cat([torch.arange(c * size, (c + 1) * size) for c in own])


def split_description(seq: int, split: ContextSplit) -> str:
    """One line for the results file: the cp shape that ran."""
    chunks = split.chunks()
    how = (f"balanced: {chunks} chunks of {seq // chunks} tokens, rank r holds chunks r and {chunks - 1}−r"
           if chunks == 2 * split.degree else f"contiguous: rank r holds chunk r of {chunks}")
    impl = ("ring attention over isend/irecv with online-softmax merge (executor/context.py)"
            if split.kind is ContextKind.RING else
            "all-to-all (Ulysses) with dist.all_to_all_single (executor/context.py)")
    return f"cp={split.degree} {split.kind.value}, {seq // split.degree} of {seq} tokens per rank, {how}; {impl}"


@dataclass(frozen=True)
class CpGroup:
    """The cp ranks of this rank's replica, in ring order, and their process group."""

    ranks: tuple[int, ...]
    index: int
    """This rank's place in ``ranks`` (its context rank)."""
    group: object
    """``torch.distributed.ProcessGroup`` of ``ranks``."""


def make_cp_group(layout, rank: int) -> CpGroup:
    """Create every cp group of the layout (every rank must call this, in the same order) and return
    this rank's. A cp group is the cp consecutive coordinates of the grid's dp·cp dimension."""
    coords = layout.coords(rank)
    mine = None
    for d in range(layout.dp):
        for p in range(layout.pp):
            for t in range(layout.tp):
                ranks = layout.cp_group(d, p, t)
                group = dist.new_group(list(ranks))
                if rank in ranks:
                    mine = CpGroup(ranks=ranks, index=coords.dp % layout.cp, group=group)
    return mine


def _expand(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped-query K or V (b, kv_heads, s, d) repeated to ``heads`` heads (head i uses kv head i // group)."""
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)


def _block_forward(q, k, v, mask, scale):
    """Attention of q over one KV block: (output normalised within the block, its log-sum-exp);
    rows with no visible key give output 0 and log-sum-exp −inf."""
    s = (q @ k.transpose(-2, -1)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    total = p.sum(dim=-1, keepdim=True)
    out = (p @ v) / torch.where(total > 0, total, torch.ones_like(total))
    return out, m + torch.log(total)


_KV_TAG, _DKV_TAG = 0, 1
"""p2p tags of the ring's two streams in backward: key/value blocks and their gradient accumulators."""


class _Ring:
    """Pass a tensor to the next rank of the cp ring and receive the previous rank's, asynchronously."""

    def __init__(self, cp: CpGroup):
        self.cp = cp
        n = len(cp.ranks)
        self.next, self.prev = cp.ranks[(cp.index + 1) % n], cp.ranks[(cp.index - 1) % n]

    def start(self, send: torch.Tensor, tag: int = 0):
        """Post the send of ``send`` to the next rank and the receive of the previous rank's tensor of the
        same shape; ``tag`` keeps two streams (KV, dKV) between the same ranks apart."""
        recv = torch.empty_like(send)
        ops = [dist.P2POp(dist.isend, send, self.next, self.cp.group, tag),
               dist.P2POp(dist.irecv, recv, self.prev, self.cp.group, tag)]
        return recv, dist.batch_isend_irecv(ops)

    @staticmethod
    def finish(pending) -> None:
        for work in pending:
            work.wait()


class RingAttention(torch.autograd.Function):
    """Causal ring attention on (b, heads, s_local, d) query and (b, kv_heads, s_local, d) key/value shards."""

    @staticmethod
    def forward(ctx, q, k, v, cp: CpGroup, positions: tuple[torch.Tensor, ...]):
        with torch.autocast(q.device.type, enabled=False):  # fp32 softmax merge, as SDPA's own
            return RingAttention._forward(ctx, q, k, v, cp, positions)

    @staticmethod
    def _forward(ctx, q, k, v, cp, positions):
        dtype = q.dtype
        q, k, v = q.float(), k.float(), v.float()
        heads, n, scale = q.shape[1], len(cp.ranks), q.shape[-1] ** -0.5
        ring = _Ring(cp)
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
        kv = torch.stack((k, v))
        q_pos = positions[cp.index].to(q.device)
        for i in range(n):
            pending = None
            if i < n - 1:
                nxt, pending = ring.start(kv)
            src = (cp.index - i) % n
            mask = q_pos[:, None] >= positions[src].to(q.device)[None, :]
            if bool(mask.any()):
                o_b, lse_b = _block_forward(q, _expand(kv[0], heads), _expand(kv[1], heads), mask, scale)
                new = torch.logaddexp(lse, lse_b)
                out = out * torch.exp(lse - new) + o_b * torch.exp(lse_b - new)
                lse = new
            if pending is not None:
                ring.finish(pending)
                kv = nxt
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cp, ctx.positions, ctx.dtype = cp, positions, dtype
        return out.to(dtype)

    @staticmethod
    def backward(ctx, grad_out):
        with torch.autocast(grad_out.device.type, enabled=False):
            return RingAttention._backward(ctx, grad_out)

    @staticmethod
    def _backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        cp, positions = ctx.cp, ctx.positions
        do = grad_out.float()
        heads, kv_heads, n, scale = q.shape[1], k.shape[1], len(cp.ranks), q.shape[-1] ** -0.5
        ring = _Ring(cp)
        delta = (do * out).sum(dim=-1, keepdim=True)
        dq = torch.zeros_like(q)
        q_pos = positions[cp.index].to(q.device)
        kv, incoming, pending_dkv = torch.stack((k, v)), None, None
        for i in range(n):
            if i < n - 1:  # the KV block held goes on while its gradients are computed
                next_kv, pending_kv = ring.start(kv, tag=_KV_TAG)
            src = (cp.index - i) % n
            mask = q_pos[:, None] >= positions[src].to(q.device)[None, :]
            dkv = torch.zeros_like(kv)
            if bool(mask.any()):
                kb, vb = _expand(kv[0], heads), _expand(kv[1], heads)
                p = torch.exp((q @ kb.transpose(-2, -1)) * scale - lse).masked_fill(~mask, 0.0)
                ds = p * (do @ vb.transpose(-2, -1) - delta)
                dq += (ds @ kb) * scale
                dk, dv = (ds.transpose(-2, -1) @ q) * scale, p.transpose(-2, -1) @ do
                b, _, s, d = dk.shape
                dkv[0] = dk.view(b, kv_heads, heads // kv_heads, s, d).sum(2)
                dkv[1] = dv.view(b, kv_heads, heads // kv_heads, s, d).sum(2)
            if pending_dkv is not None:  # the block's accumulator from the ranks that held it before
                _Ring.finish(pending_dkv)
                dkv += incoming
            # the accumulator follows its block; after the last step it reaches the block's owner
            incoming, pending_dkv = ring.start(dkv, tag=_DKV_TAG)
            if i < n - 1:
                _Ring.finish(pending_kv)
                kv = next_kv
        _Ring.finish(pending_dkv)
        state = incoming  # dK, dV of this rank's own block, summed over every rank's queries
        dtype = ctx.dtype
        return dq.to(dtype), state[0].to(dtype), state[1].to(dtype), None, None


class _AllToAll(torch.autograd.Function):
    """``dist.all_to_all_single`` with equal splits over dim 0; its gradient is the same all-to-all of the
    output gradient (block j sent to rank j came from rank j's block i, so the adjoint sends it back)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        x = x.contiguous()
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        dist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        out = torch.empty_like(grad, memory_format=torch.contiguous_format)
        dist.all_to_all_single(out, grad, group=ctx.group)
        return out, None


def all_to_all_single(x: torch.Tensor, group) -> torch.Tensor:
    """Differentiable equal-split all-to-all over dim 0 of ``x``."""
    return _AllToAll.apply(x, group)


def _seq_to_heads(x: torch.Tensor, cp: CpGroup) -> torch.Tensor:
    """(b, h, s/cp, d) sequence-split → (b, h/cp, s, d) head-split, by one all-to-all over the cp group."""
    n = len(cp.ranks)
    b, h, s, d = x.shape
    send = x.transpose(0, 1).contiguous()  # (h, b, s, d): head group j goes to context rank j
    recv = all_to_all_single(send, cp.group)
    return recv.view(n, h // n, b, s, d).permute(2, 1, 0, 3, 4).reshape(b, h // n, n * s, d)


def _heads_to_seq(y: torch.Tensor, cp: CpGroup) -> torch.Tensor:
    """Inverse of :func:`_seq_to_heads`: (b, h/cp, s, d) → (b, h, s/cp, d)."""
    n = len(cp.ranks)
    b, hn, s, d = y.shape
    send = y.view(b, hn, n, s // n, d).permute(2, 1, 0, 3, 4).contiguous()  # sequence chunk j to rank j
    recv = all_to_all_single(send, cp.group)
    return recv.view(n * hn, b, s // n, d).transpose(0, 1)


class ContextCore:
    """An ``Attention.core`` replacement running the attention core over the cp group."""

    def __init__(self, cp: CpGroup, split: ContextSplit, seq: int):
        self.cp, self.kind = cp, split.kind
        self.positions = tuple(token_index(seq, split, r) for r in range(split.degree))

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.kind is ContextKind.RING:
            return RingAttention.apply(q, k, v, self.cp, self.positions)
        n = len(self.cp.ranks)
        if k.shape[1] % n:
            k, v = _expand(k, q.shape[1]), _expand(v, q.shape[1])
        qh, kh, vh = (_seq_to_heads(t, self.cp) for t in (q, k, v))
        y = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=kh.shape[1] != qh.shape[1])
        return _heads_to_seq(y, self.cp)


def apply_context(model, cp: CpGroup, split: ContextSplit, seq: int) -> torch.Tensor:
    """Make ``model`` (an ``executor.model.GPT``) run its rank's share of each sequence: every attention
    core over the cp group, positions (learned or rotary) at the tokens' global places. Apply before
    recompute and sharding. Returns the token positions this rank holds (index the batch with them)."""
    core = ContextCore(cp, split, seq)
    positions = core.positions[cp.index]
    model.positions = positions
    for block in model.layers:
        block.attn.core = core
        block.attn.positions = positions
    return positions
