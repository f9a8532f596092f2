"""Test helper: a checked layout from the memory model's old keyword names, through the one Strategy.

``layout_of(model, dp=8, zero=ZeroStage.ZERO3, seq=4096, mbs=1, microbatches=1, sp=False,
flash_attention=True, ...)`` builds ``Strategy(global_batch=dp·mbs·microbatches, ...)`` and lays it
out over the first dp·tp·pp GPUs of a cluster big enough for them (DGX A100 unless given).
"""

from __future__ import annotations

from math import ceil

from presets_once import cluster as _cluster
from simulator.strategy import AttentionKind, Strategy, build_layout


def model_at(model, seq: int | None):
    return model if seq is None or not hasattr(model, "with_seq") else model.with_seq(seq)


def layout_of(model, cluster=None, *, dp=1, tp=1, pp=1, mbs=1, microbatches=1, seq=None, sp=False,
              flash_attention=True, **fields):
    model = model_at(model, seq)
    gpus = dp * tp * pp
    cluster = cluster or _cluster("dgx-a100")
    if cluster.world_size < gpus:
        cluster = cluster.with_nodes(ceil(gpus / cluster.node.gpus_per_node))
    strategy = Strategy(global_batch=dp * mbs * microbatches, dp=dp, tp=tp, pp=pp, micro_batch=mbs,
                        sequence_parallel=sp, attention=AttentionKind.FLASH if flash_attention else AttentionKind.EAGER,
                        **fields)
    return build_layout(strategy, cluster, model, gpus=gpus)


def report_of(model, cluster=None, **kw):
    """(memory report, layout) of ``model`` under :func:`layout_of`'s keywords."""
    from simulator.memory import memory_report

    cluster = cluster or _cluster("dgx-a100")
    layout = layout_of(model, cluster, **kw)
    return memory_report(model_at(model, kw.get("seq")), cluster, layout)
