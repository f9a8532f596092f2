"""Context parallelism: one sample's sequence split over ``cp`` ranks, and what that does to a block.

Every token-wise operation (norms, projections, MLP, element-wise kernels, the embedding, logits
and loss) runs on ``s/cp`` tokens per rank; the weights are replicated over the cp ranks. Only the
attention core needs the other ranks' tokens, in one of two ways (:class:`ContextKind`):

- **ring** (Liu et al. 2023, "Ring Attention" [src: liu-2023]; Transformer Engine's ``p2p``
  ``cp_comm_type`` [src: te-context-parallel]): in cp steps each rank attends its queries to one
  KV block while it passes the block it holds to the next rank of the ring, so the transfer of
  step i overlaps the attention of step i. The attention work of a rank is ``1/cp`` of the
  sequence's, times the causal imbalance below.
- **all-to-all** (DeepSpeed-Ulysses, Jacobs et al. 2023 [src: jacobs-2023]; TE's ``a2a``): an
  all-to-all turns Q, K, V from sequence-split into head-split before the attention core and one
  turns the output back; each rank runs full-sequence attention on ``heads/cp`` heads, so the heads
  (after tp) must divide by cp. No causal imbalance (every head sees the whole causal triangle).

Causal load balance: with a causal mask, query block j of a ring over cp contiguous blocks
attends to blocks 0..j, so the last rank does ``cp − ½`` block units (a diagonal block is half
masked) against a mean of ``cp/2``: it is ``2 − 1/cp`` times the mean, and the lockstep ring waits
for it. Megatron-Core splits the sequence into ``2·cp`` chunks and gives rank r chunks r and
``2cp − 1 − r`` (``get_batch_on_this_cp_rank`` [src: megatron-cp]); torch's ``context_parallel``
(torchtitan) does the same head-tail split [src: torch-context-parallel]: every rank then does
``(r + ½) + (2cp − 1 − r + ½) = 2cp`` small-block units, the mean — balanced, and the sequence must
divide into ``2·cp`` chunks.

Who runs the ring (:class:`RingRuntime`) decides what a ring step costs besides its attention kernel:
torch's ``context_parallel`` (torchtitan, the torch frameworks) merges each step's partial output and
accumulates the gradients in fp32 with torch operators (:mod:`simulator.workload.ring_steps`); Transformer
Engine's ``p2p`` does it inside its own kernels, not charged here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from simulator.enum_kind import Kind

__all__ = ["ContextKind", "ContextSplit", "NO_CONTEXT_SPLIT", "RingRuntime", "context_split"]


class ContextKind(Kind):
    """How the attention core of a context-parallel group sees the other ranks' tokens."""

    RING = "ring"
    """Ring attention: KV blocks passed around the cp ring, each transfer overlapped with the
    attention of one block (TE ``cp_comm_type="p2p"``)."""
    ALL_TO_ALL = "all-to-all"
    """DeepSpeed-Ulysses: all-to-all of Q, K, V to head-split before attention and of the output back
    after it (TE ``cp_comm_type="a2a"``); blocking."""


class RingRuntime(Kind):
    """The software that runs a ring's steps (:mod:`simulator.workload.ring_steps`)."""

    FUSED = "fused"
    """Transformer Engine's ``p2p`` (Megatron-Core) and any runtime whose merges and gradient sums run inside its
    attention kernels: only the per-step attention kernels are charged."""
    TORCH = "torch"
    """torch's ``context_parallel`` (``torch/distributed/tensor/experimental/_attention.py``), which torchtitan
    uses: each step's output merged into an fp32 running output by ``_SDPAMerger``, the backward's gradients
    summed in fp32, the last dK/dV hand-on waited for after the loop [src: torch-context-parallel]."""


@dataclass(frozen=True)
class ContextSplit:
    """A sample's sequence split over ``degree`` context-parallel ranks."""

    degree: int = 1
    kind: ContextKind = ContextKind.RING
    balanced: bool = True
    """Causal load balancing by the 2·cp chunk split (module docstring); ring only."""
    runtime: RingRuntime = RingRuntime.FUSED
    """Who runs the ring's steps (ring only; the torch frameworks: :attr:`RingRuntime.TORCH`)."""

    @property
    def imbalance(self) -> float:
        """Slowest rank's attention work over the mean: 1, or ``2 − 1/cp`` for an unbalanced causal ring."""
        if self.degree == 1 or self.kind is ContextKind.ALL_TO_ALL or self.balanced:
            return 1.0
        return 2.0 - 1.0 / self.degree

    def chunks(self) -> int:
        """Pieces the sequence is cut into: ``2·cp`` balanced ring, ``cp`` otherwise (1 without cp)."""
        if self.degree == 1:
            return 1
        return 2 * self.degree if self.kind is ContextKind.RING and self.balanced else self.degree


NO_CONTEXT_SPLIT = ContextSplit()
"""No context parallelism (cp = 1)."""


@lru_cache(maxsize=None, typed=True)  # typed: 1, 1.0 and True are not one key
def context_split(degree: int, kind: ContextKind, balanced: bool,
                  runtime: RingRuntime = RingRuntime.FUSED) -> ContextSplit:
    """``ContextSplit(degree, kind, balanced, runtime)``, one object per distinct value: a search's memo keys hold the
    split (``ComputeOptions.context``) and compare it by value thousands of times, which the same object answers at
    once."""
    return ContextSplit(degree, kind, balanced, runtime)
