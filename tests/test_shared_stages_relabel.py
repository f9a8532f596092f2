"""A shared stage's relabelling (simulator/compile/shared_stages.py ``_with``) builds the same StageWork and
ChunkWork as ``dataclasses.replace``: equal field by field, of the same type, and the dataclasses it copies have
no ``__post_init__`` or non-init field that ``replace`` would run or refuse."""

from dataclasses import fields, replace

import pytest

from simulator.cluster.io import load_cluster
from simulator.compile import CostCache, compile_stages
from simulator.compile.shared_stages import _relabelled, _with
from simulator.strategy import PlacementOrder, Strategy, ZeroStage, build_layout
from simulator.schedules import ScheduleKind
from simulator.work import ChunkWork, StageWork
from simulator.workload import get_preset


@pytest.mark.parametrize("cls", [StageWork, ChunkWork])
def test_the_copied_dataclasses_stay_plain(cls):
    assert not hasattr(cls, "__post_init__")
    assert all(f.init for f in fields(cls))
    assert cls.__dataclass_params__.frozen and not hasattr(cls, "__slots__")


def test_relabelled_equals_replace():
    cluster = load_cluster("dgx-h100", 4)
    workload = get_preset("gpt3-1.3b")
    strategy = Strategy(global_batch=16, dp=1, tp=4, pp=8, placement=PlacementOrder.TP_DP_PP, zero=ZeroStage.ZERO1,
                        virtual_stages=2, schedule=ScheduleKind.INTERLEAVED)
    layout = build_layout(strategy, cluster, workload)
    model = compile_stages(CostCache(cluster), workload, layout)[2]
    got = _relabelled(model, 5, 321, 8)
    want = replace(model, stage=5, rank=321,
                   chunks=tuple(replace(ch, chunk=5 + k * 8) for k, ch in enumerate(model.chunks)))
    assert got == want and type(got) is StageWork and all(type(c) is ChunkWork for c in got.chunks)
    assert [c.chunk for c in got.chunks] == [5, 13] and model.stage == 2  # the model is left as it was
    for f in fields(StageWork):
        assert getattr(got, f.name) is getattr(want, f.name) or f.name == "chunks"
    assert _with(model) == model and _with(model) is not model
