"""FSDP2 under torch's pipelining runtime keeps gathered parameters (:mod:`simulator.gather_reuse`)
[src: torch-pipelining-fsdp-sync].

The executor's stage wrapping (``fully_shard`` on every block, then the stage module) and runtime
(``executor.strategies.pipeline.load_schedule``) run on torch's fake 2-rank group, as in
``tests/test_pipeline_fsdp2_sync.py``; FSDP2's all-gathers (``dist.all_gather_single``) of the second step are
counted (the first also runs the stage's shape inference) and must be what :func:`gather_shares` counts on the same
action list: ZeRO-2 one per module per step, ZeRO-3 m + 1, the first forward's and then only backwards that follow
a forward. If torch changed (resharding after backward again) or the rule did, one side fails."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as hs

from simulator.analytical import estimate_work
from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.engine.step import simulate
from simulator.gather_reuse import GatherReuse, gather_shares, gathers
from simulator.results import Category
from simulator.schedules import ActionKind, ScheduleKind, make_schedule
from simulator.strategy import Framework, Strategy, ZeroStage
from simulator.workload import get_preset

F, B, I, W = ActionKind.F, ActionKind.B, ActionKind.I, ActionKind.W


def _torch_gathers(reshard_after_forward: bool, blocks: int, schedule) -> tuple[int, int]:
    """(all-gathers in forward, in backward) of the second step of ``schedule`` (one rank, one stage) over a
    pipeline holding the whole tiny model (``blocks`` blocks + the stage module: blocks + 1 ``fully_shard``
    modules), wrapped and run as the executor does."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage

    from executor.fsdp2_host_bench import fake_group
    from executor.model import build_gpt
    from executor.strategies.pipeline import Stage, load_schedule
    from parallel_runs import GPT_TINY

    spec = replace(GPT_TINY, layers=blocks)
    with fake_group(2):
        mesh = init_device_mesh("cpu", (2,))
        stage_module = Stage(build_gpt(spec, seed=0), tuple(range(blocks)), True, True)
        for block in stage_module.layers:
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
        fully_shard(stage_module, mesh=mesh, reshard_after_forward=reshard_after_forward)
        stage = PipelineStage(stage_module, 0, 1, torch.device("cpu"), group=dist.new_group([0]))
        m = schedule.m
        runtime = load_schedule(schedule, [stage], m)
        g = torch.Generator().manual_seed(0)
        x, y = (torch.randint(0, spec.vocab, (m, spec.seq_len), generator=g) for _ in range(2))
        runtime.step(x, target=y, losses=[])  # the first step also runs the shape inference's forward and backward
        calls, original = [], dist.all_gather_single

        def counted(*args, **kwargs):
            calls.append(torch._C._current_graph_task_id() >= 0)  # inside autograd's backward
            return original(*args, **kwargs)

        dist.all_gather_single = counted
        try:
            runtime.step(x, target=y, losses=[])
        finally:
            dist.all_gather_single = original
    return calls.count(False), calls.count(True)


@pytest.mark.parametrize("zero", [ZeroStage.ZERO2, ZeroStage.ZERO3])
def test_torch_gathers_what_the_rule_counts(zero):
    blocks, m = 2, 3
    schedule = make_schedule(ScheduleKind.ONE_F_ONE_B, 1, m)
    forward, backward = _torch_gathers(zero is ZeroStage.ZERO3, blocks, schedule)
    reuse = GatherReuse.STEP if zero is ZeroStage.ZERO2 else GatherReuse.UNTIL_FORWARD
    share_f, share_b = gather_shares(reuse, schedule.ranks[0], 0)
    modules = blocks + 1
    assert forward == modules * round(m * share_f) == modules  # only the step's first forward gathers
    assert backward == modules * round(m * share_b) == (0 if zero is ZeroStage.ZERO2 else modules * m)


def test_chained_schedules_run_as_the_rule_counts():
    """Two chained GPipe runs of 2 (``schedules_per_step`` 2: F0 F1 B0 B1 F2 F3 B2 B3), loaded whole into torch's
    runtime as the executor loads ``layout.schedule`` (one block + the stage module: 2 modules): ZeRO-3 gathers in
    F0, F1, F3 and B0, B2 (each first or after a forward), not in F2 (after B1: kept) nor B1, B3: 5 per module, 3
    of them in forward; the rule counts the same."""
    schedule = make_schedule(ScheduleKind.GPIPE, 1, 4, schedules=2)
    forward, backward = _torch_gathers(True, 1, schedule)
    share_f, share_b = gather_shares(GatherReuse.UNTIL_FORWARD, schedule.ranks[0], 0)
    assert (forward, backward) == (2 * 4 * share_f, 2 * 4 * share_b) == (6, 4)


