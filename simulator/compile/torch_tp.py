"""The collectives torch's own tensor parallelism (DTensor, ``parallelize_module``) issues, as this project's
executor plans it (``executor/strategies/tensor.py``, ``executor.model.project_logits``).

Megatron-LM's tensor parallelism (:func:`simulator.compile.comm_part.tp_calls`) keeps a vocabulary-parallel loss and
an explicit all-reduce of the sequence-parallel norms' gradients. Under torch's DTensor plan the list differs,
counted per micro-batch on a fake 2-rank group (every functional collective counted; ``tests/test_torch_tp_calls.py``
and docs/validation.md, "Tensor-parallel cases") [src: own-tp-group-probe]:

- without sequence parallelism, forward: the vocabulary-parallel embedding's all-reduce (first chunk), 2 per block
  (``RowwiseParallel`` outputs), and the **all-gather of the logits' vocabulary slices** before the ordinary
  cross-entropy (last chunk, ``project_logits``'s ``full_tensor``: ``b·s·V`` elements); backward: 2 per block
  (``ColwiseParallel`` input gradients) and the output layer's input gradient (last chunk);
- with sequence parallelism, forward: the embedding's all-reduce (first chunk), per block all-gather and
  reduce-scatter of each region, the **all-gather of the last block's sequence shards** (every chunk,
  ``sp_gather_output``) and the logits' all-gather (last chunk); backward: per block the regions' reduce-scatter
  and all-gather, the output layer's input-gradient all-reduce (last chunk) and the **all-gather of the first
  block's input gradient** from its sequence shard (every chunk: the first block's ``PrepareModuleInput``);
- with sequence parallelism the norms' parameters are replicated DTensors whose gradients stay ``Partial``; torch's
  for-loop AdamW reads each gradient :data:`ADAMW_GRAD_READS` times (``exp_avg.lerp_(grad)``,
  ``addcmul_(grad, grad)``: ``torch/optim/adam.py`` lines 456 and 475, torch 2.13 [src: torch-adam-impl]), and
  every read redistributes it to ``Replicate``: one all-reduce each, inside ``optimizer.step()``
  (:func:`sp_optimizer_s`).

Each of these calls pays the wait for a core measured inside the tp model where the cluster has one
(``comm.dtensor_wait_us``, :mod:`simulator.cluster.dtensor_wait`), not the calibration sweep's.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.cluster.dtensor_wait import dtensor_call_s
from simulator.collectives.base import Op
from simulator.compile import comm_part
from simulator.work import CommKind

ADAMW_GRAD_READS = 3
"""Reads of a parameter's gradient in one step of torch's single-tensor AdamW (module docstring)."""

SP_NORMS_PER_BLOCK = ("norm1", "norm2")
"""The block modules the sequence-parallel plan runs as ``SequenceParallel`` (``executor.strategies.tensor``)."""

TP_BLOCK_MODULES = ("attn.qkv", "attn.out", "mlp.up", "mlp.down")
"""The block modules whose parameters ``parallelize_module`` makes DTensors (``executor.strategies.tensor``'s
``block_plan``; :data:`simulator.framework_host.TP_MODULES_PER_BLOCK`)."""
TP_EDGE_TENSORS = ("embed.tok.weight", "head.weight")
"""The vocabulary-parallel embedding's and output layer's weights (``shard_vocab``)."""


def applies(layout) -> bool:
    """torch's own tensor parallelism: the torch framework (not Megatron-LM, DeepSpeed, FSDP2-only) at tp > 1
    (:func:`simulator.framework_host.tp_modules`'s rule)."""
    from simulator.strategy.framework import Framework

    return layout.tp > 1 and layout.framework is Framework.TORCH_DDP


def calls(cache, group: tuple[int, ...], nbytes: int, logits_bytes: int, *, sp: bool, layers: int, first: bool,
          last: bool, full_recompute: bool, concurrent: int) -> tuple[tuple, tuple]:
    """(forward calls, backward calls) of one chunk's micro-batch on its tp group (module docstring); ``nbytes`` the
    chunk's boundary activation (``b·s·h``), ``logits_bytes`` the gathered logits (``b·s·V``); full recomputation
    repeats each block's forward calls in its backward."""
    def one(op: Op, size: int):
        return dtensor_call(cache, op, group, size, concurrent, sp)
    ar, ag = one(Op.ALL_REDUCE, nbytes), one(Op.ALL_GATHER, nbytes)
    logits = one(Op.ALL_GATHER, logits_bytes)
    if sp:
        rs = one(Op.REDUCE_SCATTER, nbytes)
        block_fwd = block_bwd = (ag, rs, ag, rs)
        chunk_fwd, chunk_bwd = (ag,), (ag,)
    else:
        block_fwd = block_bwd = (ar, ar)
        chunk_fwd = chunk_bwd = ()
    fwd = (ar,) * first + block_fwd * layers + chunk_fwd + (logits,) * last
    bwd = (ar,) * last + ((block_fwd if full_recompute else ()) + block_bwd) * layers + chunk_bwd
    if ar is not None and ag is not None and logits is not None and (not sp or rs is not None):
        return fwd, bwd  # no call to drop (a chunk of 96 blocks has ~800: not filtered one by one)
    return tuple(c for c in fwd if c is not None), tuple(c for c in bwd if c is not None)


def chunk_tp_calls(cache, group: tuple[int, ...], nbytes: int, *, logits_bytes: float | None,
                   attention_only: int, sp: bool, layers: int, first: bool, last: bool, full_recompute: bool,
                   concurrent: int) -> tuple[tuple, tuple]:
    """A chunk's (forward, backward) tp calls: DTensor's own list (:func:`calls`) where ``logits_bytes`` is
    given (torch's tensor parallelism), else :func:`comm_part.tp_calls`. Both are functions of their arguments and
    the cache's cluster, so the pair is remembered per all of them (GPT-3 on 1,024 A100s, 5,000 candidates: 6,400
    asks of 2,792 distinct)."""
    args = dict(sp=sp, layers=layers, first=first, last=last, full_recompute=full_recompute, concurrent=concurrent)
    key = ("tp calls", group, nbytes, logits_bytes, attention_only, sp, layers, first, last, full_recompute,
           concurrent)
    if logits_bytes is not None:
        return cache.memo(key, lambda: calls(cache, group, nbytes, logits_bytes, **args))
    return cache.memo(key, lambda: comm_part.tp_calls(cache, group, nbytes, attention_only=attention_only, **args))


def dtensor_call(cache, op: Op, group: tuple[int, ...], nbytes: float, concurrent: int, sp: bool = False):
    """One DTensor collective of the tp group: :func:`simulator.compile.comm_part.call`'s, its wait for a core the
    one measured inside the tp model (``sp``: a forward or backward call with sequence parallelism) where the cluster
    has it (:func:`simulator.cluster.dtensor_wait.dtensor_call_s`); None where it costs nothing."""
    c = comm_part.call(cache, CommKind.TP, op, group, nbytes, concurrent)
    if c is None:
        return None
    time_s = dtensor_call_s(cache.cluster, op, len(group), c.time_s, sp)
    return c if time_s == c.time_s else replace(c, time_s=time_s)


def sp_norm_tensors(workload, layout, stage: int, shapes=None) -> int:
    """Parameter tensors of pipeline stage ``stage`` in the blocks' sequence-parallel norms (module docstring);
    ``shapes``: the stage's :func:`simulator.memory.stage_param_shapes`, if already named."""
    from simulator.memory import stage_param_shapes

    if not getattr(workload, "has_activation_shapes", False):
        return 0
    shapes = stage_param_shapes(workload, tp=layout.tp, pp=layout.pp, stage=stage,
                                layers=layout.layer_indices(stage), ep=layout.ep) if shapes is None else shapes
    return sum(1 for name, _ in shapes if name.startswith("layers.") and name.split(".")[2] in SP_NORMS_PER_BLOCK)


def dtensor_tensors(workload, layout, stage: int, shapes=None) -> int:
    """Parameter tensors of pipeline stage ``stage`` that torch's tensor parallelism keeps as DTensors: the
    :data:`TP_BLOCK_MODULES`' weights and biases, :data:`TP_EDGE_TENSORS`, and with sequence parallelism the norms
    (:data:`SP_NORMS_PER_BLOCK`); the rest (position table, final norm, the norms without SP) stay plain tensors.
    Counted on the executor's tiny tp model: 17 of 28 tensors, 25 with SP [src: own-tp-group-probe]. ``shapes``: as
    :func:`sp_norm_tensors`'."""
    from simulator.memory import stage_param_shapes

    if not (applies(layout) and getattr(workload, "has_activation_shapes", False)):
        return 0
    shapes = stage_param_shapes(workload, tp=layout.tp, pp=layout.pp, stage=stage,
                                layers=layout.layer_indices(stage), ep=layout.ep) if shapes is None else shapes
    modules = TP_BLOCK_MODULES + (SP_NORMS_PER_BLOCK if layout.sequence_parallel else ())
    return sum(1 for name, _ in shapes if name in TP_EDGE_TENSORS or (
        name.startswith("layers.") and ".".join(name.split(".")[2:-1]) in modules))


def sp_optimizer_s(cache, workload, layout, stage: int, group: tuple[int, ...], param_bytes: float,
                   concurrent: int) -> float:
    """Seconds of the all-reduces torch's AdamW issues on the sequence-parallel norms' ``Partial`` gradients
    (module docstring): :data:`ADAMW_GRAD_READS` per norm tensor, each a blocking call of ``h`` elements; 0 without
    sequence parallelism or outside torch's tensor parallelism."""
    if not (applies(layout) and layout.sequence_parallel):
        return 0.0
    tensors = sp_norm_tensors(workload, layout, stage, comm_part.stage_shapes(cache, workload, layout, stage))
    one = dtensor_call(cache, Op.ALL_REDUCE, group, workload.hidden * param_bytes, concurrent)
    return 0.0 if one is None else ADAMW_GRAD_READS * tensors * one.time_s
