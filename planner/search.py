"""The search: enumerate the space, drop the invalid and the infeasible, rank the rest with the
vectorised closed form, refine the best with the discrete-event engine.

1. Enumerate (:mod:`planner.space`): flat keys for every combination of the axes.
2. Invalid: the layout rules on arrays of candidates (:func:`simulator.strategy.rules.valid_mask`,
   the rules :func:`build_layout` raises from), then each survivor's own field checks.
3. Infeasible: per-rank GPU memory over the device's capacity less ``reserve_gb``, or host / NVMe
   capacity exceeded (:mod:`planner.feasible`, one memory report per set of memory inputs).
4. Rank (:mod:`planner.score`): :func:`simulator.analytical_vec.estimate_many` with one :class:`CostCache` per
   process, in chunks of :data:`planner.score.RANK_CHUNK` so that progress can be reported; with ``jobs`` > 1 the
   candidates are split
   between that many processes (at least :data:`planner.score.RANK_PER_PROCESS` each), the results in their order.
5. Variants: gradient sync and offload of the best bases (:mod:`planner.variants`), through 2–4.
6. Refine (:mod:`planner.result`): the top ``refine`` re-simulated with the discrete-event engine.

Counts by outcome (and by reason) are kept for the report; the same inputs give the same ranking.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from simulator.compile import CostCache
from simulator.errors import SpecError
from simulator.profiles import apply_profile
from simulator.schedules import ScheduleKind
from simulator.strategy import AttentionKind, Offload, Recompute, Strategy, ZeroStage
from simulator.strategy.flat import strategy_from_flat
from simulator.strategy.framework import resolve_framework
from simulator.strategy.sync import DpSyncKind
from simulator.strategy.rules import RULES, Candidates, valid_mask
from simulator.dtypes import Dtype
from simulator.workload.context import ContextKind, ContextSplit
from simulator.workload.fp8 import MatmulPrecision
from simulator.workload.op_sac import op_sac_problem

from planner.feasible import _feasible, _memory, _Memory  # noqa: F401 - _memory: tests share the cache rule
from planner.frameworks import Capability
from planner.score import by_step_time, score
from planner.space import Axis, Problem, default_axes, enumerate_keys, pin
from planner.variants import check_offload_pin, sync_candidates, variants

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: called as the search advances (the CLI draws a counter)."""

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
    variants: int = 0
    """Of ``enumerated``, the gradient-sync and offload variants of the best bases (planner.variants)."""
    seconds: dict = field(default_factory=dict)
    """Wall seconds per phase."""

    def to_dict(self) -> dict:
        return {"enumerated": self.enumerated, "invalid": sum(self.invalid.values()),
                "invalid_by_reason": dict(sorted(self.invalid.items())),
                "infeasible": sum(self.infeasible.values()),
                "infeasible_by_reason": dict(sorted(self.infeasible.items())),
                "ranked": self.ranked, "refined": self.refined, "variants": self.variants,
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
                         zero=zero, zero_with_pp=zero_with_pp, ep=col("ep"), cp=col("cp"))


def _contexts(keys: list[dict]) -> np.ndarray:
    """Each key's context split (:class:`ContextSplit`), for the workload's cp rules."""
    out = np.empty(len(keys), dtype=object)
    out[:] = [ContextSplit(int(k.get("cp", 1)), k.get("cp_kind", ContextKind.RING), k.get("cp_balanced", True))
              for k in keys]
    return out


def _valid(keys: list[dict], problem: Problem, workload, counts: Counts) -> list[dict]:
    """The candidates that pass the layout rules (counted by the first rule each breaks)."""
    if not keys:
        return []
    c = _arrays(keys)
    contexts = _contexts(keys)
    ok = valid_mask(c, problem.gpus, workload, contexts)
    failing = np.flatnonzero(~ok)
    reason = np.full(len(keys), "tp", dtype=object)  # valid_mask = RULES and the workload's tp and cp checks
    reason[valid_mask(c, problem.gpus, workload) & ~ok] = "cp"  # only the context-parallel rules fail
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


def server_nodes(pins: dict) -> int:
    """Dedicated parameter-server nodes the pins ask for (``--server-nodes N``; 0: none): the cluster
    holds them beside the workers, so one value only (it sizes the cluster)."""
    values = pins.get("ps_server_nodes", (0,))
    if len(values) != 1:
        raise SpecError("ps_server_nodes", "give one value: the dedicated server nodes size the cluster")
    return int(values[0])


