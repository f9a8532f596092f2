"""Mixture-of-experts blocks and expert parallelism (ep) for the executor's GPT.

**The MoE layer** (:class:`MoE`, in place of a dense block's MLP where the workload says,
``TransformerSpec.is_moe_layer``): a router ``h → E`` (no bias) gives each token softmax
probabilities over the E routed experts; the token goes to its ``k`` most probable experts and their
outputs are summed weighted by those probabilities, not renormalised (top-k softmax gating: Shazeer
et al. 2017 [src: shazeer-2017]; Switch top-1 scales by the router probability, Fedus et al. 2022
[src: fedus-2022]; Qwen2-MoE's and DeepSeek-V2's ``norm_topk_prob=False``). Each expert is an MLP of
``expert_ffn`` of the block's activation (SwiGLU's gate and up fused, gate first, as the dense MLP).
Shared experts (``n_s·f_s`` wide, one MLP) see every token; Qwen-MoE's shared gate scales them by
``sigmoid(x·g)``. Routing is dropless: a workload with a capacity factor is refused
(``executor.strategies.base.check_model``, before launch).

**Round-robin routing** (the plan's ``moe_routing: round-robin``, :func:`apply_routing`): token ``t``
of a rank's micro-batch (its ``T`` tokens flattened sample-major; under context parallelism a context rank's
tokens keep their index in the whole micro-batch, :func:`route_context_tokens`) goes to experts ``(t·k + j) mod E``,
``j < k`` — NeMo AutoModel's fake balanced gate [src: automodel-perf], the definition
``simulator.workload.moe_routing`` counts the dispatch with: k distinct consecutive experts, and every
expert receives ``T·k/E`` token copies (exactly when E divides T·k, else the counts differ by at most
one). The router still runs and its softmax probabilities of those k experts weight their outputs
(AutoModel weights them 1/k; the experts a token reaches are the same, and the router keeps a gradient
to synchronise). The single process (``executor.reference``) counts ``t`` modulo the
micro-batch's tokens, so it routes each token as the rank whose micro-batch holds it.
Parameter names and order are those of ``simulator.memory.moe.moe_mlp_shapes``:
``layers.{i}.moe.router``, ``.shared.up/down``, ``.shared_gate``, ``.experts.{j}.up/down``.

**Token dispatch** (one rank): the token copies (T·k) are sorted by expert (stable), each expert runs on
its contiguous rows, the outputs are weighted and summed back per token (``index_add``). With tensor
parallelism each expert is split over tp, each tp rank exchanging over its own ep group (:mod:`executor.moe_tp`).

**Expert parallelism** (:func:`executor.moe_parallel.apply_expert_parallel`): the E experts of every MoE layer are split over
the ep ranks of an ep group, ep consecutive data-parallel indices (``ParallelLayout.ep_group``, the
simulator's layout: experts sharded over the data-parallel ranks as DeepSpeed-MoE [src: deepspeed-moe]
and Megatron-Core [src: megatron-core] do); rank r of the group keeps experts ``[r·E/ep, (r+1)·E/ep)``
of the seeded full model, renumbered 0..E/ep−1. Per MoE layer and micro-batch: the expert counts are
exchanged (one ``all_to_all_single`` of E int64), the sorted copies go to the ranks holding their
experts (dispatch: ``all_to_all_single`` with the per-rank split sizes), each local expert runs on the
rows every source sent it, and the outputs come back the same way (combine); the backward of each
all-to-all is the all-to-all of the gradient with the split sizes swapped. Megatron-Core's
``MoEAlltoAllTokenDispatcher`` does the same steps [src: megatron-core].

**Gradients**: a rank's routed experts receive, through the combine and dispatch backward, the
gradient of every ep peer's local loss. The global loss is the mean of the dp ranks' local means, so
an expert's gradient is the sum over the ranks holding the same expert (the expert-data-parallel
group, dp indices equal mod ep, ``ParallelLayout.expert_dp_group``) divided by dp
(:func:`executor.moe_parallel.reduce_expert_gradients`); the dense parameters are averaged over dp by DDP as usual, and
the expert parameters are left out of DDP (not all-reduced over dp). Under ZeRO-2/3
(:func:`executor.moe_parallel.shard_experts`) each expert is an FSDP2 module over the expert-data-parallel group whose
reduce-scatter does the same sum and division by dp.

**With context parallelism** (cp > 1, tp = pp = 1; :mod:`executor.context`): each context rank routes its
own ``s/cp`` tokens of every sample and exchanges them over the ep group of its context rank (ep replicas
at the same cp coordinate, ``ParallelLayout.ep_group``); the experts' gradients are summed over the
expert-data-parallel group, which then spans every context rank ((dp/ep)·cp ranks,
Megatron-Core's expert-data-parallel group with context parallelism [src: megatron-moe-cp]), and divided
by dp·cp: the global loss is the mean of the dp·cp ranks' local means, and the group's ranks, each with
its ep peers' gradients, cover every one of them once. "dp" above is dp·cp then (``ParallelLayout.dp_cp``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from simulator.workload.moe_routing import Routing
from simulator.workload.transformer import ActivationKind, TransformerSpec

if TYPE_CHECKING:
    from executor.moe_parallel import EpGroups


class ExpertMLP(nn.Module):
    """One expert (or the shared experts together): down(act(up x)), no biases, ``width`` inner."""

    def __init__(self, hidden: int, width: int, swiglu: bool):
        super().__init__()
        self.swiglu = swiglu
        self.up = nn.Linear(hidden, (2 if swiglu else 1) * width, bias=False)
        self.down = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """On this rank's weights, or its tp shards (DTensors, :mod:`executor.moe_tp`): then a partial sum."""
        up, down = (_local(m.weight) for m in (self.up, self.down))
        if self.swiglu:
            gate, up_x = F.linear(x, up).chunk(2, dim=-1)
            return F.linear(F.silu(gate) * up_x, down)
        return F.linear(F.gelu(F.linear(x, up)), down)


