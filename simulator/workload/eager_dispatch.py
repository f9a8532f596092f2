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
(:class:`executor.model.GPT` at ``--scale tiny``, fp32 on the CPU, micro-batch 2, the second forward +
backward of a run, when every ``.grad`` exists) [src: own-eager-dispatch-count]; the operators of a linear,
a norm and the loss follow from torch's decompositions [src: torch-eager-decompositions]. gpt3-125m's block
(pre-norm LayerNorm, GELU, biased linears, learned positions, SDPA) runs 32 operators forward and 68 backward
where the op list has 8 and 16 kernels, its edges (tied head, cross-entropy) 14 and 23 against 4 and 5;
llama2-7b's block (RMSNorm, SwiGLU, rotary) 73 and 111 against 9 and 13. ``tests/test_eager_dispatch.py``
counts the real model against :func:`block_dispatches` and :func:`edge_dispatches` and fails when either
drifts. Per kernel (forward; backward):

    linear forward (3-D input)      view, t, addmm, view (no bias: t, view, mm, _unsafe_view)      4
    linear input gradient           mm, 2 × t, 2 × view                                           5
    linear weight gradient          mm, 2 × t, + add_ into .grad                                  3 + 1
    bias gradient                   view, sum, + add_                                             2 + 1
    LayerNorm / RMSNorm             :data:`LAYERNORM` / :data:`RMSNORM`, + add_ per parameter
    QKV split into heads            split_with_sizes, 3 × (view, transpose); backward cat + 6     7; 7
    heads merged                    :data:`HEAD_MERGE` (:data:`HEAD_MERGE_COPY` after rotary)
    SDPA core                       the fused operator, a detach of what it saves                 2; 2
    rotary positions                :data:`ROTARY`                                                26; 20
    residual add, activation        one add each; :data:`ACTIVATION`
    embedding                       :data:`EMBEDDING` (+ :data:`LEARNED_POSITIONS`, + add_ per table,
                                    + :data:`TIED_SUM` under a tied head)
    cross-entropy                   2 × view (flatten), _log_softmax, nll_loss_forward, detach;
                                    backward ones_like (the seed), nll_loss_backward,
                                    _log_softmax_backward_data, detach, view                      5; 5

Not measured, so one call per kernel: MoE and MLA blocks, the unfused attention core, autocast's casts, and
dropout (the executor runs none). Megatron-LM's and ``torch.compile``'s kernels keep one call each
(:class:`~simulator.workload.kinds.KernelFusion`): not measured either.
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
LAYERNORM = (1, 1, 2)
"""``nn.LayerNorm``: (forward, backward, parameter tensors): ``native_layer_norm``, its backward, weight and bias."""
RMSNORM = (7, 17, 1)
"""``nn.RMSNorm``, a composite on the CPU: forward ``pow``, ``mean``, ``add_`` (ε), ``rsqrt``, 2 × ``mul``, a
detach; backward 17 (8 ``mul``, 2 ``sum``, 2 ``pow``, ``div``, ``add``, ``expand``, ``view``, a detach); the weight."""
HEAD_SPLIT = 7
"""Q, K, V split from the fused projection (``split_with_sizes``) and each viewed into heads and transposed;
backward: ``cat`` and the 6 views back. Forward and backward alike."""
HEAD_MERGE = (2, 2)
"""The attention output transposed back and reshaped, (forward, backward): a view when the core's output keeps
the projection's layout."""
HEAD_MERGE_COPY = (3, 4)
"""The same when rotary positions made Q and K contiguous per head: the reshape copies (``transpose``,
``clone``, ``_unsafe_view``); backward 4."""
SINGLE_HEAD_VIEW = 1
"""Operators saved per rotated tensor (Q, K) that has a single head (multi-query attention's one KV head,
``kv_heads == 1``; or ``heads == 1``): its (b, 1, s, d) layout is contiguous either way round, so the reshape
that otherwise copies (``clone``, ``_unsafe_view``) is one ``view`` — in K's and Q's gradients, and with one
query head in the forward head merge too [src: own-eager-dispatch-count]."""
ROTARY = (26, 20)
"""Rotary positions on Q and K (``executor.model._rope_tables`` and ``_rotate`` twice), (forward, backward):
the tables (2 ``arange``, ``_to_copy``, ``div``, ``neg``, ``pow``, the outer product, ``cos``, ``sin``) and
per rotated tensor a split, 4 ``mul``, ``sub``, ``add``, ``cat``; backward per tensor 2 ``slice``, 4 ``mul``,
``neg``, 2 ``add``, ``cat``."""
SDPA = 2
"""``scaled_dot_product_attention``'s fused operator and a ``detach`` of what it saves; backward alike."""
ACTIVATION = {ActivationKind.GELU: (1, 1), ActivationKind.SWIGLU: (2, 3)}
"""The MLP's activation, (forward, backward): ``gelu``; SwiGLU's ``silu`` and product (backward
``silu_backward`` and 2 ``mul``). SwiGLU's ``chunk`` of the fused gate/up output (a ``split``; backward ``cat``)
is charged to the MLP's first linear."""
EMBEDDING = (1, 1)
"""A token lookup, (forward, backward): ``embedding``, ``embedding_dense_backward`` (+ its ``add_``)."""
LEARNED_POSITIONS = (3, 3)
"""Learned positions on top: ``arange``, the position lookup and the add; backward the lookup's backward, the
position gradient's ``sum`` over the batch and its ``view`` (+ the table's ``add_``)."""
TIED_SUM = 1
"""A tied embedding's two gradients (lookup and output layer) summed by one ``add`` before its ``add_``."""
CROSS_ENTROPY = 5
"""Forward: logits and targets flattened (2 views), ``_log_softmax``, ``nll_loss_forward``, a detach; backward:
``ones_like`` (``loss.backward()``'s seed), ``nll_loss_backward``, ``_log_softmax_backward_data``, a detach, a
view."""


