"""What eager torch allocates when a mixed-precision model is trained the torch AMP way (``torch.autocast``
over fp32 parameters: ``mixed_precision autocast``, :attr:`Strategy.resolved_mixed_precision`) and what
``torch.optim.AdamW``'s unfused implementations allocate in their step (``optimizer_impl`` foreach or
for-loop, :meth:`Strategy.resolved_optimizer_impl`). Each term is read from torch 2.13.0's source and
measured on CPU (``executor/amp_memory.py``, docs/memory_measured.md):

- **Model states in the fp32 layout** (:func:`simulator.strategy.precision.state_dtype`). Autocast casts inside its region and leaves
  the parameters alone, so they stay fp32 and are their own master copy: parameters 4, gradients 4 (the
  ``.grad`` of an fp32 leaf is fp32), Adam moments 8 bytes per parameter. DDP's buckets are allocated in
  the gradients' dtype (``torch/nn/parallel/distributed.py``, ``gradient_as_bucket_view`` docstring: the
  buckets hold a copy of every gradient) [src: torch-ddp], so 4 more: 20 bytes per parameter, not the
  ZeRO paper's 2 + 2 + 12 + 2 of 16-bit weights and gradients.
- **The 16-bit weight copies** (:func:`cast_weight_bytes`). A matmul under autocast reads a 16-bit cast
  of its fp32 weight; ``at::autocast::cached_cast`` (``aten/src/ATen/autocast_mode.cpp``) keeps the cast
  of every fp32 leaf that requires grad in a cache until the outermost autocast region exits
  (``torch/amp/autocast_mode.py`` ``__exit__``: ``clear_autocast_cache()`` at nesting 0)
  [src: torch-autocast-cache], and autograd saves the cast as the matmul's input for backward. So at the
  end of a forward every weight a matmul read has a 16-bit copy alive, one per micro-batch whose backward
  is still pending; under full recomputation the forward saves nothing and the cache alone holds one
  copy until the forward's region exits. Embedding tables (``embedding`` is on no autocast list) and
  norm weights (``layer_norm``/``rms_norm`` are on the fp32 list, so their fp32 weights are read as they
  are) get no copy; a tied embedding does, through the output projection's matmul.
- **An fp32 residual stream** (:func:`residual_bytes`). ``embedding`` is on no autocast list, so the
  embedding output has the fp32 table's dtype, and each residual addition of a 16-bit branch output to
  it promotes to fp32: the block inputs are fp32, and so are the inputs the norms save (``layer_norm`` and
  ``rms_norm`` are on the fp32 list) [src: torch-autocast-cache]. The norms' outputs are fp32 too, but
  what the next matmul saves is its 16-bit cast.
- **The cross-entropy of 16-bit logits** (:func:`loss_kept_bytes_per_logit`,
  :func:`loss_working_bytes_per_logit`). ``cross_entropy`` is on no CUDA autocast list; it calls
  ``log_softmax(self, dim, self.scalar_type())`` (``aten/src/ATen/native/LossNLL.cpp``
  ``cross_entropy_loss_symint``), whose dtype is given, so autocast's ``fp32_set_opt_dtype`` leaves it
  16-bit, then ``nll_loss`` (fp32 list) on an fp32 cast of the log-probabilities. Autograd keeps the
  16-bit log-probabilities (``log_softmax``'s result) and the fp32 cast (``nll_loss``'s ``self``):
  e + 4 bytes per logit; in backward ``nll_loss_backward``'s dense fp32 gradient (4) is the working set,
  alive while both are [src: torch-autograd, torch-autocast-cache]. (torchtitan's
  ``cross_entropy(logits.float())``, the other frameworks' path, keeps 4 and works in 8:
  :func:`simulator.memory.activations.loss_working_bytes`.)
- **AdamW's foreach temporary** (:func:`optimizer_step_bytes`). On CUDA tensors ``torch.optim.AdamW``
  defaults to its foreach implementation (the torch frameworks' default, ``OptimizerImpl.FOREACH``), whose
  step allocates ``exp_avg_sq_sqrt =
  torch._foreach_sqrt(device_exp_avg_sqs)``: a copy of every second moment at once (``torch/optim/adam.py``
  ``_multi_tensor_adam``, line 790 at 2.13.0) [src: torch-adam-foreach], alive while the parameters are
  updated, after backward has freed the activations. On a CPU device the default is the single-tensor loop
  (``OptimizerImpl.FOR_LOOP``), whose ``(exp_avg_sq.sqrt() / bias_correction2_sqrt)`` holds two copies of
  one tensor's moment at a time. A fused kernel (``OptimizerImpl.FUSED``) updates in place.
"""

