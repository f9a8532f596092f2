"""The layout rules on degrees and batch, written once for one strategy or for many at a time.

A planner checks thousands of candidates; :func:`valid_mask` runs the rules on numpy arrays of
candidates in one pass, and :func:`build_layout` runs the very same rule functions on one
candidate (:func:`first_violation`) to raise the error that names the field and the fix. The
rules (each a predicate on arrays of integers):

- ``pp``:        pp·v ≤ the model's layers (each virtual stage holds a layer), or pp·v = 1 when
                 the workload has no layers to split;
- ``dp``:        dp·tp·pp·cp equals the worker GPUs (cp: context parallelism);
- ``global_batch``: dp divides the global batch;
- ``micro_batch``:  the micro-batch divides the samples per replica, B ÷ dp;
- ``micro_batches``: at most :data:`simulator.schedules.MAX_MICRO_BATCHES` per pipeline (a guard on
                 work), and interleaved schedules need the micro-batch count m a multiple of pp
                 (:func:`simulator.schedules.interleaved_ok`, Megatron-LM's original rule);
- ``ep``:        ep divides dp: the experts are sharded over the data-parallel ranks, expert tensor
                 parallelism equal to tp (Megatron-Core's expert groups inside the tp-cp-ep-dp-pp rank
                 order, ``expert_tensor_parallel_size`` defaulting to tp [src: megatron-core]; DeepSpeed-MoE's
                 expert-parallel groups inside the data-parallel group [src: deepspeed-moe]);
                 With context parallelism ep is carved out of dp alone (cp ranks sit inside the ep group's
                 stride) and the experts' gradients reduce over the (dp/ep)·cp ranks that hold them
                 (``get_data_modulo_expert_parallel_group(with_context_parallel=True)`` [src: megatron-moe-cp]:
                 :meth:`ParallelLayout.expert_dp_group`);
- ``zero``:      ZeRO-2/3 (partitioned gradients) with pp > 1 only under a framework that runs them
                 together (:attr:`Framework.partitions_gradients_with_pipeline`: FSDP2; not
                 DeepSpeed's pipeline engine nor Megatron-LM).

The tensor- and expert-parallel rules on the model's shapes belong to the workload
(``Workload.check_tp``, ``Workload.check_ep``: ep divides the routed experts); :func:`valid_mask` asks
them once per distinct degree. The context-parallel rules need the workload's sequence and heads
(:func:`context_problem`); :func:`valid_mask` asks them once per distinct (cp, kind, balance, tp).
The routing fields of a MoE layer (:data:`MOE_ONLY_FIELDS`) take their defaults on a model without
experts (:func:`moe_fields_problem`): they would change nothing, and a plan that sets them is a mistake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import lru_cache
from enum import Enum

import numpy as np

from simulator.schedules import interleaved_ok, micro_batches_ok
from simulator.strategy.spec import Strategy
from simulator.workload.context import ContextKind, ContextSplit


@dataclass(frozen=True)
class Candidates:
    """Integer arrays of equal length, one entry per candidate (``v`` is 1 for non-interleaved)."""

    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    v: np.ndarray
    micro_batch: np.ndarray
    global_batch: np.ndarray
    interleaved: np.ndarray
    """True where the schedule is interleaved with v > 1."""
    zero: np.ndarray
    """ZeRO stage (0 when not given to :meth:`of`)."""
    zero_with_pp: np.ndarray
    """True where the framework in effect runs ZeRO-2/3 with pp > 1
    (:attr:`Framework.partitions_gradients_with_pipeline`; False when not given to :meth:`of`)."""
    ep: np.ndarray
    """Expert-parallel degree (1 when not given to :meth:`of`)."""
    cp: np.ndarray
    """Context-parallel degree (1 when not given to :meth:`of`)."""

    @classmethod
    def of(cls, **columns) -> "Candidates":
        columns = {"zero": 0, "zero_with_pp": False, "ep": 1, "cp": 1, **columns}
        arrays = {k: np.atleast_1d(np.asarray(v)) for k, v in columns.items()}
        lengths = [len(np.asarray(v)) for v in columns.values() if np.ndim(v) > 0]
        n = max(lengths) if lengths else 1
        return cls(**{k: np.broadcast_to(a, n) for k, a in arrays.items()})


@dataclass(frozen=True)
class Rule:
    field: str
    ok: Callable[[Candidates, int, int | None], np.ndarray]
    """(candidates, worker GPUs, layers or None) → bool array."""


def _micro_batches(c: Candidates) -> np.ndarray:
    per = c.dp * c.micro_batch
    return np.where(per > 0, c.global_batch // np.maximum(per, 1), 0)


RULES: tuple[Rule, ...] = (
    Rule("pp", lambda c, gpus, layers: (c.pp * c.v == 1) if layers is None else (c.pp * c.v <= layers)),
    Rule("dp", lambda c, gpus, layers: c.dp * c.tp * c.pp * c.cp == gpus),
    Rule("global_batch", lambda c, gpus, layers: c.global_batch % np.maximum(c.dp, 1) == 0),
    Rule("micro_batch", lambda c, gpus, layers: (c.global_batch // np.maximum(c.dp, 1)) % c.micro_batch == 0),
    Rule("micro_batches", lambda c, gpus, layers: micro_batches_ok(_micro_batches(c))
         & (~c.interleaved | interleaved_ok(_micro_batches(c), c.pp))),
    Rule("ep", lambda c, gpus, layers: c.dp % c.ep == 0),
    Rule("zero", lambda c, gpus, layers: (c.zero < 2) | (c.pp == 1) | c.zero_with_pp),
)
"""In the order :func:`build_layout` reports them."""


BATCH_RULES = ("global_batch", "micro_batch", "micro_batches")
"""The rules that depend on the global batch (what :func:`simulator.analytical_vec.estimate_many`
checks per candidate on top of a compiled structure)."""


def mask(c: Candidates, names: tuple[str, ...], gpus: int = 0, layers: int | None = None) -> np.ndarray:
    """True where every rule named in ``names`` holds."""
    out = np.ones(len(c.dp), dtype=bool)
    for rule in RULES:
        if rule.field in names:
            out &= rule.ok(c, gpus, layers)
    return out


def first_violation(c: Candidates, gpus: int, layers: int | None) -> str | None:
    """The field of the first rule the (single) candidate breaks, or None."""
    for rule in RULES:
        if not bool(rule.ok(c, gpus, layers)[0]):
            return rule.field
    return None


def context_problem(workload, context: ContextSplit, tp: int) -> str | None:
    """Why ``workload`` cannot be split by ``context`` (:mod:`simulator.workload.context`), or None:

    - only a transformer has a sequence to split (a layer list or a parameter count does not);
    - not with Multi-head Latent Attention (its attention core's split over cp is not modelled);
    - the sequence splits into the split's chunks: ``2·cp`` for a balanced ring (Megatron-Core's
      ``get_batch_on_this_cp_rank`` [src: megatron-cp]), ``cp`` otherwise;
    - all-to-all (Ulysses) splits heads: the query heads divide by tp·cp (DeepSpeed-Ulysses requires
      the heads to divide by the sequence-parallel degree [src: jacobs-2023]).
    """
    cp = context.degree
    if cp == 1:
        return None
    if not getattr(workload, "has_activation_shapes", False) or workload.layer_count is None:
        return f"{cp}: only a transformer has a sequence to split; use cp 1"
    if getattr(workload, "mla", None) is not None:
        return f"{cp}: context parallelism of DeepSeek's latent attention is not modelled; use cp 1"
    s = workload.seq_len
    if s % context.chunks():
        return (f"{cp}: the sequence of {s} tokens does not split into {context.chunks()} equal chunks "
                f"({'2·cp, causal load balancing' if context.chunks() == 2 * cp else 'cp'}); choose cp so that "
                f"{'2·' if context.chunks() == 2 * cp else ''}cp divides {s}")
    if context.kind is ContextKind.ALL_TO_ALL and workload.heads % (tp * cp):
        return (f"{cp}: all-to-all context parallelism splits the {workload.heads} heads over tp·cp = {tp * cp} "
                "ranks; choose tp·cp dividing the heads, or cp_kind ring")
    return None


MOE_ONLY_FIELDS = ("moe_routing", "moe_dispatcher", "routing_skew")
"""Strategy fields that describe how a MoE layer routes its tokens (``simulator.workload.moe_routing``,
``simulator.workload.moe_ops``): meaningless on a model without mixture-of-experts layers."""


@lru_cache(maxsize=1)
def _moe_defaults() -> dict:
    """The defaults of :data:`MOE_ONLY_FIELDS`, read once (a search lays out thousands of strategies)."""
    return {f.name: f.default for f in fields(Strategy) if f.name in MOE_ONLY_FIELDS}


def moe_fields_problem(workload, values: dict[str, tuple]) -> tuple[str, str] | None:
    """(field, problem) for the first value of :data:`MOE_ONLY_FIELDS` in ``values`` (field → the
    strategy's value, or every pinned value of a search) other than the field's default, on a workload
    without experts (a layer list, a parameter count, a dense transformer); None if there is none."""
    if getattr(workload, "moe", None) is not None:
        return None
    defaults = _moe_defaults()

    def shown(value) -> str:
        return value.value if isinstance(value, Enum) else f"{value:g}"
    for name in MOE_ONLY_FIELDS:
        for value in values.get(name, ()):
            if value != defaults[name]:
                return name, (f"{shown(value)}: the model has no mixture-of-experts layers to route; use "
                              f"{shown(defaults[name])} (the default), or a MoE model")
    return None


def valid_mask(c: Candidates, gpus: int, workload, contexts: np.ndarray | None = None) -> np.ndarray:
    """True where a candidate passes every rule here and the workload accepts its tp degree (and, given
    ``contexts``, an object array of each candidate's :class:`ContextSplit`, its context split)."""
    layers = workload.layer_count
    mask = np.ones(len(c.dp), dtype=bool)
    for rule in RULES:
        mask &= rule.ok(c, gpus, layers)
    for tp in np.unique(c.tp):
        try:
            workload.check_tp(int(tp))
        except ValueError:  # SpecError
            mask &= c.tp != tp
    for ep in np.unique(c.ep):
        try:
            workload.check_ep(int(ep))
        except ValueError:  # SpecError
            mask &= c.ep != ep
    if contexts is not None:
        pairs = list(zip(contexts, c.tp.tolist()))
        bad = {pair for pair in set(pairs) if context_problem(workload, pair[0], int(pair[1])) is not None}
        mask &= np.array([pair not in bad for pair in pairs], dtype=bool)
    return mask
