"""Strategy: what the user asks (:class:`Strategy`) and what it implies on a cluster and a workload
(:class:`ParallelLayout`, built by :func:`build_layout`). Framework profiles that set defaults
live in :mod:`simulator.profiles`; pipeline schedules in :mod:`simulator.schedules`.
"""

from simulator.schedules import ScheduleKind
from simulator.strategy.faults import FailureModel, StragglerModel
from simulator.strategy.layout import ParallelLayout, RankCoord, build_layout
from simulator.strategy.spec import (AttentionKind, DataSource, InputPipeline, Offload, PlacementOrder, Strategy,
                                     ZeroStage)
from simulator.strategy.sync import AllReduceAlgorithm, AllReduceSync, DpSyncKind, ParamServerMode, ParamServerSync
from simulator.workload import Recompute

__all__ = [
    "AllReduceAlgorithm", "AllReduceSync", "AttentionKind", "DataSource", "DpSyncKind", "FailureModel",
    "InputPipeline", "Offload",
    "ParallelLayout", "ParamServerMode", "ParamServerSync", "PlacementOrder", "RankCoord", "Recompute",
    "ScheduleKind", "Strategy", "StragglerModel", "ZeroStage", "build_layout",
]