def measured(spec: TransformerSpec) -> bool:
    """Whether the counts cover ``spec``'s block and edges (module docstring): a dense block (MoE and MLA not
    measured). Exact for gpt3-125m, llama2-7b and llama3-8b (one KV head at ``--scale tiny``:
    :data:`SINGLE_HEAD_VIEW`)."""
    return spec.moe is None and spec.mla is None


def _linear(name: str, biased: bool) -> dict[str, int]:
    counts = {name: LINEAR_FWD, f"{name}.dgrad": LINEAR_DGRAD, f"{name}.wgrad": LINEAR_WGRAD + ACCUMULATE_GRAD}
    if biased:
        counts[f"{name}.bias_grad"] = BIAS_GRAD + ACCUMULATE_GRAD
    return counts


def _norm(spec: TransformerSpec, count: int) -> tuple[int, int]:
    """(forward, backward) operators of ``count`` norms of ``spec``, their ``.grad`` accumulations included."""
    fwd, bwd, params = LAYERNORM if spec.norm is NormKind.LAYERNORM else RMSNORM
    return count * fwd, count * (bwd + params * ACCUMULATE_GRAD)


def block_dispatches(spec: TransformerSpec) -> dict[str, int]:
    """Operators per kernel name of one block (:func:`simulator.workload.ops.layer_work`, flash attention), for
    a block :func:`measured` covers; {} otherwise."""
    if not measured(spec):
        return {}
    qkv_bias, all_bias = spec.bias is not BiasKind.NONE, spec.bias is BiasKind.ALL
    rotary = spec.position is PositionKind.ROTARY
    norm_fwd, norm_bwd = _norm(spec, 2)
    act_fwd, act_bwd = ACTIVATION[spec.activation]
    counts = {"norm": norm_fwd, "norm.bwd": norm_bwd, "flash_attn": SDPA, "flash_attn.bwd": SDPA,
              "residual": 2, "residual.bwd": 2, "activation": act_fwd, "activation.bwd": act_bwd}
    if spec.activation is ActivationKind.SWIGLU:  # eager SwiGLU's two kernels (ops.activation_kernels)
        counts.update({"activation.silu": 1, "activation.mul": act_fwd - 1, "activation.silu.bwd": 1,
                       "activation.mul.bwd": act_bwd - 1})
    if rotary:
        counts.update({"rotary": ROTARY[0], "rotary.bwd": ROTARY[1]})
    for name, biased in (("qkv", qkv_bias), ("out_proj", all_bias), ("mlp_in", all_bias), ("mlp_out", all_bias)):
        counts.update(_linear(name, biased))
    merge = HEAD_MERGE_COPY if rotary else HEAD_MERGE
    for name, extra in (("qkv", HEAD_SPLIT), ("qkv.dgrad", HEAD_SPLIT), ("out_proj", merge[0]),
                        ("out_proj.dgrad", merge[1])):
        counts[name] += extra
    if spec.activation is ActivationKind.SWIGLU:  # the gate/up chunk: split forward, cat backward
        counts["mlp_in"] += 1
        counts["mlp_in.dgrad"] += 1
    if rotary:
        single_q, single_kv = int(spec.heads == 1), int(spec.n_kv_heads == 1)
        counts["qkv.dgrad"] -= SINGLE_HEAD_VIEW * (single_q + single_kv)
        counts["out_proj"] -= SINGLE_HEAD_VIEW * single_q
    return counts


def edge_dispatches(spec: TransformerSpec) -> dict[str, int]:
    """Operators per kernel name of the embedding, final norm, logits and loss
    (:func:`simulator.workload.ops.edge_work`), for a model :func:`measured` covers; {} otherwise."""
    if not measured(spec):
        return {}
    tied, learned = spec.tied_embeddings, spec.position is PositionKind.LEARNED
    embed_fwd = EMBEDDING[0] + (LEARNED_POSITIONS[0] if learned else 0)
    embed_bwd = (EMBEDDING[1] + ACCUMULATE_GRAD + (LEARNED_POSITIONS[1] + ACCUMULATE_GRAD if learned else 0)
                 + (TIED_SUM if tied else 0))
    norm_fwd, norm_bwd = _norm(spec, 1)
    return {"embedding": embed_fwd, "embedding.bwd": embed_bwd, "final_norm": norm_fwd, "final_norm.bwd": norm_bwd,
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