from __future__ import annotations

from simulator.memory.shapes import numel
from simulator.strategy.kinds import OptimizerImpl
from simulator.strategy.formats import state_dtype
from simulator.workload.kinds import DtypePolicy

SINGLE_TENSOR_ADAM_COPIES = 2
"""Moment-sized temporaries alive at once in ``torch.optim.Adam``'s single-tensor loop:
``exp_avg_sq.sqrt()`` and its quotient by ``bias_correction2_sqrt`` (``torch/optim/adam.py``
``_single_tensor_adam``, line 544 at 2.13.0) [src: torch-adam-foreach]."""

FP32_BYTES = 4
"""Bytes of an fp32 element: the residual stream's and ``nll_loss``'s cast under autocast."""

_NO_CAST = (".norm", "norm_f.", "embed.")
"""Name parts of the parameters no autocast matmul reads (norms, embedding tables; module docstring)."""


def cast_weight_numel(shapes) -> int:
    """Elements of the parameters a matmul reads under autocast, of ``[(name, shape), ...]`` named as
    :mod:`simulator.memory.shapes` names them: all but norms and embedding tables, plus the token
    embedding when it is tied to the output projection on the same rank (``norm_f`` there and no
    ``head.weight``). A bare parameter count (no names) counts every element."""
    names = {name for name, _ in shapes}
    tied_head = "norm_f.weight" in names and "head.weight" not in names
    total = 0
    for name, shape in shapes:
        if not any(part in name for part in _NO_CAST) or (tied_head and name == "embed.tok.weight"):
            total += numel(shape)
    return total


def cast_weight_bytes(shapes, *, dtype: DtypePolicy, autocast: bool) -> float:
    """Bytes of one set of autocast's 16-bit weight copies (0 unless the model is mixed precision under
    autocast): 16-bit bytes × :func:`cast_weight_numel`."""
    if state_dtype(dtype, autocast) is dtype:
        return 0.0
    return float(dtype.param_bytes * cast_weight_numel(shapes))


def optimizer_step_bytes(*, impl: OptimizerImpl, moment_bytes: float, largest_moment_bytes: float) -> float:
    """Temporaries of an AdamW step by ``impl`` on one rank whose Adam moments (two per parameter) total
    ``moment_bytes``: foreach, one copy of the second moments (half of them); the for-loop, two copies of the
    largest tensor's second moment; a fused in-place kernel, 0."""
    if impl is OptimizerImpl.FOREACH:
        return moment_bytes / 2
    return SINGLE_TENSOR_ADAM_COPIES * largest_moment_bytes if impl is OptimizerImpl.FOR_LOOP else 0.0


def _autocast(dtype: DtypePolicy, autocast: bool) -> bool:
    return state_dtype(dtype, autocast) is not dtype


def residual_bytes(dtype: DtypePolicy, autocast: bool) -> int:
    """Bytes per element of the residual stream (block inputs, norm inputs): fp32 under autocast, else
    the activation size."""
    return FP32_BYTES if _autocast(dtype, autocast) else dtype.activation_bytes


def loss_kept_bytes_per_logit(dtype: DtypePolicy, autocast: bool, upcast_bytes: int) -> int:
    """Bytes per logit autograd keeps for the cross-entropy: under autocast the 16-bit log-probabilities
    and ``nll_loss``'s fp32 input (e + 4); else ``upcast_bytes``, the fp32 log-probabilities of
    ``cross_entropy(logits.float())``."""
    return dtype.activation_bytes + FP32_BYTES if _autocast(dtype, autocast) else upcast_bytes


def loss_working_bytes_per_logit(dtype: DtypePolicy, autocast: bool) -> int | None:
    """Bytes per logit the cross-entropy holds beyond what it keeps, under autocast: the larger of the
    16-bit logits during the forward and ``nll_loss_backward``'s fp32 gradient (4); None when the
    model is not under autocast (the caller's own rule)."""
    return max(dtype.activation_bytes, FP32_BYTES) if _autocast(dtype, autocast) else None
