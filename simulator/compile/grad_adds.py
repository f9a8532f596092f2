"""Which gradient-accumulation add a strategy's framework makes on the compute stream, in which formats
(:class:`simulator.workload.grad_accum.GradAdd`; the kernel and its sources are there).

- torch DDP (ZeRO 0-1): autograd's ``AccumulateGrad`` into ``.grad``, accumulator and gradient in the states'
  format (:func:`simulator.strategy.formats.sync_dtype`: fp32 under autocast, else the model's).
- Megatron-LM with ``unfused_grad_accumulation``: the new gradient in the parameters' format added into
  ``main_grad`` in the gradient-reduction format (:func:`simulator.strategy.formats.grad_reduce_dtype`); without
  it the weight-gradient GEMM accumulates (Megatron-Core's ``gradient_accumulation_fusion``): none.
- FSDP2 (FSDP1 alike) and DeepSpeed: none on the compute stream.

Where ``.grad`` is None when a step's first backward runs (``zero_grad(set_to_none=True)``), autograd's
``AccumulateGrad`` hands that micro-batch's gradient over instead of adding it [src: torch-eager-decompositions]:
one add per step fewer than the per-micro-batch kernels charge, credited once per step in the optimizer phase
(:func:`first_add_bytes_per_param`; one compiled micro-batch still serves every batch). That is torch DDP under
the executor's tensor/pipeline family (``executor/strategies/parallel.py``, ``ParallelRunner.train_step``:
``zero_grad(set_to_none=True)``, tp > 1 or pp > 1; its data-parallel family keeps ``.grad`` with
``set_to_none=False``) and Megatron-LM 2021's unbuffered path (``megatron_unbuffered_grads``: the optimizer's
``zero_grad(set_to_none=True)`` [src: megatron-2021-fp16-optimizer]). Megatron's ``main_grad`` buffers are zeroed,
not freed, and added into every micro-batch [src: megatron-ddp-main-grad]: no credit.
"""

from __future__ import annotations

from simulator.strategy import Framework, ParallelLayout
from simulator.strategy.formats import grad_reduce_dtype, sync_dtype
from simulator.workload.grad_accum import GradAdd
from simulator.workload.kinds import DtypePolicy


def grad_add(dtype: DtypePolicy, layout: ParallelLayout) -> GradAdd | None:
    """The add of a model of ``dtype`` under ``layout``'s strategy and framework (module docstring)."""
    s, framework = layout.strategy, layout.framework
    states = sync_dtype(dtype, s).grad_bytes
    if framework is Framework.TORCH_DDP:
        return GradAdd(accumulator_bytes=states, gradient_bytes=states)
    if framework is Framework.MEGATRON and s.unfused_grad_accumulation:
        return GradAdd(accumulator_bytes=grad_reduce_dtype(dtype, s).grad_bytes, gradient_bytes=states)
    return None


def first_assigns(layout: ParallelLayout) -> bool:
    """Whether a step's first micro-batch assigns ``.grad`` instead of adding into it (module docstring)."""
    s, framework = layout.strategy, layout.framework
    if framework is Framework.TORCH_DDP:
        return layout.tp > 1 or layout.pp > 1
    return framework is Framework.MEGATRON and s.megatron_unbuffered_grads


def first_add_bytes_per_param(dtype: DtypePolicy, layout: ParallelLayout) -> int:
    """Bytes per held parameter of the add a step does not make where :func:`first_assigns` (its
    ``2·b_acc + b_grad``); 0 elsewhere."""
    add = grad_add(dtype, layout)
    return add.bytes_per_param if add is not None and first_assigns(layout) else 0
