"""The softmax cross-entropy's kernels over the logits, by how the framework computes it (:class:`LossImpl`).

With ``N = T·V/t`` logits on a tensor-parallel rank, ``e`` bytes per element of the logits (the compute format)
and 4 for fp32:

- :attr:`LossImpl.TORCH_FP32`, ``F.cross_entropy`` on fp32 logits as torch models call it (torchtitan's
  ``.float()``; under autocast the cast comes after ``log_softmax``: :attr:`LossImpl.TORCH_AUTOCAST`): forward the cast to
  fp32 (``e + 4`` bytes per logit; none when the logits are fp32) and ``log_softmax`` (read and write fp32: 8);
  ``nll_loss`` gathers one value per token (negligible). Backward, from ``derivatives.yaml`` [src: torch-autograd]:
  ``nll_loss_backward`` writes a dense fp32 gradient of the log-probabilities (4), ``_log_softmax_backward_data``
  reads it and the saved output and writes the logits' gradient (12), and the cast's backward turns it back to
  the logits' format (``4 + e``). In bf16: 14 bytes per logit forward and 22 backward, where one pass over the
  bf16 logits (the previous rule) counted 4 and 6. These are the tensors the memory model already holds for the
  loss (:func:`simulator.memory.activations.loss_working_bytes`).
- :attr:`LossImpl.TORCH_AUTOCAST`, ``F.cross_entropy`` on the 16-bit logits under CUDA autocast: ``cross_entropy``
  is on no autocast list and calls ``log_softmax(self, dim, self.scalar_type())`` (``LossNLL.cpp``), which
  autocast leaves 16-bit since its dtype is given, then ``nll_loss`` (autocast's fp32 list) on an fp32 cast of
  the log-probabilities [src: torch-autocast-cache]. Forward ``log_softmax`` in ``e`` (read and write: ``2e``) and
  the cast (``e + 4``); backward ``nll_loss_backward``'s dense fp32 gradient (4), the cast's backward to ``e``
  (``4 + e``) and ``_log_softmax_backward_data`` in ``e`` (gradient, saved output, input gradient: ``3e``). In bf16:
  10 bytes per logit forward and 16 backward (``TORCH_FP32``'s order: 14 and 22). Seen in the 1.3B H200 trace
  [src: own-h200-2026-11-24]: ``cunn_SoftMaxForward<8, BFloat16, float, BFloat16>``, the cast under
  ``aten::nll_loss > aten::to``, a ``FillFunctor<float>`` under ``nll_loss_backward``, the cast's backward
  (``bfloat16_copy`` under ``ToCopyBackward0``) and ``cunn_SoftMaxBackward<8, BFloat16, float, BFloat16>``.
  :func:`with_loss` picks it for ``TORCH_FP32`` when the model runs under autocast.
- :attr:`LossImpl.MEGATRON_VOCAB_PARALLEL`, Megatron-LM's ``vocab_parallel_cross_entropy(output.float(), labels)``
  (``--fp16-lm-cross-entropy`` off, its default; ``cross_entropy_loss_fusion`` off, Megatron-Core's default)
  [src: megatron-cross-entropy, megatron-2021-cross-entropy]: forward the cast to fp32 (``e + 4``; none on fp32
  logits), ``torch.max`` over the vocabulary (read 4), ``logits -= max`` in place (4 + 4), ``torch.exp(..., out=)``
  in place (4 + 4), ``sum`` (read 4) and ``exp_logits.div_(sum)`` in place (4 + 4), saved as the softmax: ``e + 36``
  bytes per logit (32 on fp32 logits); the target gather and the three all-reduces are per token (negligible
  here; the all-reduces' time is not charged). Backward: the target's ``-= 1`` scatter (per token),
  ``grad_input.mul_(grad_output)`` in place (4 + 4) and the cast's backward to the logits' format (``4 + e``):
  ``12 + e``. In bf16: 38 forward and 14 backward, where one pass counted 4 and 6.
- :attr:`LossImpl.ONE_PASS`: one kernel reading and writing the ``e``-byte logits (``2·e``), backward 1.5× — the
  default of op tables that name no framework.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.workload.kernels import Kernel, OpKind, OpWork, Scope, memory, op_work
from simulator.workload.kinds import LossImpl

FP32_BYTES = 4


def under_autocast(impl: LossImpl, autocast: bool) -> LossImpl:
    """The loss a framework's ``impl`` runs as when the model runs under eager autocast over fp32 parameters
    (:func:`simulator.strategy.formats.runs_autocast`): torch's ``F.cross_entropy`` on the 16-bit logits becomes
    :attr:`LossImpl.TORCH_AUTOCAST` (module docstring); every other rule is unchanged."""
    return LossImpl.TORCH_AUTOCAST if autocast and impl is LossImpl.TORCH_FP32 else impl


def with_loss(works: list[OpWork], impl: LossImpl, e: int, *, autocast: bool = False) -> list[OpWork]:
    """The edge operations of :func:`simulator.workload.ops.edge_work` with their loss (one pass over the
    logits there) as ``impl`` computes it (under autocast: :func:`under_autocast`); the logits' count is read back
    from that pass's bytes (2·e each)."""
    impl = under_autocast(impl, autocast)
    if impl is LossImpl.ONE_PASS:
        return works
    return [_keeping_dispatches(loss_work(w.fwd[0].bytes / (2 * e), e, impl), w) if w.op is OpKind.LOSS else w
            for w in works]


