"""Which gradient-accumulation add a strategy's framework makes on the compute stream, in which formats
(:class:`simulator.workload.grad_accum.GradAdd`; the kernel and its sources are there).

- torch DDP (ZeRO 0-1): autograd's ``AccumulateGrad`` into ``.grad``, accumulator and gradient in the states'
  format (:func:`simulator.strategy.formats.sync_dtype`: fp32 under autocast, else the model's).
- Megatron-LM with ``unfused_grad_accumulation``: the new gradient in the parameters' format added into
  ``main_grad`` in the gradient-reduction format (:func:`simulator.strategy.formats.grad_reduce_dtype`); without
  it the weight-gradient GEMM accumulates (Megatron-Core's ``gradient_accumulation_fusion``): none.
- FSDP2 (FSDP1 alike) and DeepSpeed: none on the compute stream.
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
