"""A step's stages for the closed form, each distinct stage compiled once (:func:`closed_form_stages`).

A pipeline's middle stages usually do the same work on different ranks: the same chunk compute, the
same tensor-parallel, ZeRO and p2p calls on groups that differ only by which nodes they sit on, the
same gradient buckets. :func:`stage_work` of stage ``r`` reads ``r`` only through

- its chunks ``c = r + k·pp``: their compute (what :func:`chunk_compute` reads of a chunk, its
  :func:`load_slice`, and the host modules' block count and whether it is the model's first or last
  chunk) and the p2p partner of each (the rank of chunk ``c ± 1``, or none);
- its groups (tp, dp), through :meth:`CostCache.collective` and :meth:`CostCache.p2p`, which answer every
  question on a group by its :meth:`CostCache.moved` group;
- the optimizer's per-tensor host calls of its stage and Transformer Engine's weight cast of its blocks.

Two stages that agree on all of these (:func:`_signature`: the groups as moved by the cache) get
calls of the same kinds, sizes and seconds, in the same order: the second is the first relabelled
(its stage, rank and chunk indices), its calls still naming the first stage's groups. That is all
the closed form reads (:func:`simulator.analytical.summarize_stages`: seconds, kinds, transports,
ready fractions); the DES, which plays the groups, compiles every stage
(:func:`simulator.compile.compile_step`). Stages whose work reads more of ``r`` are compiled one by
one: expert parallelism (its groups' node spans), context parallelism, a parameter server (its cost
model reads the ranks) and DeepSpeed's per-tensor ZeRO-3 gathers (per chunk index).
"""

from __future__ import annotations

from simulator.compile import grad_sync, step
from simulator.compile.chunk_zero import deepspeed_zero3
from simulator.compile.compute_part import load_slice
from simulator.compile.costs import CostCache
from simulator.strategy import ParallelLayout, ParamServerSync
from simulator.work import StageWork
from simulator.workload import ChunkSlice


def _shares(layout: ParallelLayout) -> bool:
    """Whether this layout's stages may share their compilation (module docstring)."""
    return (layout.pp > 1 and layout.ep == 1 and layout.cp == 1
            and not isinstance(layout.strategy.dp_sync, ParamServerSync) and not deepspeed_zero3(layout))


def _signature(cache: CostCache, workload, layout: ParallelLayout, r: int, placed: tuple) -> tuple:
    """Everything of stage ``r`` that :func:`stage_work` reads and that depends on ``r`` (module docstring):
    ``placed`` (:func:`_placed`), then the optimizer's tensor count and the FP8 weight cast."""
    tensors = grad_sync.optimizer_tensors(cache, workload, layout, r)
    return placed + (tensors, step._te_weight_cast_s(cache, workload, layout, r))


def _placed(cache: CostCache, workload, layout: ParallelLayout, every: list, starts: list[int]) -> tuple:
    """Per stage ``r``, what of its :func:`_signature` its place in the pipeline decides: its chunks' loads and
    p2p partners, and its tp and dp groups as the cache moves them. It reads the workload, the layer split and
    the groups (:func:`step.stage_groups`: placement, dp·cp, tp, pp, ep), so structures that differ elsewhere
    (micro-batch, ZeRO, recompute, buckets, ...) share it (:func:`placed_key`)."""
    n, p, layers = layout.pp * layout.v, layout.pp, layout.layers_per_stage
    reps = [groups[0] for groups in every]
    out = []
    for r, (rep, tp_group, dp_group, *_) in enumerate(every):
        chunks = []
        for k in range(layout.v):
            c = r + k * p
            partners = []
            for other in (c + 1, c - 1):  # as _chunk_work picks the p2p partner
                dst = reps[other % p] if 0 <= other < n else rep
                partners.append(None if dst == rep else cache.moved((rep, dst)))
            # step._chunk_compute reads the chunk through chunk_compute's load slice (compute_part.load_slice) and
            # framework_host.with_host_modules' block count and first / last flags
            chunk = ChunkSlice(index=c, count=n, start=starts[c], layers=layers[c])
            chunks.append((load_slice(workload, chunk), c == 0, c == n - 1, layers[c], *partners))
        out.append((tuple(chunks), cache.moved(tp_group), cache.moved(dp_group)))
    return tuple(out)