def _keeping_dispatches(new: OpWork, old: OpWork) -> OpWork:
    """``new`` with the operators eager torch dispatches for the loss (``old``'s, counted per phase by
    :mod:`simulator.workload.eager_dispatch`) spread over its kernels: one per kernel, the rest on the first, so
    an ``inline`` device's host calls stay the counted ones (an ``async`` device counts kernels, not these)."""

    def spread(kernels: tuple[Kernel, ...], total: int) -> tuple[Kernel, ...]:
        if not kernels or total <= len(kernels):
            return kernels
        return (replace(kernels[0], dispatches=total - len(kernels) + 1),) + kernels[1:]

    return replace(new, fwd=spread(new.fwd, sum(k.dispatches for k in old.fwd)),
                   bwd=spread(new.bwd, sum(k.dispatches for k in old.bwd)))


def loss_work(logits: float, e: int, impl: LossImpl) -> OpWork:
    """The cross-entropy operation over ``logits`` logits of ``e`` bytes (module docstring)."""
    if impl is LossImpl.ONE_PASS:
        return op_work(OpKind.LOSS, Scope.LAST, [(memory("cross_entropy", 2 * logits * e), None)])
    cast = e != FP32_BYTES
    if impl is LossImpl.TORCH_AUTOCAST and cast:
        return _autocast_loss(logits, e)
    fwd: list[Kernel] = [memory("cross_entropy.cast", (e + FP32_BYTES) * logits)] if cast else []
    if impl is LossImpl.MEGATRON_VOCAB_PARALLEL:
        return _megatron_loss(logits, e, fwd)
    fwd.append(memory("cross_entropy.log_softmax", 2 * FP32_BYTES * logits))
    bwd = [memory("cross_entropy.nll_loss_bwd", FP32_BYTES * logits),
           memory("cross_entropy.log_softmax_bwd", 3 * FP32_BYTES * logits)]
    if cast:
        bwd.append(memory("cross_entropy.cast_bwd", (FP32_BYTES + e) * logits))
    return OpWork(op=OpKind.LOSS, scope=Scope.LAST, fwd=tuple(fwd), bwd=tuple(bwd))


def _megatron_loss(logits: float, e: int, cast: list[Kernel]) -> OpWork:
    """Megatron-LM's vocab-parallel cross-entropy after the ``cast`` kernels (module docstring)."""
    fwd = cast + [memory("cross_entropy.max", FP32_BYTES * logits),
                  memory("cross_entropy.sub_max", 2 * FP32_BYTES * logits),
                  memory("cross_entropy.exp", 2 * FP32_BYTES * logits),
                  memory("cross_entropy.sum_exp", FP32_BYTES * logits),
                  memory("cross_entropy.div_sum", 2 * FP32_BYTES * logits)]
    bwd = [memory("cross_entropy.mul_grad", 2 * FP32_BYTES * logits)]
    if cast:
        bwd.append(memory("cross_entropy.cast_bwd", (FP32_BYTES + e) * logits))
    return OpWork(op=OpKind.LOSS, scope=Scope.LAST, fwd=tuple(fwd), bwd=tuple(bwd))


def _autocast_loss(logits: float, e: int) -> OpWork:
    """torch's cross-entropy on ``e``-byte logits under CUDA autocast (module docstring): 16-bit ``log_softmax``,
    then ``nll_loss`` on an fp32 cast of its output."""
    fwd = (memory("cross_entropy.log_softmax", 2 * e * logits), memory("cross_entropy.cast", (e + FP32_BYTES) * logits))
    bwd = (memory("cross_entropy.nll_loss_bwd", FP32_BYTES * logits),
           memory("cross_entropy.cast_bwd", (FP32_BYTES + e) * logits),
           memory("cross_entropy.log_softmax_bwd", 3 * e * logits))
    return OpWork(op=OpKind.LOSS, scope=Scope.LAST, fwd=fwd, bwd=bwd)
