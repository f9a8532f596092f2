"""Which parameter tensors DeepSpeed 2021's ZeRO-3 gathers in backward: its reuse-distance release rule played over
the submodule trace, full activation recomputation included (z3big23, issue 9).

Read in the 2021 ``stage3.py`` (the same version as :mod:`simulator.compile.ds_zero3`) [src: deepspeed-zero3-reuse]:
every submodule's forward pre-hook *and* backward pre-hook call ``fetch_sub_module``, which all-gathers each of the
submodule's parameters that is ``NOT_AVAILABLE``; its forward post-hook and backward post-hook call
``release_sub_module``, which re-partitions (frees) each parameter unless ``_keep_for_later``: the reuse distance
``get_reuse_distance_in_numel``, the elements of every submodule occurrence traced between this use and the
submodule's next occurrence (``_distance_in_numel``: ``named_parameters(recurse=False)`` of each, persistent ones
and external parameters included), is below ``stage3_max_reuse_distance`` (1e9 elements by default); with no next
occurrence the distance is 1e12 and the parameter is freed. Under full activation recomputation the checkpointed
block's forward runs again inside its backward, so its submodules' hooks fire three times per step: forward,
recompute forward, backward. A tensor is therefore gathered again for the backward when

    2 · (elements of the block's submodules after it in forward order)  ≥  max_reuse_distance,

the factor 2 because those submodules are traced once in the recompute and once in the backward before it. Hand-
worked, GPT-3 175B (h = 12288, weights and biases; 1e9 limit): ``mlp.down`` (4h² + h) has nothing traced between
its recompute and its backward → kept; ``mlp.up``: 2 · (4h² + h) = 1,207,984,128 ≥ 1e9 → gathered again; so are
``attn.out`` (2 · 1,208,045,568) and ``attn.qkv``: three more all-gathers per block, 8h² = 1,207,959,552 elements,
a third more gathered bytes than one forward. The forward→recompute distance (the rest of the model twice) frees
everything, so the recompute gathers every gathered tensor again: per step, 1 + 1 + 2/3 passes of the parameters,
where one pass per backward was modelled before.

Modelled: the whole chunk's trace (embedding, blocks, final norm, head; a tied head's use of the embedding as an
external parameter of the head), forward then backward, with each block's recompute forward before its backward
when ``recompute`` is full. Only the backward's gathers are taken from it (:func:`backward_events`); the forward's
stay one per gathered tensor (:func:`simulator.compile.ds_zero3.gathers`): the tied head's forward re-gather of the
embedding is left out. Not modelled: submodules without parameters (they add nothing to a distance), selective and
op-level recomputation (no re-run of parameterised submodules is assumed), and ``stage3_max_live_parameters``'s cap.
FSDP (torch) gathers a recomputed block once per backward (its pre-backward hook unshards the wrapped block before
the checkpoint reruns it) [src: torch-fsdp-backward-order]; this rule is DeepSpeed's only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from simulator.bucket_defaults import DEEPSPEED_ZERO3, DeepSpeedZero3Config
from simulator.enum_kind import Kind

_BLOCK = re.compile(r"^layers\.(\d+)\.")


class EventKind(Kind):
    """What happens in a backward's ZeRO-3 stream, in order."""

    GATHER = "gather"
    """A tensor is all-gathered (its submodule was fetched and the tensor had been freed)."""
    GRAD = "grad"
    """A tensor's gradient arrives (its reduce hook runs); one per tensor, in reverse trace order."""


@dataclass(frozen=True)
class Event:
    kind: EventKind
    tensor: int
    """Index into the chunk's tensors (trace order)."""


@dataclass(frozen=True)
class Module:
    """One submodule: its tensors (indices, trace order) and whether its use is an external (tied) one."""

    tensors: tuple[int, ...]
    block: int | None
    external: bool = False


def modules(names: tuple[str, ...], tied_head: bool) -> tuple[Module, ...]:
    """The chunk's submodules in forward trace order: tensors grouped by name less its last part (``weight``,
    ``bias``); ``tied_head``: the head uses the embedding (``embed.tok``) as an external parameter after the final
    norm."""
    out: list[Module] = []
    prefix = None
    for i, name in enumerate(names):
        p = name.rsplit(".", 1)[0]
        m = _BLOCK.match(name)
        if p != prefix:
            out.append(Module((i,), int(m.group(1)) if m else None))
            prefix = p
        else:
            out[-1] = Module(out[-1].tensors + (i,), out[-1].block)
    if tied_head and "embed.tok.weight" in names and any(n.startswith("norm_f") for n in names):
        out.append(Module((names.index("embed.tok.weight"),), None, external=True))
    return tuple(out)


def _trace(mods: tuple[Module, ...], recompute_full: bool) -> tuple[list[int], int]:
    """(module indices in trace order over one forward and backward, where the backward starts)."""
    fwd = list(range(len(mods)))
    bwd: list[int] = []
    i = len(mods) - 1
    while i >= 0:
        b = mods[i].block
        if b is None:
            bwd.append(i)
            i -= 1
            continue
        j = i
        while j - 1 >= 0 and mods[j - 1].block == b:
            j -= 1
        block = list(range(j, i + 1))
        bwd += (block if recompute_full else []) + block[::-1]
        i = j - 1
    return fwd + bwd, len(fwd)


@lru_cache(maxsize=256)  # the planner compiles many strategies of one model: same chunks, same trace
def backward_events(names: tuple[str, ...], numels: tuple[int, ...], recompute_full: bool, tied_head: bool,
                    config: DeepSpeedZero3Config = DEEPSPEED_ZERO3) -> tuple[Event, ...]:
    """One micro-batch's backward as DeepSpeed 2021 runs it (module docstring): a GATHER for each gathered tensor
    (``numel ≥ param_persistence_threshold``) whose submodule is fetched while it is freed, and a GRAD per tensor
    when its submodule's backward runs (reverse trace order; a tied head's external use adds no GRAD)."""
    mods = modules(names, tied_head)
    trace, start = _trace(mods, recompute_full)
    size = [sum(numels[t] for t in m.tensors) for m in mods]
    prefix = [0]
    for m in trace:
        prefix.append(prefix[-1] + size[m])
    nxt, seen = [None] * len(trace), {}
    for pos in range(len(trace) - 1, -1, -1):
        nxt[pos], seen[trace[pos]] = seen.get(trace[pos]), pos
    available: set[int] = set()  # tensors gathered and not freed
    out: list[Event] = []
    for pos, m in enumerate(trace):
        backward = pos >= start
        for t in mods[m].tensors:
            if numels[t] >= config.param_persistence_threshold_elements and t not in available:
                if backward:
                    out.append(Event(EventKind.GATHER, t))
                available.add(t)
        if backward and nxt[pos] is None and not mods[m].external:  # its last use: its backward, not a recompute
            out += [Event(EventKind.GRAD, t) for t in reversed(mods[m].tensors)]
        distance = None if nxt[pos] is None else prefix[nxt[pos]] - prefix[pos + 1]
        if distance is None or distance >= config.max_reuse_distance_elements:
            available.difference_update(mods[m].tensors)
    return tuple(out)

