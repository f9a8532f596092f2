"""The search: enumerate the space, drop the invalid and the infeasible, rank the rest with the
vectorised closed form, refine the best with the discrete-event engine.

1. Enumerate (:mod:`planner.space`): flat keys for every combination of the axes.
2. Invalid: the layout rules on arrays of candidates (:func:`simulator.strategy.rules.valid_mask`,
   the rules :func:`build_layout` raises from), then each survivor's own field checks.
3. Infeasible: per-rank GPU memory over the device's capacity less ``reserve_gb``, or host / NVMe
   capacity exceeded (:func:`simulator.memory.memory_report`). Memory depends on the micro-batch
   count only through the micro-batches in flight, so it is computed once per structure with the
   count capped where the schedule's in-flight count stops growing (1F1B: pp; interleaved: 2·pp;
   GPipe: all m).
4. Rank: :func:`simulator.analytical_vec.estimate_many` with one :class:`CostCache` for the search.
5. Refine: the top ``refine`` re-simulated with the discrete-event engine and re-ranked by it.

Counts by outcome (and by reason) are kept for the report; the same inputs give the same ranking.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from simulator.analytical_structures import structure_key
from simulator.analytical_vec import OnInvalid, estimate_many
from simulator.compile import CostCache
from simulator.errors import SpecError
from simulator.memory import memory_report, model_state_bytes
from simulator.profiles import apply_profile
from simulator.schedules import ScheduleKind
from simulator.strategy import Framework, Offload, Partitioning, Strategy, ZeroStage, build_layout
from simulator.strategy.flat import strategy_from_flat
from simulator.strategy.framework import resolve_framework
from simulator.strategy.rules import RULES, Candidates, valid_mask
from simulator.units import GB

from planner.space import Problem, default_axes, enumerate_keys, pin


@dataclass
class Counts:
    """How many candidates ended where, and why."""

    enumerated: int = 0
    invalid: Counter = field(default_factory=Counter)
    """By the field that breaks (``tp``, ``micro_batches``, ...)."""
    infeasible: Counter = field(default_factory=Counter)
    """By what overflows (``gpu memory``, ``host memory``, ``nvme``)."""
    ranked: int = 0
    refined: int = 0
    seconds: dict = field(default_factory=dict)
    """Wall seconds per phase."""

    def to_dict(self) -> dict:
        return {"enumerated": self.enumerated, "invalid": sum(self.invalid.values()),
                "invalid_by_reason": dict(sorted(self.invalid.items())),
                "infeasible": sum(self.infeasible.values()),
                "infeasible_by_reason": dict(sorted(self.infeasible.items())),
                "ranked": self.ranked, "refined": self.refined,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}


def _zero_with_pp(key: dict) -> bool:
    """Whether the key's framework runs ZeRO-2/3 with pp > 1 (rules.py ``zero``); a framework the key
    cannot resolve passes here and is refused with its own error when its strategy is built."""
    try:
        framework = resolve_framework(ZeroStage(int(key.get("zero", 0))), key.get("partitioning"),
                                      key.get("framework"))[1]
    except (SpecError, ValueError):
        return True
    return framework.partitions_gradients_with_pipeline


def _arrays(keys: list[dict]) -> Candidates:
    col = lambda name, default=1: np.array([k.get(name, default) for k in keys], dtype=np.int64)  # noqa: E731
    inter = np.array([k.get("schedule") is ScheduleKind.INTERLEAVED and k.get("virtual_stages", 1) > 1
                      for k in keys], dtype=bool)
    zero = np.array([int(k.get("zero", 0)) for k in keys], dtype=np.int64)
    zero_with_pp = np.array([_zero_with_pp(k) for k in keys], dtype=bool)
    return Candidates.of(dp=col("dp"), tp=col("tp"), pp=col("pp"), v=col("virtual_stages"),
                         micro_batch=col("micro_batch"), global_batch=col("global_batch"), interleaved=inter,
                         zero=zero, zero_with_pp=zero_with_pp)


def _valid(keys: list[dict], problem: Problem, workload, counts: Counts) -> list[dict]:
    """The candidates that pass the layout rules (counted by the first rule each breaks)."""
    if not keys:
        return []
    c = _arrays(keys)
    ok = valid_mask(c, problem.gpus, workload)
    failing = np.flatnonzero(~ok)
    reason = np.full(len(keys), "tp", dtype=object)  # valid_mask = RULES and the workload's tp check
    for rule in reversed(RULES):  # the first rule that breaks wins
        reason[~rule.ok(c, problem.gpus, problem.layers)] = rule.field
    counts.invalid.update(reason[failing].tolist())
    return [keys[i] for i in np.flatnonzero(ok)]


def _strategies(keys: list[dict], profile: str | None, counts: Counts) -> list[Strategy]:
    out = []
    for k in keys:
        try:
            out.append(apply_profile(profile, **k) if profile else strategy_from_flat(k))
        except SpecError as err:
            counts.invalid[err.field] += 1
    return out


def _in_flight_cap(s: Strategy, m: int) -> int:
    """Micro-batches beyond which a schedule holds no more in flight (module docstring, step 3), as
    :func:`simulator.memory.activations.in_flight` counts them: 1F1B min(p − k, m) stops growing at
    m = p; every interleaved schedule (v = 1 included, which that function counts the interleaved
    way) at m = 2p; GPipe keeps all m."""
    if s.pp == 1 or s.schedule is ScheduleKind.GPIPE:
        return m if s.pp > 1 else 1
    return min(m, 2 * s.pp if s.schedule is ScheduleKind.INTERLEAVED else s.pp)


def _memory(cache: dict, states: dict, workload, cluster, s: Strategy):
    """The memory report of ``s``, shared by every candidate with the same memory inputs. Only its byte
    figures are meaningful for ``s``: the report's layout is the stand-in with the capped batch."""
    dp = s.dp
    m = s.global_batch // (dp * s.micro_batch)
    cap = _in_flight_cap(s, m)
    key = (structure_key(s), s.offload_activations, s.framework, s.partitioning, s.gradient_as_bucket_view, cap)
    if key not in cache:
        small = replace(s, global_batch=dp * s.micro_batch * cap)
        cache[key] = memory_report(workload, cluster, build_layout(small, cluster, workload), cache=states)
    return cache[key]


