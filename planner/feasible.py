"""The memory phase of the search: which candidates fit, computed once per set of memory inputs.

Memory depends on the micro-batch count only through the micro-batches in flight, so a verdict
(:func:`simulator.memory.verdict.memory_verdict`: the memory report's most loaded rank and its reasons,
over the stages as arrays) is
computed once per structure with the count capped where the schedule's in-flight count stops
growing (1F1B: pp; interleaved: 2·pp; GPipe: all m). A cheap lower bound on the model states drops
the hopeless candidates before any report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.analytical_structures import KEY_FIELDS, structure_key
from simulator.errors import SpecError
from simulator.memory import model_state_bytes
from simulator.memory.verdict import memory_verdict
from simulator.schedules import ScheduleKind
from simulator.strategy import Framework, Offload, Partitioning, Strategy, ZeroStage, build_layout
from simulator.strategy.batch_copy import with_global_batch
from simulator.units import GB

PROGRESS_EVERY = 64
"""Candidates between two progress calls of the memory phase (a display cadence, not a figure)."""


def _in_flight_cap(s: Strategy, m: int) -> int:
    """Micro-batches beyond which a schedule holds no more in flight (module docstring, step 3), as
    :func:`simulator.memory.activations.in_flight` counts them: 1F1B, and the interleaved schedule with
    v = 1 (which is 1F1B), min(p − k, m) stops growing at m = p; interleaved with v > 1 at m = 2p;
    GPipe keeps all m."""
    if s.pp == 1 or s.schedule is ScheduleKind.GPIPE:
        return m if s.pp > 1 else 1
    interleaved = s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1
    return min(m, 2 * s.pp if interleaved else s.pp)


_PLACEMENT_AT = [name for name in KEY_FIELDS if name != "dp_sync"].index("placement")
"""Where ``structure_key`` holds the placement order (its fields are :data:`KEY_FIELDS` less the sync)."""


def _memory(cache: dict, states: dict, workload, cluster, s: Strategy, gpus: int | None = None):
    """The memory verdict of ``s`` (:func:`simulator.memory.verdict.memory_verdict`: its memory report's most
    loaded rank and reasons), shared by every candidate with the same memory inputs, computed on the
    stand-in layout with the capped batch."""
    dp = s.dp
    m = s.global_batch // (dp * s.micro_batch)
    cap = _in_flight_cap(s, m)
    own, kind, sync = structure_key(s)  # less the placement order: no rank's memory depends on it
    own = own[:_PLACEMENT_AT] + own[_PLACEMENT_AT + 1:]
    key = ((own, kind, sync), s.offload_activations, s.framework, s.partitioning, s.gradient_as_bucket_view, cap)
    if key not in cache:
        batch = dp * s.micro_batch * cap
        small = with_global_batch(s, batch)
        cache[key] = memory_verdict(workload, cluster, build_layout(small, cluster, workload, gpus=gpus), cache=states)
    return cache[key]


def _states_lower_bound(workload, s: Strategy, memo: dict | None = None) -> float:
    """Model-state bytes no rank can go below: the parameters spread evenly over tp·pp in one flat
    tensor, through the memory model's own ZeRO accounting over the dp·cp ranks that share the weights
    (:class:`simulator.strategy.ParallelLayout`) (the most loaded real rank holds at least
    its even share, plus replicated norms and padding). 0 under offload (states leave the GPU)."""
    if s.offload is not Offload.NONE:
        return 0.0
    if memo is not None:  # all it reads of s, so candidates differing elsewhere share it
        key = (s.tp * s.pp, s.dp * s.cp, s.zero)
        if key not in memo:
            memo[key] = _states_lower_bound(workload, s)
        return memo[key]
    even = -(-workload.params // (s.tp * s.pp))
    states = model_state_bytes([("even share", (even,))], dp=s.dp * s.cp, zero=s.zero, dtype=workload.dtype,
                               partitioning=Partitioning.FLAT, framework=Framework.DEEPSPEED
                               if s.zero is not ZeroStage.ZERO0 else Framework.TORCH_DDP)
    return states.params_bytes + states.grads_bytes + states.optimizer_bytes


@dataclass
class _Memory:
    """What the memory phase shares across a search: the verdicts by memory inputs, the model states,
    and the bases that overflowed only GPU memory (with the bytes they need, for the offload rescue)."""

    reports: dict = field(default_factory=dict)
    states: dict = field(default_factory=dict)
    over_gpu: list = field(default_factory=list)
    bounds: dict = field(default_factory=dict)
    """:func:`_states_lower_bound` by what it reads (one workload per search)."""


def _feasible(strategies: list[Strategy], workload, cluster, reserve_gb: float, counts,
              mem: _Memory | None = None, gpus: int | None = None,
              tick: Callable[[int, int], None] | None = None):
    """(strategy, memory verdict) of those that fit, counting the others (a :class:`planner.search.Counts`)
    by what overflows; ``tick(done, total)`` is called every :data:`PROGRESS_EVERY` candidates."""
    mem = _Memory() if mem is None else mem
    limit = cluster.device.memory_bytes - reserve_gb * GB
    out = []
    for done, s in enumerate(strategies):
        if tick is not None and done % PROGRESS_EVERY == 0:
            tick(done, len(strategies))
        bound = _states_lower_bound(workload, s, mem.bounds)
        if bound > limit:  # cheap: skip the verdict
            counts.infeasible["gpu memory"] += 1
            mem.over_gpu.append((bound, s))
            continue
        try:
            verdict = _memory(mem.reports, mem.states, workload, cluster, s, gpus)
        except SpecError as err:
            counts.invalid[err.field] += 1
            continue
        over = [r.split(":")[0] for r in verdict.reasons if not r.startswith("GPU")]
        if verdict.total_bytes > limit:
            over.insert(0, "gpu memory")
        if over:
            counts.infeasible[{"host": "host memory", "NVMe": "nvme"}.get(over[0], over[0])] += 1
            if over == ["gpu memory"]:
                mem.over_gpu.append((verdict.total_bytes, s))
            continue
        out.append((s, verdict))
    return out
