"""FSDP2 under torch's pipelining runtime reduce-scatters once per step (``simulator.strategy.sync``'s one rule,
``pipeline_defers_grad_sync``) [src: torch-pipelining-fsdp-sync].

The executor's pipeline families wrap each stage as ``ParallelRunner._finish`` does (``fully_shard`` on every block,
then on the stage module) and run the simulator's schedule through ``executor.strategies.pipeline.load_schedule``
(torch's ``_PipelineScheduleRuntime``). Here that wrapping and runtime run in one process on torch's fake process
group (every collective completes at once; ~1 s): the reduce-scatters of one step are counted at
``dist.reduce_scatter_single`` (FSDP2's ``foreach_reduce``) and must be what the simulator compiles for a pp > 1
FSDP2 plan: none in any micro-batch's backward, one per ``fully_shard`` module in the stage's gradient sync. If torch
changed to reduce in every backward, or the rule changed back, one side fails."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import compile_step
from simulator.compile.fsdp2_copies import accumulate_bytes_per_grad
from simulator.memory.verdict import memory_verdict
from simulator.schedules import ScheduleKind
from simulator.strategy import Framework, Strategy, ZeroStage
from simulator.strategy.sync import partitions_gradients, pipeline_defers_grad_sync, reduces_every_micro_batch
from simulator.work import CommKind
from simulator.workload import get_preset


def _torch_reduce_scatters(blocks: int, m: int) -> tuple[int, float, float]:
    """(reduce-scatters, the executor's clock's ``reduce_s`` and ``backward_s``) of one 1F1B step of ``m``
    micro-batches over a one-stage pipeline whose stage holds the whole tiny model (``blocks`` blocks, the embedding
    and head on the stage module), wrapped, run and timed as the executor does."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage

    from executor.fsdp2_host_bench import fake_group
    from executor.phase_clock import PipelineClock, TpClock
    from executor.model import build_gpt
    from executor.strategies.pipeline import Stage, load_schedule
    from parallel_runs import GPT_TINY
    from simulator.schedules import make_schedule

    spec = replace(GPT_TINY, layers=blocks)
    with fake_group(2):
        mesh = init_device_mesh("cpu", (2,))
        stage_module = Stage(build_gpt(spec, seed=0), tuple(range(blocks)), True, True)
        for block in stage_module.layers:
            fully_shard(block, mesh=mesh, reshard_after_forward=True)
        fully_shard(stage_module, mesh=mesh, reshard_after_forward=True)
        stage = PipelineStage(stage_module, 0, 1, torch.device("cpu"), group=dist.new_group([0]))
        runtime = load_schedule(make_schedule(ScheduleKind.ONE_F_ONE_B, 1, m), [stage], m)
        clock = PipelineClock(runtime, 1, m, TpClock())
        g = torch.Generator().manual_seed(0)
        x, y = (torch.randint(0, spec.vocab, (m, spec.seq_len), generator=g) for _ in range(2))
        calls, original = [], dist.reduce_scatter_single

        def counted(*args, **kwargs):
            calls.append(1)
            return original(*args, **kwargs)

        dist.reduce_scatter_single = counted
        try:
            with clock.timing():
                runtime.step(x, target=y, losses=[])
        finally:
            dist.reduce_scatter_single = original
    return len(calls), clock.reduce_s, clock.backward_s


def test_torch_pipelining_reduce_scatters_an_fsdp2_stage_once_per_step():
    """And the executor's clock times that REDUCE_GRAD action apart from backward (its ``dp`` phase)."""
    blocks, m = 2, 3
    calls, reduce_s, backward_s = _torch_reduce_scatters(blocks, m)
    assert calls == blocks + 1  # not m · (blocks + 1) = 9
    assert reduce_s > 0 and backward_s > 0


CLUSTER, MODEL = load_preset("dgx-h100"), get_preset("gpt3-125m")


def _compiled(pp: int, zero: ZeroStage = ZeroStage.ZERO3, **fields):
    strategy = Strategy(global_batch=16, micro_batch=1, dp=8 // pp, pp=pp, zero=zero, framework=Framework.FSDP2,
                        **fields)
    return compile_step(CLUSTER, MODEL, strategy)


def _reduce_scatters(calls) -> int:
    return sum(1 for c in calls if c.op is Op.REDUCE_SCATTER)


