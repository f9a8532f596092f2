"""Strategy: what the user asks (:class:`Strategy`) and what it implies on a cluster and a workload
(:class:`ParallelLayout`, built by :func:`build_layout`). Every field is declared once
(:mod:`simulator.strategy.fields`); flat keys (:mod:`simulator.strategy.flat`), command-line flags,
the analytical cache key and the plan file derive from the declarations. Framework profiles that
set defaults live in :mod:`simulator.profiles`; pipeline schedules in :mod:`simulator.schedules`.
"""

from simulator.schedules import ScheduleKind
from simulator.strategy.faults import FailureModel, StragglerModel
from simulator.strategy.fields import Role
from simulator.strategy.framework import Framework, Partitioning, resolve_framework
from simulator.strategy.input_pipeline import InputPipeline
from simulator.strategy.kinds import AttentionKind, DataSource, Offload, PlacementOrder, ZeroStage
from simulator.strategy.layer_split import even_split
from simulator.strategy.layout import ParallelLayout, RankCoord, build_layout
from simulator.strategy.spec import Strategy
from simulator.strategy.sync import (DDP_BUCKET_CAP_BYTES, AllReduceAlgorithm, AllReduceSync, DpSyncKind,
                                     ParamServerMode, ParamServerSync)
from simulator.workload import Recompute

__all__ = [
    "AllReduceAlgorithm", "AllReduceSync", "AttentionKind", "DDP_BUCKET_CAP_BYTES", "DataSource", "DpSyncKind",
    "FailureModel", "Framework", "InputPipeline", "Offload", "ParallelLayout", "ParamServerMode", "ParamServerSync",
    "Partitioning", "PlacementOrder", "RankCoord", "Recompute", "Role", "ScheduleKind", "Strategy", "StragglerModel",
    "ZeroStage", "build_layout", "even_split", "resolve_framework",
]