def _states_lower_bound(workload, s: Strategy) -> float:
    """Model-state bytes no rank can go below: the parameters spread evenly over tp·pp in one flat
    tensor, through the memory model's own ZeRO accounting (the most loaded real rank holds at least
    its even share, plus replicated norms and padding). 0 under offload (states leave the GPU)."""
    if s.offload is not Offload.NONE:
        return 0.0
    even = -(-workload.params // (s.tp * s.pp))
    states = model_state_bytes([("even share", (even,))], dp=s.dp, zero=s.zero, dtype=workload.dtype,
                               partitioning=Partitioning.FLAT, framework=Framework.DEEPSPEED
                               if s.zero is not ZeroStage.ZERO0 else Framework.TORCH_DDP)
    return states.params_bytes + states.grads_bytes + states.optimizer_bytes


def _feasible(strategies: list[Strategy], workload, cluster, reserve_gb: float, counts: Counts):
    """(strategy, memory report) of those that fit, counting the others by what overflows."""
    cache: dict = {}
    states: dict = {}
    limit = cluster.device.memory_bytes - reserve_gb * GB
    out = []
    for s in strategies:
        if _states_lower_bound(workload, s) > limit:  # cheap: skip the full report
            counts.infeasible["gpu memory"] += 1
            continue
        try:
            report = _memory(cache, states, workload, cluster, s)
        except SpecError as err:
            counts.invalid[err.field] += 1
            continue
        over = [r.split(":")[0] for r in report.reasons if not r.startswith("GPU")]
        if report.worst.total_bytes > limit:
            over.insert(0, "gpu memory")
        if over:
            counts.infeasible[{"host": "host memory", "NVMe": "nvme"}.get(over[0], over[0])] += 1
            continue
        out.append((s, report))
    return out


@dataclass(frozen=True)
class Search:
    """The inputs of one search."""

    workload: object
    cluster: object
    problem: Problem
    pins: dict
    profile: str | None = None
    reserve_gb: float = 0.0


def _check_pins_apply(keys: list[dict], pins: dict) -> None:
    """Every pinned value must reach some candidate; one that never does (``--recompute selective``
    without eager attention, ``--virtual-stages 4`` with ``--schedule 1f1b``) is an error naming the key
    rather than silently dropped."""
    own = [key for key in pins if key not in ("dp", "tp", "pp", "max_pp", "dp_sync")]
    if not keys and len(own) == 1:  # one pin emptied the space: it is the culprit
        keys = [{}]
    for key, values in pins.items():
        if key not in own or not keys:
            continue  # several pins emptied the space together: the caller says which were given
        used = {k.get(key) for k in keys}
        missing = [v for v in values if v not in used]
        if missing:
            shown = getattr(missing[0], "value", missing[0])
            raise SpecError(key, f"{shown} applies to no candidate: its dimension does not apply there (e.g. "
                            "selective recompute needs eager attention, virtual stages an interleaved schedule, "
                            "sequence parallelism tp > 1) or another pin excludes it")


def rank(search: Search, counts: Counts, cache: CostCache | None = None) -> pd.DataFrame:
    """Every feasible candidate with its analytical estimate and memory, fastest first."""
    t0 = time.perf_counter()
    keys = list(enumerate_keys(search.problem, pin(default_axes(search.problem), search.pins)))
    _check_pins_apply(keys, search.pins)
    counts.enumerated = len(keys)
    strategies = _strategies(_valid(keys, search.problem, search.workload, counts), search.profile, counts)
    counts.seconds["enumerate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    fits = _feasible(strategies, search.workload, search.cluster, search.reserve_gb, counts)
    counts.seconds["memory"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    cache = cache or CostCache(search.cluster)
    frame = estimate_many(search.cluster, search.workload, [s for s, _ in fits], cache=cache,
                          on_invalid=OnInvalid.MARK)
    counts.seconds["rank"] = time.perf_counter() - t0
    frame["strategy"] = [s for s, _ in fits]
    frame["memory_bytes"] = [r.worst.total_bytes for _, r in fits]
    frame["headroom_bytes"] = search.cluster.device.memory_bytes - frame["memory_bytes"]
    bad = frame["error"] != ""
    for message in frame.loc[bad, "error"]:
        counts.invalid[message.split(":")[0]] += 1
    frame = frame[~bad].sort_values(["step_time_s", "memory_bytes"], kind="stable").reset_index(drop=True)
    counts.ranked = len(frame)
    return frame
