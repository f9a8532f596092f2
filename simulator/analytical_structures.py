"""The compiled structures behind :func:`simulator.analytical_vec.estimate_many`.

A candidate's *structure* is everything but its global batch and input pipeline: the fields
declared :data:`~simulator.strategy.Role.STRUCTURE`. Each distinct structure is compiled once
(with the smallest valid batch, so no long schedule is built) into the closed form's arrays
(:class:`~simulator.analytical_formula.StepArrays`) and a row of :class:`Scalars`, kept stacked
by pipeline shape (p, v) in a :class:`Structures` owned by the caller's
:class:`~simulator.compile.CostCache`. A candidate costs one dictionary look-up of
:func:`structure_key`; everything after is numpy indexing by structure row.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter

import numpy as np

from simulator.analytical import summarize
from simulator.analytical_models import summarize_models
from simulator.hashed_key import HashedKey
from simulator.interference import cluster_sm_fraction
from simulator.analytical_formula import StepArrays
from simulator.compile import CostCache, ParamFetch, compile_step
from simulator.compile.shared_stages import closed_form_models
from simulator.compile.compute_part import step_flops
from simulator.schedules import ScheduleKind
from simulator.strategy import AllReduceSync, ParallelLayout, ParamServerSync, Role, Strategy, build_layout
from simulator.strategy.batch_copy import with_global_batch
from simulator.strategy.fields import declared
from simulator.strategy.layout import derived_dp, worker_gpus
from simulator.strategy.sync import pipeline_defers_grad_sync

ARRAY_FIELDS = ("F", "B", "parts", "cf", "cb", "tail", "sync_exposed", "opt", "after")
"""The per-candidate arrays of :class:`StepArrays` that come from the structure (all but ``data``)."""
KINDS = tuple(ScheduleKind)


_INT_FIELDS = 6
"""The first six fields of :class:`Scalars` are integers; the FLOPs are floats."""


@dataclass(frozen=True)
class Scalars:
    """Per-structure (or, indexed, per-candidate) numbers beside the arrays, one array per field."""

    dp: np.ndarray
    micro_batch: np.ndarray
    pp: np.ndarray
    interleaved: np.ndarray
    """1 when the schedule is interleaved with v > 1 (m must then be a multiple of pp), else 0."""
    kind: np.ndarray
    """The schedule kind, as its position in ``tuple(ScheduleKind)``."""
    world: np.ndarray
    """GPUs in the step."""
    model_flops: np.ndarray
    """Model FLOPs per token (per sample for layer lists)."""
    hw_flops: np.ndarray
    """Hardware FLOPs (recompute included) per token."""

    @classmethod
    def of(cls, rows: list[tuple]) -> "Scalars":
        cols = np.array(rows, dtype=float).reshape(-1, len(fields(cls)))
        return cls(*(cols[:, i].astype(np.int64) if i < _INT_FIELDS else cols[:, i] for i in range(cols.shape[1])))

    def take(self, index: np.ndarray) -> "Scalars":
        return Scalars(*(getattr(self, f.name)[index] for f in fields(self)))


COMPILED_SCENARIO = ("routing_skew",)
"""What-if inputs the compiled step reads (the MoE load imbalance sets the expert compute); the other
scenario inputs (stragglers, failures) only the DES reads."""
KEY_FIELDS = tuple(f.name for f, d in declared(Strategy) if d.role is Role.STRUCTURE or f.name in COMPILED_SCENARIO)
"""Strategy fields that decide the compiled structure (:func:`structure_key`): those declared with
:data:`Role.STRUCTURE` (:mod:`simulator.strategy.fields`), so a new field joins by its declaration,
and :data:`COMPILED_SCENARIO`."""
_OWN_FIELDS = tuple(name for name in KEY_FIELDS if name != "dp_sync")
_OWN = attrgetter(*_OWN_FIELDS)
_SYNC = {cls: attrgetter(*(f.name for f in fields(cls))) for cls in (AllReduceSync, ParamServerSync)}


def batch_bound(s: Strategy) -> bool:
    """Whether ``s``'s compiled chunks depend on its micro-batch count, so its structure is compiled at its own
    global batch, not the smallest (:func:`_compile`): chained schedules (``schedules_per_step`` > 1 must divide
    m) and FSDP2 under torch's pipelining, whose chunks carry the share of their actions that gather
    (:mod:`simulator.gather_reuse`, counted over the step's action lists)."""
    return s.pp > 1 and (s.schedules_per_step > 1 or s.zero >= 2 and pipeline_defers_grad_sync(s))


def structure_key(s: Strategy) -> tuple:
    """The :data:`KEY_FIELDS` of ``s``, the gradient sync expanded into its type and field values
    (read by ``operator.attrgetter``: a planner builds thousands of these); the global batch last where the
    structure is compiled at it (:func:`batch_bound`)."""
    d = s.dp_sync
    own = _OWN(s)
    return own + (s.global_batch,) if batch_bound(s) else own, type(d), _SYNC[type(d)](d)


_SCHEDULE = _OWN_FIELDS.index("schedule")
"""Position of the schedule kind in :func:`structure_key`'s own-fields tuple."""


def stages_key(key: tuple, interleaved: bool) -> tuple:
    """What the compiled stages of a structure (:func:`simulator.compile.compile_stages` and
    :func:`~simulator.analytical_models.summarize_models`) depend on: its :func:`structure_key` less the schedule
    kind, which they never read (the pipeline shape is evaluated per candidate, ``_pipelines``), plus
    whether the small batch of :func:`_compile` is stretched to ``pp`` micro-batches (interleaved, v > 1).
    GPipe and 1F1B structures that agree elsewhere share one compilation."""
    own = key[0]
    return HashedKey((own[:_SCHEDULE] + own[_SCHEDULE + 1:], interleaved, key[1], key[2]))  # looked up, then stored


def _compile(cache: CostCache, workload, s: Strategy, fetch: ParamFetch, gpus: int | None = None,
             compiled: dict | None = None, key: tuple | None = None) -> tuple[StepArrays, ParallelLayout]:
    """(arrays, layout) of a strategy's structure, compiled with the smallest valid batch, on the first
    ``gpus`` worker GPUs (None: the whole cluster; see :func:`build_layout`). ``compiled``: arrays already
    compiled by :func:`stages_key` (of ``key``, ``s``'s :func:`structure_key`), shared where only the
    schedule kind differs (the layout is still built, so each keeps its own errors)."""
    workers, _ = worker_gpus(s, cache.cluster, gpus)
    dp = derived_dp(s, workers)
    if dp == 0:
        build_layout(s, cache.cluster, workload, gpus=gpus)  # raises the layout's own error
    interleaved = s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1
    small = s if batch_bound(s) else with_global_batch(s, dp * s.micro_batch * (s.pp if interleaved else 1))
    layout = build_layout(small, cache.cluster, workload, gpus=gpus)
    if cache.cluster.varies:  # the per-rank device factors are compiled (and checked) with the step
        work = compile_step(cache.cluster, workload, small, fetch=fetch, cache=cache, memory=False, layout=layout)
        return summarize(work), layout
    shared = None if compiled is None or key is None else stages_key(key, interleaved)
    got = None if shared is None else compiled.get(shared)
    if got is not None:
        return got, layout
    models, classes = closed_form_models(cache, workload, layout, fetch)
    arrays = summarize_models(models, classes, layout.v, cluster_sm_fraction(cache.cluster),
                              kept=cache.memo(("summarize: stage sync answers",), dict))
    if shared is not None:
        compiled[shared] = arrays
    return arrays, layout


class Structures:
    """The compiled structures of one (workload, fetch) on one cache's cluster, stacked by (p, v).

    Mutable, but owned by the caller's :class:`CostCache` (``cache.memo``), like its other answers.
    """

    def __init__(self) -> None:
        self.index: dict[tuple, int] = {}
        """:func:`structure_key` → structure number."""
        self._rows: list[tuple[int, int]] = []          # per structure: (shape number, row in its stack)
        self._scalars: list[tuple] = []                 # per structure: the _Scalars fields
        self._shapes: dict[tuple[int, int], int] = {}   # (p, v) → shape number
        self._parts: list[list[StepArrays]] = []        # per shape: its structures' arrays, in row order
        self._stacks: list[StepArrays | None] = []      # per shape: those stacked (None: to restack)
        self._table: tuple[np.ndarray, np.ndarray, Scalars] | None = None
        self._compiled: dict[tuple, StepArrays] = {}  # stages_key → arrays (structures differing by schedule)

    def add(self, key: tuple, cache: CostCache, workload, s: Strategy, fetch: ParamFetch,
            gpus: int | None = None) -> int:
        """Compile ``s``'s structure on ``gpus`` workers (raises its SpecError); remember it under ``key``."""
        arrays, layout = _compile(cache, workload, s, fetch, gpus, self._compiled, key)
        shape = self._shapes.setdefault((arrays.p, arrays.v), len(self._shapes))
        if shape == len(self._parts):
            self._parts.append([])
            self._stacks.append(None)
        interleaved = s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1
        flops = cache.memo(("flops", workload, s.recompute, s.attention),
                           lambda: step_flops(workload, 1, s.recompute, s.attention))
        self._rows.append((shape, len(self._parts[shape])))
        self._scalars.append((layout.dp, s.micro_batch, s.pp, int(interleaved), KINDS.index(s.schedule),
                              layout.world_size, flops[0], flops[1]))
        self._parts[shape].append(arrays)
        self._stacks[shape] = None
        self._table = None
        self.index[key] = len(self._rows) - 1
        return len(self._rows) - 1

    def table(self) -> tuple[np.ndarray, np.ndarray, Scalars]:
        """(shape number, row in its stack, scalars) of every structure."""
        if self._table is None:
            rows = np.array(self._rows, dtype=np.int64).reshape(-1, 2)
            self._table = rows[:, 0], rows[:, 1], Scalars.of(self._scalars)
        return self._table

    def shape(self, shape: int) -> StepArrays:
        """The stacked arrays of one (p, v) shape (``data`` left empty)."""
        if self._stacks[shape] is None:
            items = self._parts[shape]
            first = items[0]
            cat = {f: np.concatenate([getattr(a, f) for a in items]) for f in ARRAY_FIELDS}
            self._stacks[shape] = StepArrays(p=first.p, v=first.v, data=np.zeros(0), **cat)
        return self._stacks[shape]


