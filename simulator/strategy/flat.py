"""Build a :class:`Strategy` from one flat mapping of named values (CLI flags, a YAML file, a profile).

Every key is one field; nested parts (gradient sync, input, stragglers, failures) take their
fields' names, with ``ps_`` in front of the parameter-server ones. Text values are read into
enums (``"1f1b"``, ``"zero2"`` or ``2``, ``"hierarchical"``) and sizes (``"25MB"``). Unknown keys
and keys of the sync kind not chosen are errors that list the valid ones.
"""

from __future__ import annotations

from simulator.errors import SpecError
from simulator.schedules import ScheduleKind
from simulator.strategy.faults import FailureModel, StragglerModel
from simulator.strategy.spec import (AttentionKind, DataSource, InputPipeline, Offload, PlacementOrder, Strategy,
                                     ZeroStage)
from simulator.strategy.sync import (AllReduceAlgorithm, AllReduceSync, DpSyncKind, ParamServerMode,
                                     ParamServerSync)
from simulator.units import parse_size
from simulator.workload import Recompute

STRATEGY_KEYS = ("global_batch", "micro_batch", "dp", "tp", "pp", "placement", "schedule", "virtual_stages",
                 "layer_split", "sequence_parallel", "zero", "offload", "recompute", "attention", "profile")
ALLREDUCE_KEYS = {"allreduce_algorithm": "algorithm", "bucket_bytes": "bucket_bytes", "bucket_params": "bucket_params",
                  "allgather_bucket_params": "allgather_bucket_params", "overlap_grad_reduce": "overlap_grad_reduce",
                  "fusion_cycle_s": "fusion_cycle_s"}
PS_KEYS = {"ps_mode": "mode", "staleness_steps": "staleness_steps", "ps_shards": "shards",
           "ps_server_nodes": "server_nodes"}
INPUT_KEYS = {"bytes_per_sample": "bytes_per_sample", "data_source": "source",
              "shared_storage_GBps": "shared_storage_GBps", "prefetch_batches": "prefetch_batches"}
STRAGGLER_KEYS = {"speed_factors": "speed_factors", "slowdown_prob": "slowdown_prob",
                  "slowdown_factor": "slowdown_factor", "seed": "seed"}
FAILURE_KEYS = {"mtbf_gpu_hours": "mtbf_gpu_hours", "checkpoint_interval_steps": "checkpoint_interval_steps",
                "checkpoint_cost_s": "checkpoint_cost_s", "restart_cost_s": "restart_cost_s"}
ALL_KEYS = (STRATEGY_KEYS + ("dp_sync",) + tuple(ALLREDUCE_KEYS) + tuple(PS_KEYS) + tuple(INPUT_KEYS)
            + tuple(STRAGGLER_KEYS) + tuple(FAILURE_KEYS))


def _enum(key: str, kind, value):
    if isinstance(value, kind):
        return value
    if hasattr(kind, "parse"):
        return kind.parse(str(value))
    text = str(value).lower()
    for member in kind:
        if text in (str(member.value).lower(), member.name.lower()):
            return member
    raise SpecError(key, f"unknown value {value!r}; known: {', '.join(str(m.value) for m in kind)}")


def _zero(value) -> ZeroStage:
    if isinstance(value, ZeroStage):
        return value
    text = str(value).lower().removeprefix("zero").removeprefix("-")
    if text in ("0", "1", "2", "3"):
        return ZeroStage(int(text))
    raise SpecError("zero", f"unknown ZeRO stage {value!r}; use 0, 1, 2 or 3")


_CONVERT = {
    "placement": lambda v: _enum("placement", PlacementOrder, v),
    "schedule": lambda v: _enum("schedule", ScheduleKind, v),
    "zero": _zero,
    "offload": lambda v: _enum("offload", Offload, v),
    "recompute": lambda v: _enum("recompute", Recompute, v),
    "attention": lambda v: _enum("attention", AttentionKind, v),
    "dp_sync": lambda v: _enum("dp_sync", DpSyncKind, v),
    "allreduce_algorithm": lambda v: _enum("allreduce_algorithm", AllReduceAlgorithm, v),
    "ps_mode": lambda v: _enum("ps_mode", ParamServerMode, v),
    "data_source": lambda v: _enum("data_source", DataSource, v),
    "bucket_bytes": lambda v: v if v is None or isinstance(v, int) else parse_size(v, "bucket_bytes"),
    "layer_split": lambda v: v if v is None else tuple(v),
    "speed_factors": tuple,
}


def _pick(values: dict, keys: dict[str, str]) -> dict:
    return {field: values[key] for key, field in keys.items() if key in values}


def strategy_from_flat(values: dict) -> Strategy:
    """A :class:`Strategy` from flat keys (see :data:`ALL_KEYS`); missing keys keep the field defaults."""
    unknown = sorted(set(values) - set(ALL_KEYS))
    if unknown:
        raise SpecError(unknown[0], f"unknown strategy key; known: {', '.join(ALL_KEYS)}")
    values = {k: (_CONVERT[k](v) if k in _CONVERT else v) for k, v in values.items()}
    kind = values.get("dp_sync", DpSyncKind.ALL_REDUCE)
    wrong = PS_KEYS if kind is DpSyncKind.ALL_REDUCE else ALLREDUCE_KEYS
    clash = sorted(set(values) & set(wrong))
    if clash:
        raise SpecError(clash[0], f"does not apply to dp_sync {kind.value}; drop it or change dp_sync")
    if "bucket_params" in values and values["bucket_params"] is not None:
        if values.get("bucket_bytes") is not None:
            raise SpecError("bucket_params", "give bucket_bytes or bucket_params, not both")
        values["bucket_bytes"] = None
    sync = (AllReduceSync(**_pick(values, ALLREDUCE_KEYS)) if kind is DpSyncKind.ALL_REDUCE
            else ParamServerSync(**_pick(values, PS_KEYS)))
    failure_args = _pick(values, FAILURE_KEYS)
    if failure_args and len(failure_args) != len(FAILURE_KEYS):
        missing = sorted(set(FAILURE_KEYS) - set(k for k in values if k in FAILURE_KEYS))
        raise SpecError(missing[0], f"the failure model needs all of {', '.join(FAILURE_KEYS)}")
    return Strategy(
        **{k: values[k] for k in STRATEGY_KEYS if k in values}, dp_sync=sync,
        input=InputPipeline(**_pick(values, INPUT_KEYS)), stragglers=StragglerModel(**_pick(values, STRAGGLER_KEYS)),
        failures=FailureModel(**failure_args) if failure_args else None)


def strategy_from_flat_with_profile(defaults: dict, overrides: dict) -> Strategy:
    """Profile ``defaults`` under user ``overrides``; switching ``dp_sync`` drops the other kind's defaults."""
    merged = dict(defaults)
    kind = _CONVERT["dp_sync"](overrides.get("dp_sync", merged.get("dp_sync", DpSyncKind.ALL_REDUCE)))
    drop = PS_KEYS if kind is DpSyncKind.ALL_REDUCE else ALLREDUCE_KEYS
    merged = {k: v for k, v in merged.items() if k not in drop}
    for given, other in (("bucket_bytes", "bucket_params"), ("bucket_params", "bucket_bytes")):
        if given in overrides:  # one bucket capacity: the user's replaces the profile's, whichever unit
            merged.pop(other, None)
    merged.update(overrides)
    return strategy_from_flat(merged)