def placed_key(workload, layout: ParallelLayout) -> tuple:
    """What :func:`_placed` reads of ``layout``: the inputs of :func:`step.stage_groups` (cp apart from dp: the
    expert groups depend on how dp·cp splits) and the layer split."""
    return ("placed stages", workload, layout.strategy.placement, layout.dp_cp, layout.cp, layout.tp, layout.pp,
            layout.ep, layout.v, layout.layers_per_stage)


def _with(obj, **changes):
    """``dataclasses.replace(obj, **changes)`` for the plain frozen dataclasses :class:`StageWork` and
    :class:`ChunkWork` (no ``__post_init__``, every field in ``__init__``): the same field values, without the
    keyword ``__init__`` (a GPT-3 search relabels ~16,000 stages and ~20,000 chunks)."""
    out = object.__new__(type(obj))
    fields = out.__dict__
    fields.update(obj.__dict__)
    fields.update(changes)
    return out


def _relabelled(model: StageWork, r: int, rep: int, p: int) -> StageWork:
    """``model``'s work as pipeline rank ``r`` (representative ``rep``): its stage, rank and chunk indices."""
    chunks = tuple(_with(ch, chunk=r + k * p) for k, ch in enumerate(model.chunks))
    return _with(model, stage=r, rank=rep, chunks=chunks)


def _classes(cache: CostCache, workload, layout: ParallelLayout, placed: tuple) -> tuple[int, ...]:
    """Per stage ``r``, the first stage whose :func:`_signature` is ``r``'s."""
    first: dict[tuple, int] = {}
    return tuple(first.setdefault(_signature(cache, workload, layout, r, placed[r]), r) for r in range(layout.pp))


def classes_key(workload, layout: ParallelLayout) -> tuple:
    """What :func:`_classes` reads of ``layout``: :func:`placed_key`'s inputs, and of the rest of
    :func:`_signature` (the optimizer's tensor count, :func:`grad_sync.optimizer_tensors_key`, and Transformer
    Engine's weight cast, :func:`step._te_weight_cast_s`) what :func:`placed_key` does not hold: the ZeRO stage, the
    framework and the FP8 recipe. A search's structures that differ in micro-batch, recompute, SP, buckets or
    schedule share one answer."""
    return ("stage classes", placed_key(workload, layout), layout.strategy.zero, layout.framework,
            layout.strategy.resolved_fp8_recipe)


def closed_form_models(cache: CostCache, workload, layout: ParallelLayout,
                       fetch: step.ParamFetch = step.ParamFetch.INFINITY) -> tuple[tuple, tuple[int, ...]]:
    """(the distinct stages, per pipeline rank the one it is): rank ``r`` is ``models[classes[r]]`` relabelled as
    ``r`` (:func:`closed_form_stages`), which :func:`simulator.analytical.summarize_stages` reads without the copy.
    ``models[j]`` is rank ``j``'s own stage for every ``j`` some rank names; the others are None."""
    if not _shares(layout):
        return step.compile_stages(cache, workload, layout, fetch), tuple(range(layout.pp))
    step._check_workload(workload)
    step._check_fetch(fetch)
    starts = [0]
    for count in layout.layers_per_stage:
        starts.append(starts[-1] + count)
    every = step.all_stage_groups(cache, layout)
    inputs, keys = step.compute_inputs(cache, workload, layout), step.stage_keys(cache, workload, layout, fetch)
    placed = cache.memo(placed_key(workload, layout), lambda: _placed(cache, workload, layout, every, starts))
    classes = cache.memo(classes_key(workload, layout), lambda: _classes(cache, workload, layout, placed))
    models = tuple(step.stage_work(cache, workload, layout, r, fetch, inputs, keys) if j == r else None
                   for r, j in enumerate(classes))
    return models, classes


def closed_form_stages(cache: CostCache, workload, layout: ParallelLayout,
                       fetch: step.ParamFetch = step.ParamFetch.INFINITY) -> tuple[StageWork, ...]:
    """:func:`simulator.compile.compile_stages` for the closed form: a stage whose :func:`_signature` an
    earlier stage has is that stage relabelled (its calls name the earlier stage's groups)."""
    models, classes = closed_form_models(cache, workload, layout, fetch)
    if not _shares(layout):
        return models
    every = step.all_stage_groups(cache, layout)
    return tuple(models[r] if j == r else _relabelled(models[j], r, every[r][0], layout.pp)
                 for r, j in enumerate(classes))
