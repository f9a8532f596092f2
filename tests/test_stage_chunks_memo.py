"""A pipeline rank's chunks remembered per :func:`simulator.compile.step.chunks_key` (a search's ZeRO-0/1 structures
that differ only in their all-reduce's buckets or options share them) are the chunks a fresh cache compiles for
each: changing only the all-reduce's fields under ZeRO 0/1 leaves them unchanged, whatever the framework, tp, pp,
interleaving, SP, recompute or activation offload (fails if a chunk starts to read those fields), and under ZeRO-2/3
(whose chunks carry the gradient reduce-scatters) or with a parameter server the key keeps the sync's fields."""

from dataclasses import replace

from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.compile.stage_keys import chunks_key
from simulator.compile.step import ParamFetch, _stage_chunks, stage_groups
from simulator.schedules import ScheduleKind
from simulator.strategy import (AllReduceSync, Framework, ParamServerSync, Recompute, Strategy, ZeroStage,
                                build_layout)
from simulator.strategy.sync import AllReduceAlgorithm
from simulator.units import MiB
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-a100", 2), get_preset("gpt3-1.3b")
BASES = [
    Strategy(global_batch=64, tp=2, pp=2),
    Strategy(global_batch=64, tp=1, pp=1),
    Strategy(global_batch=64, tp=2, pp=2, zero=ZeroStage.ZERO1, sequence_parallel=True, recompute=Recompute.FULL),
    Strategy(global_batch=64, tp=1, pp=2, zero=ZeroStage.ZERO1, framework=Framework.TORCH_DDP),
    Strategy(global_batch=64, tp=2, pp=4, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2,
             zero=ZeroStage.ZERO1, framework=Framework.MEGATRON, unfused_grad_accumulation=True),
    Strategy(global_batch=64, tp=2, pp=1, recompute=Recompute.FULL, offload_activations=True),
]
SYNCS = [AllReduceSync(), AllReduceSync(bucket_bytes=1 * MiB), AllReduceSync(overlap_grad_reduce=False),
         AllReduceSync(algorithm=AllReduceAlgorithm.RING, bucket_bytes=100 * MiB),
         AllReduceSync(allgather_bucket_params=10_000_000)]


def _chunks(cache: CostCache, s: Strategy, r: int):
    layout = build_layout(s, CLUSTER, MODEL)
    key = chunks_key(MODEL, layout, ParamFetch.INFINITY)
    made = _stage_chunks(cache, MODEL, layout, r, stage_groups(cache, layout, r), ParamFetch.INFINITY, None)
    return made, key


@settings(max_examples=30, deadline=None)
@given(base=st.sampled_from(BASES), first=st.sampled_from(SYNCS), other=st.sampled_from(SYNCS), r=st.integers(0, 3))
def test_chunks_shared_across_all_reduce_options_are_each_structures_own(base, first, other, r):
    r = min(r, base.pp - 1)
    one, key = _chunks(CostCache(CLUSTER), replace(base, dp_sync=first), r)
    two, other_key = _chunks(CostCache(CLUSTER), replace(base, dp_sync=other), r)
    assert other_key == key
    assert two == one


def test_every_base_is_a_valid_layout():  # so the property above is not vacuous
    for s in BASES:
        for sync in SYNCS:
            build_layout(replace(s, dp_sync=sync), CLUSTER, MODEL)


def test_the_key_keeps_the_sync_where_chunks_read_it():
    zero2 = Strategy(global_batch=64, tp=2, pp=1, zero=ZeroStage.ZERO2)
    keys = {_chunks(CostCache(CLUSTER), replace(zero2, dp_sync=sync), 0)[1] for sync in SYNCS[:2]}
    assert len(keys) == 2
    ps = Strategy(global_batch=64, tp=1, pp=1)
    keys = {_chunks(CostCache(CLUSTER), replace(ps, dp_sync=ParamServerSync(shards=k)), 0)[1] for k in (1, 2)}
    assert len(keys) == 2
    # FSDP2 with pp > 1: the chunks hand their once-per-step reduce-scatters to the stage (grad_sync.deferred_sync)
    deferred = Strategy(global_batch=64, tp=2, pp=2, zero=ZeroStage.ZERO3, framework=Framework.FSDP2)
    keys = {_chunks(CostCache(CLUSTER), replace(deferred, dp_sync=sync), 0)[1] for sync in SYNCS[:2]}
    assert len(keys) == 2
