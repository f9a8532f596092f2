"""A rank's gradient sync remembered per :func:`simulator.compile.grad_sync.grad_sync_key`, the rank and what it
holds (:func:`simulator.compile.step.stage_work`; a search's structures that differ in micro-batch, recompute
or schedule share one answer; sequence parallelism is read: torch's AdamW all-reduces the SP norms' gradients) is the sync a fresh cache computes for each of them: whatever the framework, ZeRO stage, offload, buckets or gradient sync, changing
only :data:`~simulator.compile.grad_sync.UNREAD_FIELDS` leaves :func:`grad_sync`'s answer unchanged (fails if it
starts to read one of them), and a field it does read (buckets, ZeRO) changes the key."""

from dataclasses import replace

from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.compile.grad_sync import UNREAD_FIELDS, grad_sync, grad_sync_key
from simulator.compile.step import stage_groups, stage_work
from simulator.errors import SpecError
from simulator.schedules import ScheduleKind
from simulator.strategy import (AllReduceSync, Framework, Offload, ParamServerSync, Recompute, Strategy, ZeroStage,
                                build_layout)
from simulator.units import MiB
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-a100", 2), get_preset("gpt3-1.3b")
BASES = [
    Strategy(global_batch=64, tp=2, pp=2),
    Strategy(global_batch=64, tp=1, pp=1, dp_sync=AllReduceSync(bucket_bytes=10 * MiB)),
    Strategy(global_batch=64, tp=2, pp=2, zero=ZeroStage.ZERO1, dp_sync=AllReduceSync(overlap_grad_reduce=False)),
    Strategy(global_batch=64, tp=1, pp=2, zero=ZeroStage.ZERO1, framework=Framework.TORCH_DDP),
    Strategy(global_batch=64, tp=2, pp=1, zero=ZeroStage.ZERO2, framework=Framework.FSDP2),
    Strategy(global_batch=64, tp=1, pp=1, zero=ZeroStage.ZERO3, framework=Framework.FSDP2),
    Strategy(global_batch=64, tp=2, pp=2, zero=ZeroStage.ZERO1, framework=Framework.MEGATRON,
             unfused_grad_accumulation=True),
    Strategy(global_batch=64, tp=1, pp=1, zero=ZeroStage.ZERO1, offload=Offload.OPTIMIZER),
    Strategy(global_batch=64, tp=2, pp=1, zero=ZeroStage.ZERO2, dp_sync=AllReduceSync(bucket_bytes=5 * MiB)),
    Strategy(global_batch=64, tp=1, pp=1, dp_sync=ParamServerSync(shards=2)),
]


def _variant(s: Strategy, micro_batch: int, recompute: Recompute, sp: bool, gpipe: bool) -> Strategy:
    del sp  # read by grad_sync since 2026-11-25 (simulator.compile.torch_tp.sp_optimizer_s): not varied here
    return replace(s, micro_batch=micro_batch, recompute=recompute,
                   schedule=ScheduleKind.GPIPE if gpipe and s.pp > 1 else s.schedule)


def _sync(cache: CostCache, s: Strategy, r: int, kept: bool):
    """(rank r's grad sync, its key): through stage_work's memo (``kept``) or computed afresh."""
    layout = build_layout(s, CLUSTER, MODEL)
    rep, _, dp_group, *_ = stage_groups(cache, layout, r)
    if kept:
        st = stage_work(cache, MODEL, layout, r)
        answer = cache._memo[next(k for k in reversed(cache._memo) if k[0] == "grad sync of rank")]
        assert answer[0] == st.grad_sync[:len(answer[0])]
    else:
        answer = grad_sync(cache, MODEL, layout, rep, dp_group, 1.0e8 + r)
    return answer, (grad_sync_key(MODEL, layout), rep, dp_group)


@settings(max_examples=40, deadline=None)
@given(base=st.sampled_from(BASES), micro_batch=st.sampled_from((1, 2, 4)), recompute=st.sampled_from(tuple(Recompute)),
       sp=st.booleans(), gpipe=st.booleans(), r=st.integers(0, 1))
def test_a_kept_sync_is_each_structures_own(base, micro_batch, recompute, sp, gpipe, r):
    r = min(r, base.pp - 1)
    try:
        other = _variant(base, micro_batch, recompute, sp, gpipe)
        build_layout(other, CLUSTER, MODEL)
    except SpecError:
        return
    first, key = _sync(CostCache(CLUSTER), base, r, kept=False)
    again, other_key = _sync(CostCache(CLUSTER), other, r, kept=False)
    assert other_key == key and again == first  # the same key, the same answer computed afresh
    cache = CostCache(CLUSTER)
    one, _ = _sync(cache, base, r, kept=True)
    two, _ = _sync(cache, other, r, kept=True)  # the first structure's answer, remembered
    assert two is one
    assert one == _sync(CostCache(CLUSTER), other, r, kept=True)[0]


def test_every_base_is_a_valid_layout():  # so the property above is not vacuous
    for s in BASES:
        build_layout(s, CLUSTER, MODEL)


def test_the_key_keeps_what_the_sync_reads():
    s = BASES[0]
    keys = {_sync(CostCache(CLUSTER), x, 0, kept=False)[1][0] for x in
            (s, replace(s, dp_sync=AllReduceSync(bucket_bytes=1 * MiB)), replace(s, zero=ZeroStage.ZERO1))}
    assert len(keys) == 3
    assert UNREAD_FIELDS == {"global_batch", "micro_batch", "schedule", "recompute"}  # SP: torch_tp.sp_optimizer_s