def _local(weight: torch.Tensor) -> torch.Tensor:
    """A DTensor weight's local shard (differentiable: its gradient is the DTensor's), else the weight."""
    return weight.to_local() if hasattr(weight, "to_local") else weight




class EpClock:
    """Seconds this process spent inside the ep all-to-alls (forward and backward, counts included)."""

    def __init__(self):
        self.seconds = 0.0

    def all_to_all(self, out: torch.Tensor, x: torch.Tensor, out_splits, in_splits, group) -> None:
        self.timed(dist.all_to_all_single, out, x, out_splits, in_splits, group=group)

    def timed(self, collective, out: torch.Tensor, *args, **kwargs) -> None:
        """``collective(out, *args, **kwargs)``, its time added (also the tp gathers of :mod:`executor.moe_tp`)."""
        start = time.perf_counter()
        collective(out, *args, **kwargs)
        if out.is_cuda:
            torch.cuda.synchronize(out.device)
        self.seconds += time.perf_counter() - start


class _AllToAllV(torch.autograd.Function):
    """Differentiable ``all_to_all_single`` of rows: ``in_splits[j]`` rows of ``x`` to rank j, ``out_splits[j]``
    rows from rank j; the backward sends each gradient row back where its row came from."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group, clock):
        ctx.splits, ctx.group, ctx.clock = (out_splits, in_splits), group, clock
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        clock.all_to_all(out, x.contiguous(), out_splits, in_splits, group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits),) + tuple(grad.shape[1:]))
        ctx.clock.all_to_all(back, grad.contiguous(), in_splits, out_splits, ctx.group)
        return back, None, None, None, None


class MoE(nn.Module):
    """Router, shared experts (and gate), routed experts; over an ep group once ``ep`` is set."""

    def __init__(self, spec: TransformerSpec):
        super().__init__()
        moe, h = spec.moe, spec.hidden
        swiglu = spec.activation is ActivationKind.SWIGLU
        self.experts_total, self.top_k = moe.experts, moe.top_k
        self.router = nn.Linear(h, moe.experts, bias=False)
        self.shared = ExpertMLP(h, moe.shared_width, swiglu) if moe.shared_width else None
        self.shared_gate = nn.Linear(h, 1, bias=False) if moe.shared_gate else None
        self.experts = nn.ModuleList(ExpertMLP(h, moe.expert_ffn, swiglu) for _ in range(moe.experts))
        self.ep: EpGroups | None = None
        """The ep groups (None: every expert is local); set by :func:`executor.moe_parallel.apply_expert_parallel`."""
        self.clock = EpClock()
        self.round_robin_tokens = 0
        """Round-robin routing over micro-batches of this many tokens (0: the learned gate); :func:`apply_routing`."""
        self.token_index = self.tp_rows = None
        """Sequence parallelism with ep (:mod:`executor.moe_tp`): tokens' micro-batch index, tp gather/scatter."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        probs = F.softmax(self.router(flat), dim=-1, dtype=torch.float32)
        if self.round_robin_tokens:
            index = len(flat) if self.token_index is None else self.token_index(shape, flat.device)
            chosen = round_robin_experts(index, self.top_k, self.experts_total, self.round_robin_tokens, flat.device)
            weights = probs.gather(1, chosen)
        else:
            weights, chosen = probs.topk(self.top_k, dim=-1)             # (T, k) each
        expert_of = chosen.reshape(-1)
        order = torch.argsort(expert_of, stable=True)                    # copies sorted by expert
        token_of = order // self.top_k
        counts = torch.bincount(expert_of, minlength=self.experts_total)
        rows = self._experts(flat[token_of], counts)
        rows = rows * weights.reshape(-1)[order].unsqueeze(1).to(rows.dtype)
        y = torch.zeros(flat.shape, dtype=rows.dtype, device=flat.device).index_add(0, token_of, rows)
        if self.shared is not None:
            shared = self.shared(flat)
            if self.shared_gate is not None:
                shared = torch.sigmoid(self.shared_gate(flat)) * shared
            y = y + shared
        return y.view(shape)

    def _run_local(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        """Local expert l on ``chunks[l]`` (an expert with no rows still runs, so its gradient is a zero)."""
        return [expert(rows) for expert, rows in zip(self.experts, chunks)]

    def _experts(self, sorted_x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Expert outputs of the sorted token copies, in the same order (module docstring)."""
        rows = self.expert_rows if self.tp_rows is None else self.tp_rows
        if self.ep is None:
            return rows(sorted_x, counts.view(1, -1))
        ep, n, local = self.ep, len(self.ep.ranks), len(self.experts)
        recv_counts = torch.empty_like(counts)
        self.clock.all_to_all(recv_counts, counts, None, None, ep.group)  # [src·E/ep + l]: rows src sends expert l
        send = counts.view(n, local).sum(1).tolist()
        recv_matrix = recv_counts.view(n, local)
        received = _AllToAllV.apply(sorted_x, recv_matrix.sum(1).tolist(), send, ep.group, self.clock)
        back = rows(received, recv_matrix)
        return _AllToAllV.apply(back, send, recv_matrix.sum(1).tolist(), ep.group, self.clock)

    def expert_rows(self, received: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
        """Outputs of ``received`` rows, in their order: source-major, then local expert, ``matrix[s, l]`` rows
        from source s for local expert l; each expert runs once on its rows from every source."""
        n, local = matrix.shape
        pieces = received.split(matrix.flatten().tolist())
        outs = self._run_local([torch.cat([pieces[s * local + e] for s in range(n)]) for e in range(local)])
        parts = [o.split(matrix[:, e].tolist()) for e, o in enumerate(outs)]
        return torch.cat([parts[e][s] for s in range(n) for e in range(local)])


def round_robin_experts(tokens, top_k: int, experts: int, period: int, device=None) -> torch.Tensor:
    """(tokens, k) expert indices: token t gets ``((t mod period)·k + j) mod E``, j < k (module docstring);
    ``tokens``: a count (t = 0, 1, …) or the tokens' indices."""
    t = (torch.arange(tokens, device=device) if isinstance(tokens, int) else tokens) % period
    return (t.unsqueeze(1) * top_k + torch.arange(top_k, device=device)) % experts


def apply_routing(model, routing: Routing, micro_batch_tokens: int) -> str | None:
    """Route every MoE layer of ``model`` as the plan's ``moe_routing`` says, counting round-robin tokens
    over micro-batches of ``micro_batch_tokens``; returns the results' component line (None: no MoE layer)."""
    layers = moe_layers(model)
    for moe in layers:
        moe.round_robin_tokens = micro_batch_tokens if routing is Routing.ROUND_ROBIN else 0
    if not layers:
        return None
    if routing is Routing.ROUND_ROBIN:
        return (f"round-robin: token t of each {micro_batch_tokens}-token micro-batch to experts (t·k + j) mod E, "
                "weighted by the router's probabilities of them (executor/moe.py)")
    return "learned: the router's top-k softmax experts (executor/moe.py)"


def route_context_tokens(model, positions: torch.Tensor, seq: int) -> None:
    """Under context parallelism, give round-robin routing each token's index in its micro-batch: a context rank
    holds sequence positions ``positions`` of each of its ``b`` samples, so token j of sample i is
    ``i·seq + positions[j]`` — the index the one-process reference routes it by (module docstring)."""
    def index(shape, device):
        rows = torch.arange(shape[0], device=device).unsqueeze(1) * seq
        return (rows + positions.to(device).unsqueeze(0)).reshape(-1)
    for moe in moe_layers(model):
        moe.token_index = index


def moe_layers(model) -> list[MoE]:
    """The MoE modules of an ``executor.model.GPT``, in block order."""
    return [m for m in model.modules() if isinstance(m, MoE)]