def test_the_rule_by_hand():
    """1F1B, p 2, m 4, rank 0: F0 F1 B0 F2 B1 F3 B2 B3. ZeRO-3 gathers in F0, F1 (after a forward), B0, B1, B2 (each
    after a forward), not in F2, F3 (after a backward) nor B3 (after B2): 2 of 4 forwards, 3 of 4 backwards, m + 1."""
    actions = make_schedule(ScheduleKind.ONE_F_ONE_B, 2, 4).ranks[0]
    assert [str(a) for a in actions] == ["0F0", "0F1", "0B0", "0F2", "0B1", "0F3", "0B2", "0B3"]
    assert gather_shares(GatherReuse.UNTIL_FORWARD, actions, 0) == (0.5, 0.75)
    assert gather_shares(GatherReuse.STEP, actions, 0) == (0.25, 0.0)
    assert gather_shares(GatherReuse.EVERY, actions, 0) == (1.0, 1.0)
    assert gathers(GatherReuse.UNTIL_FORWARD, I, F) and not gathers(GatherReuse.UNTIL_FORWARD, W, F)
    assert not gathers(GatherReuse.UNTIL_FORWARD, F, I) and gathers(GatherReuse.EVERY, B, B)


CLUSTER = load_preset("dgx-h100")


def _work(zero: ZeroStage, pp: int = 2):
    strategy = Strategy(global_batch=32, micro_batch=1, dp=8 // pp, pp=pp, zero=zero, framework=Framework.FSDP2)
    return compile_step(CLUSTER, get_preset("gpt3-125m"), strategy)


def test_compiled_chunks_carry_the_rule():
    """pp 2 (m 8): ZeRO-2 gathers in 1 of 8 forwards and no backward; pp 1 (no pipelining runtime): every one."""
    for st in _work(ZeroStage.ZERO2).stages:
        (ch,) = st.chunks
        assert ch.gather_reuse is GatherReuse.STEP and (ch.zero_fwd_share, ch.zero_bwd_share) == (1 / 8, 0.0)
        assert ch.zero_fwd and not ch.zero_bwd
    first = _work(ZeroStage.ZERO3).stages[0].chunks[0]
    assert first.gather_reuse is GatherReuse.UNTIL_FORWARD and first.zero_fwd_share * 8 + first.zero_bwd_share * 8 == 9
    flat = _work(ZeroStage.ZERO2, pp=1).stages[0].chunks[0]
    assert flat.gather_reuse is None and (flat.zero_fwd_share, flat.zero_bwd_share) == (1.0, 1.0)


@pytest.mark.parametrize("zero", [ZeroStage.ZERO2, ZeroStage.ZERO3])
def test_both_engines_charge_the_kept_gathers(zero):
    """The DES plays the gathers only in the actions the rule names, the closed form charges their share: the
    exposed ZeRO time agrees within 10 % and is below what every action's gathers cost (the chunks without the
    rule), in both engines."""
    work = _work(zero)
    every = replace(work, stages=tuple(replace(st, chunks=tuple(
        replace(ch, gather_reuse=None, zero_fwd_share=1.0, zero_bwd_share=1.0) for ch in st.chunks))
        for st in work.stages))
    kept_a, kept_d = (r.breakdown.get(Category.ZERO, 0.0) for r in (estimate_work(work), simulate(work, CLUSTER,
                                                                                                  trace=False)))
    all_a, all_d = (r.breakdown.get(Category.ZERO, 0.0) for r in (estimate_work(every), simulate(every, CLUSTER,
                                                                                                 trace=False)))
    assert kept_a == pytest.approx(kept_d, rel=0.1)
    assert kept_a < 0.8 * all_a and kept_d < 0.8 * all_d


def test_zero3_under_pipelining_peaks_with_the_stage_unsharded():
    """At the end of a ZeRO-3 chunk's backward its parameters are all gathered (kept until its next forward): the
    peak counts the stage's parameters as ZeRO-2's (unsharded), the gathered-block buffer as ZeRO-2's; pp 1 keeps
    ZeRO-3's shard."""
    kept, zero2 = _work(ZeroStage.ZERO3).memory.stages, _work(ZeroStage.ZERO2).memory.stages
    for a, b in zip(kept, zero2):
        assert a.params_bytes == b.params_bytes and a.buffers.gathered_params_bytes == b.buffers.gathered_params_bytes
    flat3, flat2 = _work(ZeroStage.ZERO3, pp=1).memory.stages[0], _work(ZeroStage.ZERO2, pp=1).memory.stages[0]
    assert flat3.params_bytes < flat2.params_bytes / 3  # sharded over dp 8


@settings(max_examples=40, deadline=None)
@given(kind=hs.sampled_from(list(ScheduleKind)), p=hs.integers(1, 4), per_run=hs.integers(1, 4),
       v=hs.integers(1, 3), k=hs.integers(1, 3))
def test_every_chunk_gathers_once_or_m_plus_one_times(kind, p, per_run, v, k):
    """Over any built-in schedule (chained or not), a chunk's last action is a backward, so ZeRO-3 gathers
    1 + (actions after a forward) = m + 1 times, ZeRO-2 once: the counts the shares stand for."""
    v = v if kind is ScheduleKind.INTERLEAVED and p > 1 else 1
    m_run = per_run * (p if v > 1 else 1)  # interleaved runs need a multiple of pp
    sched = make_schedule(kind, p, m_run * k, v, schedules=k)
    m = sched.m
    for stage in range(p * v):
        acts = sched.ranks[stage % p]
        f3, b3 = gather_shares(GatherReuse.UNTIL_FORWARD, acts, stage)
        f2, b2 = gather_shares(GatherReuse.STEP, acts, stage)
        assert round(m * (f3 + b3)) == m + 1 and round(m * (f2 + b2)) == 1