@dataclass(frozen=True)
class Search:
    """The inputs of one search."""

    workload: object
    cluster: object
    problem: Problem
    pins: dict
    capability: Capability | None = None
    """The framework profile's capability (:mod:`planner.frameworks`), None for no profile."""
    reserve_gb: float = 0.0
    progress: Progress | None = None
    jobs: int = 1
    """Processes the rank phase may use (:func:`planner.score.score`)."""

    def tick(self, phase: str) -> Callable[[int, int], None] | None:
        """A ``(done, total)`` callback reporting ``phase`` (None without a progress callback)."""
        return None if self.progress is None else (lambda done, total: self.progress(phase, done, total))

    @property
    def layout_gpus(self) -> int | None:
        """Worker GPUs for the layouts: None for the whole cluster (less dedicated server nodes), the
        count for a job smaller than one node."""
        return None if self.problem.gpus == self.cluster.world_size or server_nodes(self.pins) else self.problem.gpus

    @property
    def profile(self) -> str | None:
        """The simulator profile whose defaults the candidates take."""
        return None if self.capability is None else self.capability.defaults

    def allowed(self, key: str) -> bool:
        """Whether the second phase may vary ``key`` at all under the framework profile."""
        cap = self.capability
        if key == "dp_sync" and self.layout_gpus is not None:
            return False  # a parameter server uses every worker node (build_layout): not on part of one
        if cap is None:
            return True
        if key == "dp_sync":
            return cap.allows("dp_sync", DpSyncKind.PARAM_SERVER)
        if key == "offload":
            return any(cap.allows("offload", o) for o in Offload if o is not Offload.NONE)
        if key == "bucket_bytes":
            return cap.buckets
        return True

    def _framework_recompute(self, axis: Axis, values: tuple) -> tuple[Axis, tuple]:
        """The recompute axis with the profile's own policies added (unpinned, and where the workload
        has blocks the policy is modelled for: :func:`simulator.workload.op_sac.op_sac_problem`)."""
        extra = () if "recompute" in self.pins or op_sac_problem(self.workload, True) is not None \
            else self.capability.extra_recompute
        return Axis(axis.key, axis.values, axis.applies, _op_level_allow(axis.allow)), values + extra

    def axes(self) -> tuple:
        """The default axes under the pins, then restricted to what the framework runs."""
        axes = pin(default_axes(self.problem), self.pins)
        cap = self.capability
        if cap is None:
            return axes
        out = []
        for axis in axes:
            if axis.key == "degrees":
                values = tuple(d for d in axis.values if cap.allows("tp", d[1]) and cap.allows("pp", d[2]))
            else:
                values = tuple(v for v in axis.values if cap.allows(axis.key, v))
            if axis.key == "recompute":
                axis, values = self._framework_recompute(axis, values)
            out.append(Axis(axis.key, values, axis.applies, axis.allow))
        return tuple(out) + tuple(Axis(k, (v,)) for k, v in cap.fixed.items() if k not in self.pins)


def _op_level_allow(allow):
    """``allow`` of the recompute axis, plus: op-level selective recompute only with flash attention."""
    return lambda k, v: (allow is None or allow(k, v)) and (v is not Recompute.SELECTIVE_OP
                                                           or k.get("attention", AttentionKind.FLASH) is AttentionKind.FLASH)


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


def _admitted(strategies: list[Strategy], cap: Capability | None, counts: Counts) -> tuple[list[Strategy], str]:
    """The strategies the framework runs, and the first refusal's reason ('' if none)."""
    if cap is None:
        return strategies, ""
    out, first = [], ""
    for s in strategies:
        why = cap.refusal(s)
        if why is None:
            out.append(s)
        else:
            counts.invalid["profile"] += 1
            first = first or why
    return out, first


def _check_precision_pin(cluster, values) -> None:
    """A pinned FP8 on a device without FP8 tensor cores is one line naming the flag, not an empty search."""
    if MatmulPrecision.FP8 in values and Dtype.FP8 not in cluster.device.peak_tflops:
        raise SpecError("precision", f"fp8: {cluster.device.name} has no FP8 tensor cores (no peak_tflops.fp8); "
                        "drop the pin, or plan on an FP8 device (dgx-h100, hgx-h200, dgx-b200)")


def rank(search: Search, counts: Counts, cache: CostCache | None = None) -> pd.DataFrame:
    """Every feasible candidate with its analytical estimate and memory, fastest first: the base
    space, then the gradient-sync and offload variants of the best bases (:mod:`planner.variants`)."""
    t0 = time.perf_counter()
    if search.capability is not None:
        search.capability.check_pins(search.pins, search.problem.gpus, search.problem.gpus_per_node)
    if "offload" in search.pins:
        check_offload_pin(search.cluster, search.pins["offload"])
    _check_precision_pin(search.cluster, search.pins.get("precision", ()))
    keys = list(enumerate_keys(search.problem, search.axes()))
    _check_pins_apply(keys, search.pins)
    counts.enumerated = len(keys)
    valid = _valid(keys, search.problem, search.workload, counts)
    built = _strategies(valid, search.profile, counts)
    strategies, refused = _admitted(built, search.capability, counts)
    if keys and not valid and search.capability is not None:  # the layout rules refused all: say why if the
        scratch = Counts()                                    # framework itself never runs the pinned combination
        any_run, refused = _admitted(_strategies(keys, search.profile, scratch), search.capability, scratch)
        if refused and not any_run:
            raise SpecError("profile", f"{refused}; the pins leave no candidate it can run")
    if built and not strategies:
        raise SpecError("profile", f"{refused}; the pins leave no candidate it can run")
    counts.seconds["enumerate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    mem = _Memory()
    fits = _feasible(strategies, search.workload, search.cluster, search.reserve_gb, counts, mem, search.layout_gpus,
                     search.tick("memory"))
    counts.seconds["memory"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    cache = cache or CostCache(search.cluster)
    frame = by_step_time(score(fits, search, cache, counts))
    counts.seconds["rank"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    over = [s for _, s in sorted(mem.over_gpu, key=lambda bs: bs[0])]
    profile_before = counts.invalid["profile"]
    extra, refused = variants(list(frame["strategy"]), over, search.cluster, search.pins, search.allowed,
                              search.problem.allow_cross_node_tp, sync_candidates(frame))
    extra, _ = _admitted(extra, search.capability, counts)
    counts.enumerated += len(extra) + refused + counts.invalid["profile"] - profile_before
    if refused:
        counts.invalid["strategy"] += refused
    counts.variants = len(extra) + refused
    more = _feasible(extra, search.workload, search.cluster, search.reserve_gb, counts, _Memory(mem.reports, mem.states),
                     search.layout_gpus, search.tick("variants"))
    if more:
        frame = by_step_time(pd.concat([frame, score(more, search, cache, counts, "variants")], ignore_index=True))
    counts.seconds["variants"] = time.perf_counter() - t0
    counts.ranked = len(frame)
    return frame
