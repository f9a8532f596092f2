"""Activation recomputation and the attention implementation, applied to an ``executor.model.GPT``.

- ``Recompute.FULL``: every block's forward runs under ``torch.utils.checkpoint.checkpoint``
  (non-reentrant): only the block input is kept, backward reruns the block.
- ``Recompute.SELECTIVE``: only the attention core (``Attention.core``: scores, softmax, ·V) is
  checkpointed, as Korthikanti et al. 2022 §5 recompute it.
- ``AttentionKind.EAGER``: the core materialises the scores instead of calling fused SDPA.

Apply before any FSDP2 ``fully_shard`` (torch's documented order: checkpoint the module, then shard
it), so the recomputed forward finds its parameters unsharded by FSDP2's pre-backward hook.
"""

from __future__ import annotations

from functools import partial

from torch.utils.checkpoint import checkpoint

from simulator.strategy import AttentionKind
from simulator.workload import Recompute


def _checkpointed(fn):
    return partial(checkpoint, fn, use_reentrant=False)


def apply_recompute(model, recompute: Recompute) -> None:
    """Wrap ``model``'s blocks (FULL) or attention cores (SELECTIVE) in checkpoints, in place."""
    for block in model.layers:
        if recompute is Recompute.FULL:
            block.forward = _checkpointed(block.forward)
        elif recompute is Recompute.SELECTIVE:
            block.attn.core = _checkpointed(block.attn.core)


def apply_attention(model, attention: AttentionKind) -> None:
    """Fused SDPA (FLASH) or the unfused core (EAGER) in every block, in place."""
    for block in model.layers:
        block.attn.eager = attention is AttentionKind.EAGER
