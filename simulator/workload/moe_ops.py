"""The kernels of one mixture-of-experts MLP on one rank, for one micro-batch (the MoE counterpart of the
dense MLP in :mod:`simulator.workload.ops`).

``T = b·s`` tokens on the rank, ``k`` experts per token, ``E`` routed experts of inner size ``f_e``
split over ``ep`` expert-parallel ranks (``E/ep`` local experts) and, inside each expert, over the
``t`` tensor-parallel ranks (expert tensor parallelism = tp, Megatron-Core's default), ``e`` bytes per
element. With routing skew ``σ`` (:attr:`Strategy.routing_skew`) the busiest rank receives
``L = σ·T·k`` token copies (capped by a capacity factor: :func:`simulator.workload.moe.expert_tokens`);
it sets the layer's time, since the combine all-to-all waits for it. Forward:

    router     GEMM T × h → E (+1 for Qwen's shared-expert gate); top-k softmax reads and writes T·E
    permute    gather the T·k token copies into expert order: reads T·h, writes T·k·h (Megatron's
               ``permute``); unpermute: reads T·k·h, writes T·h (the weighted sum of a token's k outputs)
    experts    grouped GEMMs over the E/ep local experts, m = L/(E/ep) rows each:
               in  h → (2 if SwiGLU else 1)·f_e/t,  out  f_e/t → h  (one batched GEMM each, as
               grouped-GEMM kernels run them: tile and wave quantisation of the small per-expert m is
               what :mod:`simulator.gemm_shape` charges)
    shared     a dense MLP of width n_s·f_s/t on all T tokens
    activation on the expert hidden: (3 if SwiGLU else 2)·L·f_e/t·e, and on the shared hidden

Backward is two GEMMs per GEMM and 1.5× the bytes of a memory kernel (:func:`simulator.workload.kernels.backward`).
The all-to-alls that move the tokens are communication, compiled in :mod:`simulator.compile.ep_part`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.workload.kernels import Kernel, OpKind, OpWork, Scope, gemm, memory, op_work
from simulator.workload.kinds import ActivationKind
from simulator.workload.moe import expert_tokens

if TYPE_CHECKING:
    from simulator.workload.transformer import TransformerSpec

__all__ = ["moe_mlp_kernels", "with_experts"]

Item = tuple[Kernel, tuple | None]


def _g(name: str, m: float, n: float, k: float, e: int, batch: float = 1) -> Item:
    return gemm(name, m, n, k, e, batch), (m, n, k, e, batch)


def moe_mlp_kernels(spec: TransformerSpec, tokens: float, tp: int, ep: int,
                    skew: float) -> tuple[list[Item], list[Item], float]:
    """(router items, MLP items, activation bytes) of one MoE layer on one rank (module docstring)."""
    moe = spec.moe
    h, e, T = spec.hidden, spec.dtype.activation_bytes, tokens
    swiglu = spec.activation is ActivationKind.SWIGLU
    gates = moe.experts + (1 if moe.shared_gate else 0)
    router = [_g("router", T, gates, h, e), (memory("router_topk", 2 * T * moe.experts * e), None),
              (memory("permute", (T * h + T * moe.top_k * h) * e), None),
              (memory("unpermute", (T * moe.top_k * h + T * h) * e), None)]
    load = expert_tokens(moe, T, skew, ep)
    local = moe.experts / ep
    f = moe.expert_ffn / tp
    mlp = [_g("experts_in", load / local, (2 if swiglu else 1) * f, h, e, local),
           _g("experts_out", load / local, h, f, e, local)]
    act = (3 if swiglu else 2) * load * f * e
    if moe.shared_width:
        fs = moe.shared_width / tp
        mlp += [_g("shared_in", T, (2 if swiglu else 1) * fs, h, e), _g("shared_out", T, h, fs, e)]
        act += (3 if swiglu else 2) * T * fs * e
    return router, mlp, act


def with_experts(spec: TransformerSpec, dense: list[OpWork], tokens: float, tp: int, ep: int,
                 routing_skew: float) -> list[OpWork]:
    """A block's operations (:func:`simulator.workload.blocks.block_work`) with the MLP replaced by the
    experts, a router operation before it, and the activation kernels on the experts' hidden instead of
    the dense one (module docstring): each scaled by the experts' activation elements over the dense block's,
    so the framework's kernel split (:func:`simulator.workload.ops.activation_kernels`) is kept."""
    router, mlp, act_bytes = moe_mlp_kernels(spec, tokens, tp, ep, routing_skew)
    out = []
    for work in dense:
        if work.op is OpKind.MLP:
            out += [op_work(OpKind.ROUTER, Scope.LAYER, router), op_work(OpKind.MLP, Scope.LAYER, mlp)]
        elif work.op is OpKind.ELEMENTWISE:
            dense_act = (3 if spec.activation is ActivationKind.SWIGLU else 2) * tokens * spec.ffn_size / tp \
                * spec.dtype.activation_bytes  # the same elements' bytes in the dense block's activation
            items = [(memory(k.name, k.bytes * act_bytes / dense_act) if k.name.startswith("activation") else k, None)
                     for k in work.fwd]
            out.append(op_work(OpKind.ELEMENTWISE, Scope.LAYER, items))
        else:
            out.append(work)
    return out
