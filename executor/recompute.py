"""Activation recomputation and the attention implementation, applied to an ``executor.model.GPT``.

- ``Recompute.FULL``: every block's forward runs under ``torch.utils.checkpoint.checkpoint``
  (non-reentrant): only the block input is kept, backward reruns the block.
- ``Recompute.SELECTIVE``: only the attention core (``Attention.core``: scores, softmax, ·V) is
  checkpointed, as Korthikanti et al. 2022 §5 recompute it.
- ``Recompute.SELECTIVE_OP``: every block's forward runs under a non-reentrant checkpoint with
  torchtitan's op-level selective policy (:func:`op_level_context`): the outputs of every other
  matmul of the block and of the fused attention kernel are kept, the rest is recomputed
  (``torch.utils.checkpoint.create_selective_checkpoint_contexts``) [src: torchtitan-op-sac].
  This GPT fuses Q, K and V into one matmul, so its kept set is its own block's (QKV, MLP-in),
  not the separate wq/wv/w1/w2 the simulator counts for torchtitan's Llama.
- ``AttentionKind.EAGER``: the core materialises the scores instead of calling fused SDPA.

The ``recompute`` phase (:class:`RecomputeClock`): the checkpointed function is timed when it runs
inside autograd's backward (``torch._C._current_graph_task_id() != -1``, the test torch's own
checkpoint code uses), i.e. when the checkpoint reruns it; its first run, in the forward, is not
counted. Families subtract it from their backward time.

Apply before any FSDP2 ``fully_shard`` (torch's documented order: checkpoint the module, then shard
it), so the recomputed forward finds its parameters unsharded by FSDP2's pre-backward hook.
"""

from __future__ import annotations

import time
from collections import Counter
from functools import partial

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from simulator.strategy import AttentionKind
from simulator.workload import Recompute


class RecomputeClock:
    """Seconds spent re-running checkpointed functions inside backward, less what ``exclude`` (an object
    with a ``seconds`` counter, e.g. ``executor.phase_clock.TpClock``) counted meanwhile."""

    def __init__(self, exclude=None):
        self.seconds = 0.0
        self.exclude = exclude

    def _excluded(self) -> float:
        return 0.0 if self.exclude is None else self.exclude.seconds

    def wrap(self, fn):
        def run(*args, **kwargs):
            if torch._C._current_graph_task_id() == -1:  # the forward's own run, not a recomputation
                return fn(*args, **kwargs)
            cuda = any(torch.is_tensor(a) and a.is_cuda for a in args)
            if cuda:
                torch.cuda.synchronize()
            ex0, start = self._excluded(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if cuda:
                    torch.cuda.synchronize()
                self.seconds += time.perf_counter() - start - (self._excluded() - ex0)
        return run


_MATMULS = frozenset({torch.ops.aten.mm.default, torch.ops.aten.addmm.default})
"""The block's matmuls as the dispatcher sees them (a linear with a bias on a flattened input is addmm)."""
_ATTENTION = frozenset({torch.ops.aten._scaled_dot_product_flash_attention.default,
                        torch.ops.aten._scaled_dot_product_efficient_attention.default,
                        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default})
"""Fused attention kernels whose outputs the op-level policy keeps."""


def op_level_context():
    """The (forward, recompute) contexts of one checkpointed block under the op-level policy: keep a
    matmul's output when it is the block's 1st, 3rd, 5th ... matmul of that pass, and every fused
    attention kernel's; recompute everything else."""
    counts = Counter()

    def policy(ctx, op, *args, **kwargs):
        if op in _MATMULS:
            counts[ctx.is_recompute] += 1
            keep = counts[ctx.is_recompute] % 2 == 1
        else:
            keep = op in _ATTENTION
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _checkpointed(fn, clock: RecomputeClock | None, **options):
    return partial(checkpoint, fn if clock is None else clock.wrap(fn), use_reentrant=False, **options)


def apply_recompute(model, recompute: Recompute, clock: RecomputeClock | None = None) -> None:
    """Wrap ``model``'s blocks (FULL, SELECTIVE_OP) or attention cores (SELECTIVE) in checkpoints, in place; ``clock``
    (if given) accumulates the recomputation's seconds."""
    for block in model.layers:
        if recompute is Recompute.FULL:
            block.forward = _checkpointed(block.forward, clock)
        elif recompute is Recompute.SELECTIVE:
            block.attn.core = _checkpointed(block.attn.core, clock)
        elif recompute is Recompute.SELECTIVE_OP:
            block.forward = _checkpointed(block.forward, clock, context_fn=op_level_context)


def apply_attention(model, attention: AttentionKind) -> None:
    """Fused SDPA (FLASH) or the unfused core (EAGER) in every block, in place."""
    for block in model.layers:
        block.attn.eager = attention is AttentionKind.EAGER
