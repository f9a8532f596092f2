"""Operators eager PyTorch dispatches per modelled kernel: the host calls of a CPU process.

A kernel of :mod:`simulator.workload.ops` is one piece of device work. Eager PyTorch runs more ATen
operators than that: views, transposes and detaches around a linear or the attention core, and, in
backward, one in-place ``add_`` per parameter tensor into its ``.grad`` (``AccumulateGrad``; the executor
keeps ``.grad`` between micro-batches with ``zero_grad(set_to_none=False)``). None of them moves bytes the
roofline would see, but on a device whose operators run in the calling thread (``kernel_dispatch: inline``,
a CPU process) each costs host time: :mod:`simulator.compute` charges ``Kernel.dispatches`` host calls per
kernel there, and ``trainplan calibrate --compute`` measures the host time per call on the same counts.
A GPU (``async``) keeps one host call per kernel, its launch: the presets' per-launch figure is a launch's
CPU time [src: hta-launch-stats], not an operator's dispatch.

Counted with ``torch.utils._python_dispatch.TorchDispatchMode`` on the executor's model
(:class:`executor.model.GPT`, gpt3-125m at ``--scale tiny``, fp32 on the CPU, micro-batch 2, the second
forward + backward of a run, when every ``.grad`` exists) [src: own-eager-dispatch-count]; the operators
of a linear, a norm and the loss follow from torch's decompositions [src: torch-eager-decompositions].
Per block (pre-norm, LayerNorm, GELU, biased linears, SDPA) forward 32 and backward 68 operators, where
the op list has 8 and 16 kernels; the model's edges (learned positions, tied head, cross-entropy) 14 and
23 against 4 and 5. ``tests/test_eager_dispatch.py`` counts the real model against :func:`block_dispatches` and
:func:`edge_dispatches` and fails when either drifts.

    linear forward (3-D input)      view, t, addmm, view (no bias: t, view, mm, _unsafe_view)      4
    linear input gradient           mm, 2 × t, 2 × view                                           5
    linear weight gradient          mm, 2 × t, + add_ into .grad                                  3 + 1
    bias gradient                   view, sum, + add_                                             2 + 1
    LayerNorm                       native_layer_norm; backward + add_ for weight and bias        1; 1 + 2
    QKV split into heads            split_with_sizes, 3 × (view, transpose); backward cat + 6     7; 7
    heads merged                    transpose, view (reshape); backward the same                  2; 2
    SDPA core                       the fused operator, a detach of what it saves                 2; 2
    residual add, GELU              one each, forward and backward                                1; 1
    embedding (learned positions)   2 lookups, arange, add; backward 2 × embedding_dense_backward,
                                    sum + view (the position gradient over the batch), add_ per
                                    table, + add (the tied head's and the lookup's gradients)     4; 7
    cross-entropy                   2 × view (flatten), _log_softmax, nll_loss_forward, detach;
                                    backward ones_like (the seed), nll_loss_backward,
                                    _log_softmax_backward_data, detach, view                      5; 5

Measured only for that block. Kernels outside it (RMSNorm, SwiGLU, rotary positions, grouped-query
attention, the unfused attention core, MoE, casts, dropout, which the executor does not run) keep one
call per kernel: not measured, not modelled (:func:`measured`). Megatron-LM's and ``torch.compile``'s
kernels keep one call each (:class:`~simulator.workload.kinds.KernelFusion`): not measured either.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from simulator.workload.kinds import ActivationKind, BiasKind, NormKind, PositionKind

if TYPE_CHECKING:
    from simulator.workload.ops import OpWork
    from simulator.workload.transformer import TransformerSpec

ACCUMULATE_GRAD = 1
"""``add_`` of a parameter's new gradient into its existing ``.grad`` (autograd's ``AccumulateGrad``), per
parameter tensor per backward [src: torch-eager-decompositions, own-eager-dispatch-count]."""
LINEAR_FWD = 4
"""``F.linear`` on a (b, s, ·) input: the input viewed 2-D, the weight transposed, one ``addmm`` (``mm`` and
``_unsafe_view`` without a bias), the output viewed 3-D [src: torch-eager-decompositions]."""
LINEAR_DGRAD = 5
"""A linear's input gradient: ``mm`` with the transposed weight (2 ``t``) and 2 views."""
LINEAR_WGRAD = 3
"""A linear's weight gradient: ``mm`` with the transposed input (2 ``t``); its ``add_`` is :data:`ACCUMULATE_GRAD`."""
BIAS_GRAD = 2
"""A bias gradient: the output gradient viewed 2-D and ``sum``-reduced; its ``add_`` is :data:`ACCUMULATE_GRAD`."""
LAYERNORM_PARAMS = 2
"""Parameter tensors of one ``nn.LayerNorm`` (weight and bias): one ``add_`` each in backward."""
HEAD_SPLIT = 7
"""Q, K, V split from the fused projection (``split_with_sizes``) and each viewed into heads and transposed;
backward: ``cat`` and the 6 views back. Forward and backward alike."""
HEAD_MERGE = 2
"""The attention output transposed back and reshaped (a view); backward alike."""
SDPA = 2
"""``scaled_dot_product_attention``'s fused operator and a ``detach`` of what it saves; backward alike."""
EMBEDDING_FWD_LEARNED = 4
"""Token and position lookups, the positions' ``arange`` and the add."""
EMBEDDING_BWD_LEARNED = 6
"""Two ``embedding_dense_backward``, the position gradient's ``sum`` over the batch and its ``view``, an
``add_`` per table."""
TIED_SUM = 1
"""A tied embedding's two gradients (lookup and output layer) summed by one ``add`` before its ``add_``."""
CROSS_ENTROPY = 5
"""Forward: logits and targets flattened (2 views), ``_log_softmax``, ``nll_loss_forward``, a detach; backward:
``ones_like`` (``loss.backward()``'s seed), ``nll_loss_backward``, ``_log_softmax_backward_data``, a detach, a
view."""


