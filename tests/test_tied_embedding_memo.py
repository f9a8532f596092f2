"""A rank's tied-embedding all-reduce is remembered with its gradient sync's key (:func:`simulator.compile.step.
stage_work`, ``grad_sync_key`` and the rank): changing only :data:`~simulator.compile.grad_sync.UNREAD_FIELDS`
(global batch, micro-batch, schedule, recompute) leaves :func:`tied_embedding_sync`'s answer unchanged (fails if it
starts to read one of them), on torch pipelines of a model that ties its embeddings, where the call exists."""

from dataclasses import replace

from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.compile.grad_sync import grad_sync_key
from simulator.compile.step import stage_work
from simulator.compile.tied_embedding import tied_embedding_sync
from simulator.schedules import ScheduleKind
from simulator.strategy import Framework, Recompute, Strategy, ZeroStage, build_layout
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-a100", 2), get_preset("gpt3-1.3b")
BASES = [
    Strategy(global_batch=64, tp=2, pp=2, framework=Framework.TORCH_DDP),
    Strategy(global_batch=64, tp=1, pp=4, zero=ZeroStage.ZERO1, framework=Framework.TORCH_DDP),
    Strategy(global_batch=64, tp=2, pp=2, zero=ZeroStage.ZERO2, framework=Framework.FSDP2),
]


@settings(max_examples=40, deadline=None)
@given(base=st.sampled_from(BASES), micro_batch=st.sampled_from((1, 2, 4)), recompute=st.sampled_from(tuple(Recompute)),
       gpipe=st.booleans(), batch=st.sampled_from((64, 128)), last=st.booleans())
def test_tied_call_reads_no_unread_field(base, micro_batch, recompute, gpipe, batch, last):
    variant = replace(base, global_batch=batch, micro_batch=micro_batch, recompute=recompute,
                      schedule=ScheduleKind.GPIPE if gpipe else base.schedule)
    a, b = build_layout(base, CLUSTER, MODEL), build_layout(variant, CLUSTER, MODEL)
    assert grad_sync_key(MODEL, a) == grad_sync_key(MODEL, b)
    r = base.pp - 1 if last else 0
    want = tied_embedding_sync(CostCache(CLUSTER), MODEL, a, r)
    assert len(want) == 1  # the call exists here
    assert tied_embedding_sync(CostCache(CLUSTER), MODEL, b, r) == want
    cache = CostCache(CLUSTER)  # and the kept one is the variant's own
    stage_work(cache, MODEL, a, r)
    assert stage_work(cache, MODEL, b, r).grad_sync[-1:] == want
