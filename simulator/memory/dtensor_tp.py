"""What torch's DTensor tensor parallelism keeps, where it differs from Megatron-LM's layers: the
tp > 1 plan torchtitan composes with FSDP2 (``Framework.FSDP2``), whose ``apply_tp`` parallelises
the output layer with
``ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)`` and
computes the loss under ``loss_parallel()`` whenever tp > 1 (``ParallelDims.loss_parallel_enabled``
is ``tp > 1 and enable_loss_parallel``, on unless ``--training.disable_loss_parallel``)
[src: torchtitan-tp-loss]. Three named terms, per micro-batch, with T = s·b tokens, e-byte
activations and L = T·ceil(V/t) local logits:

- **gathered block inputs** (:func:`gathered_block_input_elements`): with sequence parallelism the
  blocks' norms run on the sequence shard (``SequenceParallel``) and ``PrepareModuleInput`` all-gathers
  their outputs before the column-parallel matmuls (QKV, MLP up), which save the gathered tensors:
  per token 2h/t norm inputs + 2h gathered inputs, against Megatron's 4h/t (its layers keep the
  shards and gather again in backward). Measured exactly on CPU
  (``executor.memory_measure.tp_block_saved_bytes``, docs/memory_measured.md).

- **output-projection input** (:func:`head_projection_input_bytes`): ``ColwiseParallel``'s
  ``_prepare_input_fn`` redistributes the sequence-sharded final-norm output to ``Replicate`` (an
  all-gather) before the matmul (torch 2.13 ``torch/distributed/tensor/parallel/style.py`` lines
  115-118) [src: torch-dtensor-tp], and ``mm`` saves that gathered input for the weight's gradient
  (``derivatives.yaml``: ``mat2: mm_mat2_backward(grad, self, ...)``, line 1220) [src: torch-autograd]:
  T·h·e bytes, where Megatron's sequence-parallel linear keeps its T·h·e/t shard and gathers it again
  in backward (Korthikanti et al. 2022 §4.2.2). Without sequence parallelism both keep T·h·e.
- **loss-parallel working set** (:data:`LOSS_PARALLEL_WORKING_BYTES_PER_LOGIT`): torch's handlers
  in ``torch/distributed/tensor/parallel/loss.py`` (torch 2.13) [src: torch-loss-parallel].
  Forward, ``_log_softmax`` (lines 197-221) on the ``.float()`` copy x: ``shifted = x - x_max`` and
  ``torch.exp(shifted)`` are live with x and the e-byte logits, and the result then takes the
  exponential's place: e + 4 + 4 + 4 bytes per logit, of which the saved result (4) is the head's
  line already: e + 8 on top. Backward, ``_nll_loss_and_log_softmax_backward`` (lines 451-518):
  ``grad_input = torch.zeros_like(x)``, then ``(grad_input + torch.exp(x)) * grad_output``: the
  zeros, the exponential and their sum (then the sum, the product and the still-referenced zeros)
  are three fp32 logit-sized tensors next to the saved log-probabilities: 12 bytes per logit on top.
  torchtitan deletes the logits before ``loss.backward()`` (``del pred``, "need to free to before bwd
  to avoid peaking memory") [src: torchtitan-tp-loss]. The larger, 12 bytes for e <= 4, against 8
  for the eager cross-entropy on whole logits (:func:`simulator.memory.activations.loss_working_bytes`).

Not modelled here: the executor's tensor family all-gathers the logits instead of using
``loss_parallel`` (``executor.model.project_logits``), so its loss holds whole-vocabulary logits.
"""

from __future__ import annotations

from simulator.strategy.framework import Framework

LOGIT_FP32_BYTES = 4
"""Bytes of one fp32 logit: the loss works on the ``.float()`` copy [src: torchtitan-tp-loss]."""
LOSS_PARALLEL_BACKWARD_LIVE = 3
"""fp32 logit-sized tensors ``_nll_loss_and_log_softmax_backward`` holds at once besides the saved
log-probabilities: ``zeros_like(x)``, ``exp(x)`` and their sum (then the sum, the product and the
zeros) [src: torch-loss-parallel]."""
LOSS_PARALLEL_WORKING_BYTES_PER_LOGIT = LOSS_PARALLEL_BACKWARD_LIVE * LOGIT_FP32_BYTES
"""The backward's 12 bytes per logit on top of the saved 4 (the forward's e + 8 is smaller for e <= 4)."""


def uses_dtensor_tp(framework: Framework, tp: int) -> bool:
    """True when the blocks, the output layer and the loss are torch's DTensor ones (module docstring):
    FSDP2 with tensor parallelism, as torchtitan runs it. Megatron-LM, DeepSpeed (Megatron's layers) and
    torch DDP (no tensor-parallel recipe with a sharded loss) keep the other formulas."""
    return framework is Framework.FSDP2 and tp > 1


def gathered_block_input_elements(hidden: int, tp: int, sp: bool, dtensor: bool) -> float:
    """Elements per token one block keeps for its two norms' inputs and outputs (the column-parallel
    matmuls' inputs): 4h/t under Megatron's sequence parallelism, 2h/t + 2h under torch's (the outputs
    are saved gathered), 4h without sequence parallelism (module docstring)."""
    if not sp:
        return 4.0 * hidden
    return 2.0 * hidden / tp + 2.0 * hidden * (1 if dtensor else 1 / tp)


def loss_parallel_working_bytes(*, tokens: int, local_vocab: int, activation_bytes: int) -> float:
    """Bytes ``loss_parallel``'s cross-entropy holds on top of the saved fp32 log-probabilities:
    max(forward e + cast + 4, backward 12) per local logit, cast = 4 unless the logits are already fp32
    (then ``.float()`` and ``x.to(float32)`` return the same tensor) (module docstring)."""
    cast = LOGIT_FP32_BYTES if activation_bytes != LOGIT_FP32_BYTES else 0
    forward = activation_bytes + cast + LOGIT_FP32_BYTES
    return float(tokens * local_vocab * max(forward, LOSS_PARALLEL_WORKING_BYTES_PER_LOGIT))


def head_projection_input_bytes(*, tokens: int, hidden: int, activation_bytes: int, tp: int, sp: bool,
                                dtensor: bool) -> float:
    """Bytes the output projection saves for its weight gradient: its input, T·h·e; split over tp only
    under Megatron's sequence parallelism (module docstring)."""
    return tokens * hidden * activation_bytes / (tp if sp and not dtensor else 1)