def measured(spec: TransformerSpec) -> bool:
    """Whether the block and edges of ``spec`` are those the counts were measured on: LayerNorm, GELU,
    learned positions, as many KV heads as heads, a dense MLP (module docstring)."""
    return (spec.norm is NormKind.LAYERNORM and spec.activation is ActivationKind.GELU
            and spec.position is PositionKind.LEARNED and spec.n_kv_heads == spec.heads
            and spec.moe is None and spec.mla is None)


def _linear(name: str, biased: bool) -> dict[str, int]:
    counts = {name: LINEAR_FWD, f"{name}.dgrad": LINEAR_DGRAD, f"{name}.wgrad": LINEAR_WGRAD + ACCUMULATE_GRAD}
    if biased:
        counts[f"{name}.bias_grad"] = BIAS_GRAD + ACCUMULATE_GRAD
    return counts


def block_dispatches(spec: TransformerSpec) -> dict[str, int]:
    """Operators per kernel name of one block (:func:`simulator.workload.ops.layer_work`, flash attention), for
    a block :func:`measured` covers; {} otherwise."""
    if not measured(spec):
        return {}
    qkv_bias, all_bias = spec.bias is not BiasKind.NONE, spec.bias is BiasKind.ALL
    counts = {"norm": 2, "norm.bwd": 2 * (1 + LAYERNORM_PARAMS * ACCUMULATE_GRAD),
              "flash_attn": SDPA, "flash_attn.bwd": SDPA, "residual": 2, "residual.bwd": 2,
              "activation": 1, "activation.bwd": 1}
    for name, biased in (("qkv", qkv_bias), ("out_proj", all_bias), ("mlp_in", all_bias), ("mlp_out", all_bias)):
        counts.update(_linear(name, biased))
    for name in ("qkv", "qkv.dgrad"):
        counts[name] += HEAD_SPLIT
    for name in ("out_proj", "out_proj.dgrad"):
        counts[name] += HEAD_MERGE
    return counts


def edge_dispatches(spec: TransformerSpec) -> dict[str, int]:
    """Operators per kernel name of the embedding, final norm, logits and loss
    (:func:`simulator.workload.ops.edge_work`), for a model :func:`measured` covers; {} otherwise."""
    if not measured(spec):
        return {}
    tied = spec.tied_embeddings
    return {"embedding": EMBEDDING_FWD_LEARNED, "embedding.bwd": EMBEDDING_BWD_LEARNED + (TIED_SUM if tied else 0),
            "final_norm": 1, "final_norm.bwd": 1 + LAYERNORM_PARAMS * ACCUMULATE_GRAD,
            "logits": LINEAR_FWD, "logits.dgrad": LINEAR_DGRAD,
            "logits.wgrad": LINEAR_WGRAD + (0 if tied else ACCUMULATE_GRAD),
            "cross_entropy": CROSS_ENTROPY, "cross_entropy.bwd": CROSS_ENTROPY}


def with_dispatches(ops: list[OpWork], counts: dict[str, int]) -> list[OpWork]:
    """``ops`` with each kernel named in ``counts`` carrying that many dispatches (the others as they are)."""
    if not counts:
        return ops

    def mark(kernels):
        return tuple(replace(k, dispatches=counts[k.name]) if k.name in counts else k for k in kernels)

    return [replace(w, fwd=mark(w.fwd), bwd=mark(w.bwd)) for w in ops]
