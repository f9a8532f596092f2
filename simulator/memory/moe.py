"""Memory of mixture-of-experts layers: their parameter tensors as one rank holds them under expert
parallelism, model states with the routed experts partitioned over the expert-data-parallel group,
and the activations a MoE block keeps.

Parameters (a MoE block ``i`` on one rank, expert tensor parallelism = tp): the block's attention and
norms as a dense block (:func:`simulator.memory.shapes.layer_param_shapes`), then

    router            E × h (replicated, as Megatron-Core's router weight)
    shared experts    up (2 if SwiGLU else 1)·⌈n_s·f_s/t⌉ × h, down h × ⌈n_s·f_s/t⌉ (column/row-parallel)
    shared gate       1 × h (Qwen-MoE)
    routed experts    E/ep local experts, each up (2 if SwiGLU else 1)·⌈f_e/t⌉ × h, down h × ⌈f_e/t⌉

Model states (:func:`split_experts`, then :func:`add_states`): ZeRO partitions the dense tensors over
the dp ranks and the routed experts' over the dp/ep ranks holding the same experts, the expert-data-parallel group (DeepSpeed-MoE
[src: deepspeed-moe]; Megatron-Core's distributed optimizer shards expert parameters over the
expert-data-parallel group [src: megatron-core]); the two parts add up.

Activations per MoE block and micro-batch (what autograd saves: a linear layer saves its input, a
SwiGLU its gate+up output, SiLU output and product; ``torchgen/packaged/autograd/derivatives.yaml``
[src: torch-autograd]), per token of the rank's T tokens, ``L = k·σ`` token copies on the busiest
rank (:func:`simulator.workload.moe.expert_tokens`), in e-byte elements::

    router            the routing probabilities, E
    experts           per copy: the permuted input h (first GEMM), the SwiGLU 4·f_e/t (GELU 2·f_e/t),
                      the expert output h (the combine weights it by the router probability)
    shared experts    SwiGLU 4·n_s·f_s/t (GELU 2·…), their input being the norm output already counted

These replace the dense MLP's terms of :func:`simulator.memory.activations.layer_activation`. The
all-to-all buffers are these tensors (the permuted input is the dispatch's receive buffer; the combine
receives into the expert-output copies), so no extra dispatch buffer is counted.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from simulator.workload.moe import expert_tokens
from simulator.workload.transformer import ActivationKind, TransformerSpec

__all__ = ["EXPERT_TENSOR", "add_states", "moe_activation_elements", "moe_mlp_shapes", "split_experts"]

EXPERT_TENSOR = ".moe.experts."
"""What the name of a routed expert's tensor contains (``layers.{i}.moe.experts.{j}.up.weight``)."""

SWIGLU_SAVED = 4
"""Elements of f per token a SwiGLU MLP saves (as :data:`simulator.memory.activations.SWIGLU_SAVED`)."""
GELU_SAVED = 2


def moe_mlp_shapes(spec: TransformerSpec, i: int, tp: int = 1, ep: int = 1) -> list:
    """The MLP tensors of MoE block ``i`` on one rank: router, shared experts (and gate), then its
    E/ep routed experts (module docstring); :func:`simulator.memory.shapes.layer_param_shapes` puts
    them in place of a dense MLP's."""
    moe, h = spec.moe, spec.hidden
    mats = 2 if spec.activation is ActivationKind.SWIGLU else 1
    p = f"layers.{i}.moe"
    shared = [(f"{p}.router.weight", (moe.experts, h))]
    if moe.shared_width:
        fs = ceil(moe.shared_width / tp)
        shared += [(f"{p}.shared.up.weight", (mats * fs, h)), (f"{p}.shared.down.weight", (h, fs))]
    if moe.shared_gate:
        shared.append((f"{p}.shared_gate.weight", (1, h)))
    fe = ceil(moe.expert_ffn / tp)
    experts = []
    for j in range(moe.experts // ep):
        experts += [(f"{p}.experts.{j}.up.weight", (mats * fe, h)), (f"{p}.experts.{j}.down.weight", (h, fe))]
    return shared + experts


def split_experts(shapes: list) -> tuple[list, list]:
    """(the other tensors, the routed experts') of a rank's tensor list, order kept."""
    return ([s for s in shapes if EXPERT_TENSOR not in s[0]], [s for s in shapes if EXPERT_TENSOR in s[0]])


def add_states(a, b):
    """The :class:`~simulator.memory.states.ModelStateBytes` of two disjoint sets of tensors on one rank
    (the dense ones and the experts): every byte count adds up."""
    after = None
    if a.params_after_step_bytes is not None or b.params_after_step_bytes is not None:
        after = a.params_at_rest_bytes + b.params_at_rest_bytes
    return replace(a, params_bytes=a.params_bytes + b.params_bytes, grads_bytes=a.grads_bytes + b.grads_bytes,
                   optimizer_bytes=a.optimizer_bytes + b.optimizer_bytes,
                   optimizer_step_bytes=a.optimizer_step_bytes + b.optimizer_step_bytes,
                   params_after_step_bytes=after)


def moe_activation_elements(spec: TransformerSpec, tp: int, skew: float, ep: int = 1) -> float:
    """Elements per token a MoE block's MLP part keeps (module docstring)."""
    moe = spec.moe
    saved = SWIGLU_SAVED if spec.activation is ActivationKind.SWIGLU else GELU_SAVED
    copies = expert_tokens(moe, 1.0, skew, ep)
    return moe.experts + copies * (2 * spec.hidden + saved * moe.expert_ffn / tp) + saved * moe.shared_width / tp