@pytest.mark.parametrize("zero", [ZeroStage.ZERO2, ZeroStage.ZERO3])
def test_the_simulator_compiles_what_torch_runs(zero):
    """pp 2: every stage's chunks carry no reduce-scatter and its sync one per block plus one for the root module
    holding the embedding or head (torch's count above), ready when its last backward ends; pp 1: every
    micro-batch's backward carries them, the sync none."""
    work = _compiled(2, zero)
    assert pipeline_defers_grad_sync(work.strategy) and not reduces_every_micro_batch(work.strategy)
    for st in work.stages:
        assert all(_reduce_scatters(c.zero_bwd) == 0 for c in st.chunks)
        assert _reduce_scatters(st.grad_sync) == sum(c.layers for c in st.chunks) + 1  # both stages hold an edge
        assert all(f == 1.0 for c, f in zip(st.grad_sync, st.grad_ready_fraction) if c.op is Op.REDUCE_SCATTER)
        assert all(c.kind is CommKind.DP for c in st.grad_sync)  # the executor's dp phase times torch's REDUCE_GRAD
    flat = _compiled(1, zero)
    assert reduces_every_micro_batch(flat.strategy) and _reduce_scatters(flat.stages[0].grad_sync) == 0
    assert _reduce_scatters(flat.stages[0].chunks[0].zero_bwd) == flat.stages[0].chunks[0].layers + 1


def test_interleaved_chunks_before_the_last_backward_are_ready_at_its_start():
    """v 2: a rank's second chunk's last backward comes before its first chunk's (the step's last), so its calls
    lead the sync at fraction 0 and the first chunk's follow at 1."""
    work = _compiled(2, virtual_stages=2, schedule=ScheduleKind.INTERLEAVED)
    st = work.stages[0]  # chunks 0 (the embedding's root call) and 2
    first, second = (c.layers + (1 if c.chunk == 0 else 0) for c in st.chunks)
    rs = [f for c, f in zip(st.grad_sync, st.grad_ready_fraction) if c.op is Op.REDUCE_SCATTER]
    assert rs == [0.0] * second + [1.0] * first


def test_only_fsdp2_with_pipelines_defers():
    base = Strategy(global_batch=16, dp=2, pp=2, zero=ZeroStage.ZERO3, framework=Framework.FSDP2)
    assert pipeline_defers_grad_sync(base) and partitions_gradients(base)
    assert not pipeline_defers_grad_sync(replace(base, pp=1)) and reduces_every_micro_batch(replace(base, pp=1))
    ddp = replace(base, zero=ZeroStage.ZERO1, framework=Framework.TORCH_DDP)
    assert not pipeline_defers_grad_sync(ddp) and not reduces_every_micro_batch(ddp)
    deepspeed = replace(base, pp=1, framework=Framework.DEEPSPEED)
    assert not pipeline_defers_grad_sync(deepspeed) and reduces_every_micro_batch(deepspeed)


def test_held_unsharded_gradients_replace_the_sharded_ones_in_the_forward_peak():
    """pp 2 FSDP2: every local parameter's gradient held in fp32 (the reduce dtype); the forward/backward peak counts
    it instead of the sharded gradients, the optimizer step's peak the sharded ones; the search's verdict agrees with
    the report; pp 1 holds none."""
    work = _compiled(2)
    for st in work.memory.stages:
        assert st.buffers.held_grads_bytes > 4 * st.grads_bytes * 0.99  # fp32 shards over dp 4: a quarter, padded
        assert st.forward_peak_bytes == pytest.approx(
            st.params_bytes + st.optimizer_bytes + st.activations_bytes + st.buffers_bytes, rel=1e-12)
    assert memory_verdict(MODEL, CLUSTER, work.layout).total_bytes == pytest.approx(
        work.memory.worst.total_bytes, rel=1e-12)
    assert all(st.buffers.held_grads_bytes == 0 for st in _compiled(1).memory.stages)


def test_accumulation_bytes_hand_worked():
    """bf16 gradients, fp32 reduce, m = 4: the cast (2 + 4) once, then 3 adds of (2 + 2·4): (6 + 30) / 4 = 9 bytes
    per element and micro-batch; one dtype (fp32): (0 + 3·12) / 4 = 9."""
    assert accumulate_bytes_per_grad(2, 4, 4) == 9.0
    assert accumulate_bytes_per_grad(4, 4, 4) == 9.0
    assert accumulate_bytes_per_grad(2, 4, 1) == 6.0
