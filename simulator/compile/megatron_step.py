"""Megatron-LM's per-step passes over gradients and parameters outside Adam's own kernel, under its local DDP
without contiguous gradient buffers (strategy field ``megatron_unbuffered_grads``: the 2021 ``--fp16`` runs of
Narayanan et al.), as the code of that era runs them on the compute stream once per step
[src: megatron-2021-fp16-optimizer, megatron-ddp-main-grad].

With ``b`` the bytes of the model's gradients and parameters (2 in fp16), per parameter the rank holds:

- ``DistributedDataParallel.allreduce_gradients`` without buffers: ``_flatten_dense_tensors`` of the
  gradients (read ``b``, write ``b``), ``coalesced /= dp`` (read, write), the all-reduce, then
  ``buf.copy_(synced)`` back into each ``.grad`` (read, write): ``6·b``. It runs at every dp size.
- ``FP16OptimizerWithFP16Params.step``: ``_copy_model_grads_to_main_grads`` (one ``multi_tensor_scale`` by 1.0
  from the fp16 gradients into fp32 main gradients: read ``b``, write 4); ``_unscale_main_grads_and_check_for_nan``
  (``torch._amp_foreach_non_finite_check_and_unscale_`` over the fp32 main gradients: read 4, write 4);
  ``clip_grad_norm_fp32``'s ``multi_tensor_l2norm`` (read 4; Megatron's ``--clip-grad`` defaults to 1.0); Adam
  (:func:`simulator.compile.offload_part.adam_bytes_per_param`, not here); ``_copy_main_params_to_model_params``
  (``multi_tensor_scale`` from the fp32 main parameters: read 4, write ``b``). An fp32 model
  (``FP32Optimizer``) has only the norm. That code keeps unbuffered gradients only for fp16 models (``--bf16``
  forced fp32 accumulation into buffers [src: megatron-grad-reduce-fp32]), so a bf16 model under this field is
  taken as the fp16 run it stands for (the same 2-byte formats, the loss scaler's pass included).

fp16: ``6·2 + (2 + 4) + 8 + 4 + (4 + 2) = 36`` bytes per parameter per step, at the achievable HBM bandwidth like
every memory-bound kernel. The optimizer's ``zero_grad(set_to_none=True)`` (its default; ``train_step`` calls
``optimizer.zero_grad()`` when there are no buffers) leaves ``.grad`` unset, so autograd's first micro-batch of
each step assigns its gradient instead of adding it: one add of ``3·b`` fewer per step than the backward passes
charge, credited with the other frameworks' (:func:`simulator.compile.grad_adds.first_add_bytes_per_param`):
30 bytes net. Not charged: ``clip_grad_norm_fp32``'s scaling pass, which runs only
when the norm exceeds the clip; ``train_step``'s all-reduce of the tied word-embedding gradient between the first
and last pipeline stages (``V·h/t`` gradients once per step; charged for torch's pipelines by
:func:`simulator.compile.tied_embedding.tied_embedding_sync`, not for Megatron-LM's yet). Megatron's buffered DDP and distributed optimizer have passes of
their own (the main-to-model parameter copy, the norm) that are not charged yet.
"""

from __future__ import annotations

from simulator.strategy import Strategy
from simulator.workload.kinds import DtypePolicy

__all__ = ["step_bytes_per_param"]

FP32_BYTES = 4
"""Bytes of an fp32 main gradient or main parameter element."""


def step_bytes_per_param(dtype: DtypePolicy, s: Strategy) -> int:
    """Bytes per parameter the rank holds that Megatron-LM's unbuffered path moves once per step (module
    docstring); 0 for every other strategy."""
    if not s.megatron_unbuffered_grads:
        return 0
    b = dtype.grad_bytes
    ddp = 3 * 2 * b                               # flatten, divide, copy back
    norm = FP32_BYTES                             # multi_tensor_l2norm over the main gradients
    if dtype.master_bytes == 0:                   # FP32Optimizer: the gradients are the main gradients
        return ddp + norm
    grad_copy = b + FP32_BYTES
    unscale = 2 * FP32_BYTES                      # the loss scaler's unscale and inf check
    param_copy = FP32_BYTES + dtype.param_bytes
    return ddp + grad_copy + unscale + norm + param_copy
