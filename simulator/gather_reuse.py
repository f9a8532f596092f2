"""Which of a chunk's pipeline actions all-gather its sharded parameters, when torch's pipelining runtime keeps them.

FSDP2 re-gathers a module's parameters only when they are sharded: ``FSDPParamGroup.unshard`` returns at once when
``is_unsharded`` (``pre_forward`` and ``pre_backward`` both call it); ``post_forward`` reshards only under
``reshard_after_forward=True`` (ZeRO-3), ``post_backward`` only when ``reshard_after_backward`` is set
(``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``, ``unshard`` 372-376, ``reshard`` 499-509,
``post_backward`` 606-611) [src: torch-fsdp2]. torch's pipelining runtime sets ``reshard_after_backward(False)``
on the stage before **every** backward and turns it back on only in ``perform_reduce_grad``, after the stage's
last backward of the step (``PipelineStage.backward_maybe_with_nosync``) [src: torch-pipelining-fsdp-sync]; NeMo
AutoModel's MoE models only at the optimizer step's last backward [src: automodel-fsdp-pp-sync]. So, per
``fully_shard`` module over one step:

- ZeRO-2 (``reshard_after_forward=False``), :attr:`GatherReuse.STEP`: the chunk's first forward gathers, nothing
  else does (one gather per module per step, not one per micro-batch);
- ZeRO-3, :attr:`GatherReuse.UNTIL_FORWARD`: each forward reshards after itself, a backward keeps what it gathered:
  an action gathers iff the chunk's previous compute action of the step was a forward (or it is the first), so a
  forward that follows one of the chunk's backwards finds the parameters gathered, and of the cool-down's backwards
  only the first gathers: m + 1 gathers per module per step (against 2m without pipelining).

Counted on the executor's own stage wrapping and torch's runtime (``tests/test_gather_reuse.py``: 3 modules, 1F1B,
the second step: ZeRO-2 3 gathers for any m; ZeRO-3 3·(m + 1), all but the first forward's in backward).
The one home of the rule: the DES applies :func:`gathers` action by action (:mod:`simulator.engine.rank`), the
closed form the fractions :func:`gather_shares` counts with it over the same action list.
"""

from __future__ import annotations

from simulator.enum_kind import Kind
from simulator.schedules import Action, ActionKind


class GatherReuse(Kind):
    """How long a chunk's gathered parameters stay gathered (module docstring)."""

    EVERY = "every"
    """Resharded after every backward (and, ZeRO-3, every forward): each action runs its gathers (no pipelining)."""
    STEP = "step"
    """Gathered by the chunk's first forward and kept to the step's end (FSDP2 ZeRO-2 under torch's pipelining)."""
    UNTIL_FORWARD = "until-forward"
    """Resharded after each forward, kept after a backward (FSDP2 ZeRO-3 under torch's pipelining)."""


def gathers(reuse: GatherReuse, kind: ActionKind, previous: ActionKind | None) -> bool:
    """Whether an action of ``kind`` runs its chunk's gathers, the chunk's previous F / B / I action of the step
    being ``previous`` (None: none yet). A W runs none (the input half before it left the parameters gathered)."""
    if reuse is GatherReuse.EVERY:
        return True
    if kind is ActionKind.W:
        return False
    if reuse is GatherReuse.STEP:
        return previous is None
    return previous is None or previous is ActionKind.F


def gather_shares(reuse: GatherReuse, actions: list[Action] | tuple[Action, ...], stage: int) -> tuple[float, float]:
    """(share of the chunk's forwards that gather, share of its backwards that do) over ``actions`` (the rank's
    list of the step) for global stage ``stage``: :func:`gathers` action by action, so the closed form charges what
    the DES plays."""
    previous, counts = None, [0, 0, 0, 0]  # forwards, gathering forwards, backwards, gathering backwards
    for act in actions:
        if act.stage != stage or act.kind is ActionKind.W:
            continue
        i = 0 if act.kind is ActionKind.F else 2
        counts[i] += 1
        counts[i + 1] += gathers(reuse, act.kind, previous)
        previous = act.kind
    return (counts[1] / counts[0] if counts[0] else 1.0), (counts[3] / counts[2] if counts[2] else 1.0)
