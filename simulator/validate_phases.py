"""Which estimate categories each measured phase holds, so that a validation row compares like with like.

The executor's phase clock times a data-parallel step as wall-clock phases
(``executor/strategies/data_parallel.py``, its ``phase_notes``): ``forward`` is the forward calls *with FSDP2's
parameter all-gathers*, ``backward`` is ``loss.backward()`` *with FSDP2's re-gathers (ZeRO-3) and gradient
reduce-scatters*, ``optimizer`` is ``optimizer.step()`` *with ZeroRedundancyOptimizer's parameter broadcasts*
(torch ZeRO-1). The engines book those calls' exposed seconds in their own :attr:`Category.ZERO`, which no
measured phase has; these rules put each part of it under the phase that measured it:

- torch ZeRO-1 (``ZeroRedundancyOptimizer`` over DDP): all of ``zero`` into ``optimizer``
  (``ZeroRedundancyOptimizer._sync_params`` runs inside ``step()``).
- FSDP2 (ZeRO-2/3): ``zero`` split between ``forward`` and ``backward`` as the analytical engine exposes it:
  ``z_f = Σ_chunks exposed_gathers(zero_fwd, …)``, ``z_b = Σ_chunks exposed_gathers(zero_bwd, …)``
  (:func:`simulator.analytical.exposed_gathers`, the same call that builds the ``zero`` part); forward gets the
  fraction ``z_f / (z_f + z_b)`` of an engine's ``zero``, backward the rest. On gloo every FSDP2 call blocks the
  compute thread (prefetch 0, :func:`simulator.compile.grad_sync.fsdp2_blocking_prefetch`), so ``z_f`` and ``z_b``
  are the calls' own seconds and the split is exact for both engines (the DES plays the same calls on the compute
  thread, :func:`simulator.engine.rank_compute._blocking_blocks`); with prefetch the DES's own exposure is split in
  the analytical engine's proportion.

The estimate also charges the step's per-step host terms with its ``optimizer`` (:func:`simulator.compile.step.
stage_work`: the loop's ``step_loop_us`` and FSDP2 terms, :mod:`simulator.step_loop`; torch's pipeline runtime's
``UNSHARD`` / ``REDUCE_GRAD`` / ``RESHARD`` actions, :func:`simulator.pipeline_runtime.step_host_s`; all × the core
share), where the engines place them in time. The executor's ``optimizer`` is ``optimizer.step()`` alone: the loop's
work and the runtime's actions run outside every phase it times (its ``outside_phases``; the probes that measure
those fields read them there, :mod:`executor.step_bench` and :mod:`executor.pipeline_host_bench`), and the first
micro-batch's cold forward (``first_microbatch_cold_us``) inside its ``forward`` (a parameter-server worker times
the whole loop inside its ``forward``). :func:`loop_moves` moves those
seconds (``StageWork.loop_outside_s``, ``loop_forward_s``) from the ``optimizer`` row to the rows that measured them;
the step time does not move (val32, 2026-11-26: pp-dp's optimizer row read +43..+134 % with them inside it).
"""

from __future__ import annotations

from simulator.results import Category, StepResult

Folds = dict[Category, tuple[tuple[Category, float], ...]]
"""Measured phase → (estimate category, the fraction of that category's seconds the phase holds), besides the
phase's own category at fraction 1."""


def folded_categories(work) -> Folds:
    """The folds of the module docstring for the compiled step ``work`` (:class:`simulator.work.StepWork`)."""
    from simulator.strategy import ZeroStage
    from simulator.strategy.framework import Framework

    layout = work.layout
    if layout.strategy.zero is ZeroStage.ZERO1 and layout.framework is Framework.TORCH_DDP:
        return {Category.OPTIMIZER: ((Category.ZERO, 1.0),)}
    if layout.framework is not Framework.FSDP2:
        return {}
    forward, backward = fsdp2_exposed_s(work)
    if forward + backward <= 0:
        return {}
    share = forward / (forward + backward)
    return {Category.FORWARD: ((Category.ZERO, share),), Category.BACKWARD: ((Category.ZERO, 1.0 - share),)}


def fsdp2_exposed_s(work) -> tuple[float, float]:
    """(forward, backward) exposed seconds of one micro-batch's ZeRO calls (times the share of the step's actions
    that run them, :mod:`simulator.gather_reuse`), summed over every stage's chunks, as
    :func:`simulator.analytical.exposed_gathers` prices them (compute under them: forward, or recompute + backward,
    with the chunk's tp calls)."""
    from simulator.analytical import exposed_gathers

    sm, forward, backward = work.overlap_sm_fraction, 0.0, 0.0
    for stage in work.stages:
        for ch in stage.chunks:
            tp_f, tp_b = sum(c.time_s for c in ch.tp_fwd), sum(c.time_s for c in ch.tp_bwd)
            forward += exposed_gathers(ch.zero_fwd, ch.fwd_s + tp_f, sm, ch.zero_prefetch_calls) * ch.zero_fwd_share
            backward += exposed_gathers(ch.zero_bwd, ch.recompute_s + ch.bwd_s + tp_b, sm,
                                        ch.zero_prefetch_calls) * ch.zero_bwd_share
    return forward, backward


def phase_estimate(result: StepResult, phase: Category, folds: Folds) -> float:
    """An engine's seconds for the measured ``phase``: its own category plus the folded parts of others."""
    extra = sum(share * result.breakdown.get(cat, 0.0) for cat, share in folds.get(phase, ()))
    return result.breakdown.get(phase, 0.0) + extra


def loop_moves(work) -> dict[str, float]:
    """Seconds to move between validation rows (row name → seconds added; module docstring): the optimizer row less
    the loop's and pipeline runtime's per-step host time, the forward row plus the cold first forward, the
    outside-phases row plus the rest; and the runtime's per-action time (``ChunkWork.runtime_outside_s``) and posts
    (``runtime_post_s``) out of forward and backward, into outside-phases and pp, m times per chunk of the rank. Every
    stage of a layout charges the same terms (looped placement), so the largest stage's figures are the slowest
    rank's."""
    from simulator.strategy import DpSyncKind

    outside = max((st.loop_outside_s for st in work.stages), default=0.0)
    cold = max((st.loop_forward_s for st in work.stages), default=0.0)
    m = work.micro_batches
    actions = max((m * sum(ch.runtime_outside_s for ch in st.chunks) for st in work.stages), default=0.0)
    posts = max((m * sum(ch.runtime_post_s for ch in st.chunks) for st in work.stages), default=0.0)
    if outside + cold + actions + posts <= 0:
        return {}
    if work.layout.strategy.dp_sync.kind is DpSyncKind.PARAM_SERVER:  # the worker times its batch and gradient
        outside, cold = 0.0, outside + cold  # reset inside its forward (executor/strategies/param_server.py ``_work``)
    return {Category.OPTIMIZER.value: -(outside + cold), Category.FORWARD.value: cold - actions - posts,
            Category.BACKWARD.value: -(actions + posts), Category.PP.value: 2 * posts,
            "outside_phases": outside + 2 * actions}
