"""Why the best plan wins: plain sentences with the numbers, against the runner-up and the best
plan of each family (pure data parallel / ZeRO, tensor-parallel heavy, pipeline heavy, offload,
parameter server).

For a mixture-of-experts model, also against the best plan at each other expert-parallel degree.
The differences are per category of the analytical breakdown on the slowest rank (forward,
backward, recompute, exposed tp/ep/pp/dp/zero/ps/offload communication, bubble, ...), largest first;
memory is compared by the most loaded rank's total. Families with no feasible candidate say so.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from simulator.results import Category
from simulator.strategy import AllReduceSync, Offload, ParamServerSync, PlacementOrder
from simulator.strategy.sync import DDP_BUCKET_CAP_BYTES, AllReduceAlgorithm
from simulator.units import GB, MiB

from planner.placement import spans

FAMILIES: tuple[tuple[str, Callable], ...] = (
    ("pure data-parallel / ZeRO", lambda s: s.tp == 1 and s.pp == 1 and s.cp == 1
     and not isinstance(s.dp_sync, ParamServerSync)),
    ("tensor-parallel heavy", lambda s: s.tp > 1 and s.pp == 1),
    ("pipeline heavy", lambda s: s.pp > 1),
    ("offload", lambda s: s.offload is not Offload.NONE),
    ("parameter server", lambda s: isinstance(s.dp_sync, ParamServerSync)),
)
"""(name, membership test) of the plan families the explanation compares."""

FEATURES: tuple[tuple[str, str, Callable], ...] = (
    ("context-parallel plan", "plan without context parallelism", lambda s: s.cp > 1),
    ("FP8 plan", "plan without FP8", lambda s: s.precision.value == "fp8"),
)
"""(label with, label without, test) of the choices the explanation weighs when the search tried both sides: with the
best plan using one, against the best plan without it; else against the best plan with it."""


def describe(s) -> str:
    """One readable line for a strategy."""
    parts = [f"dp {s.dp} tp {s.tp} pp {s.pp}" + (f" ep {s.ep}" if s.ep > 1 else "")
             + (f" cp {s.cp} {s.cp_kind.value}" if s.cp > 1 else ""), f"ZeRO-{int(s.zero)}", f"mbs {s.micro_batch}"]
    if s.resolved_fp8_recipe is not None:
        parts.append(f"fp8 {s.resolved_fp8_recipe.value}" + (" all-gather" if s.fp8_all_gather else ""))
    if s.pp > 1:
        parts.append(s.schedule.value + (f" v{s.virtual_stages}" if s.virtual_stages > 1 else ""))
    if s.placement is not PlacementOrder.TP_PP_DP:
        parts.append(f"placement {s.placement.value}")
    if s.sequence_parallel and s.tp > 1:
        parts.append("sp")
    parts.append(f"recompute {s.recompute.value}")
    if s.offload is not Offload.NONE:
        parts.append(f"offload {s.offload.value}")
    if s.offload_activations:
        parts.append("offload activations")
    sync = s.dp_sync
    if isinstance(sync, ParamServerSync):
        where = "colocated" if sync.colocated else f"on {sync.server_nodes} node(s)"
        parts.append(f"PS {sync.mode.value} x{sync.shards} {where}")
    elif isinstance(sync, AllReduceSync) and s.dp > 1:
        if sync.algorithm is not AllReduceAlgorithm.AUTO:
            parts.append(f"all-reduce {sync.algorithm.value}")
        if sync.bucket_params is None and sync.bucket_bytes != DDP_BUCKET_CAP_BYTES:
            parts.append("one bucket" if sync.bucket_bytes is None else f"bucket {sync.bucket_bytes / MiB:g} MiB")
    return ", ".join(parts)


def _differences(best: pd.Series, other: pd.Series, step_s: float) -> str:
    cats = [c.value for c in Category if c.value in best.index]
    diffs = sorted(((float(other[c]) - float(best[c]), c) for c in cats), reverse=True)
    shown = [f"{d:+.3g} s {c}" for d, c in diffs if abs(d) >= 0.01 * step_s][:3]
    return ", ".join(shown) if shown else "no category differs by more than 1 % of the step"


def _analytical_s(row: pd.Series) -> float:
    """The closed form's step time (refined rows keep it apart from their DES time), so that the
    comparison and its breakdown come from one engine."""
    value = row.get("step_time_s_analytical")
    return float(row["step_time_s"] if value is None or pd.isna(value) else value)


def _sentence(label: str, best: pd.Series, other: pd.Series) -> str:
    a, b = _analytical_s(best), _analytical_s(other)
    mem = (float(other["memory_bytes"]) - float(best["memory_bytes"])) / GB
    side = "slower" if b >= a else "faster"  # the DES can reorder what the closed form ranked
    return (f"The {label} ({describe(other['strategy'])}) is {abs(b - a):.3g} s per step {side} in the closed form "
            f"({b:.3g} s vs {a:.3g} s): {_differences(best, other, a)}; memory {mem:+.1f} GB per GPU.")


def explain(frame: pd.DataFrame, notes=(), gpus_per_node: int | None = None) -> list[str]:
    """Sentences on why row 0 wins (the frame as :func:`planner.plan` ranks it); ``notes`` say what the
    search left out and why (:attr:`planner.PlanResult.notes`); ``gpus_per_node``: say which groups
    each placement order puts across nodes."""
    if frame.empty:
        return ["No candidate fits; see the counts by reason."]
    best = frame.iloc[0]
    lines = [f"Best: {describe(best['strategy'])}: {float(best['step_time_s']):.3g} s per step, MFU "
             f"{float(best['mfu']):.1%}, {float(best['memory_bytes']) / GB:.1f} GB per GPU."]
    if len(frame) > 1:
        lines.append(_sentence("runner-up", best, frame.iloc[1]))
    for name, member in FAMILIES:
        rows = frame[[member(s) for s in frame["strategy"]]]
        if rows.empty:
            why = [n for n in notes if n.startswith("No offload")] if name == "offload" else []
            lines += why or [f"No {name} plan fits or was searched."]
        elif rows.index[0] != 0:
            lines.append(_sentence(f"best {name} plan", best, rows.iloc[0]))
    for ep, row in _ep_alternatives(frame):
        if row.name != 1:
            lines.append(_sentence(f"best plan with ep {ep}", best, row))
    lines += _feature_lines(frame, best)
    lines += _placement_lines(frame, best, gpus_per_node)
    sync = _sync_alternatives(frame)
    if sync is not None and sync.name != 1:  # row 1 is the runner-up, already said
        lines.append(_sentence("best other gradient sync of the same layout", best, sync))
    return lines + [n for n in notes if not n.startswith("No offload")]


def _crossing_text(s, gpus_per_node: int | None) -> str:
    if gpus_per_node is None:
        return ""
    cross = [(name, n) for name, n in spans(s.placement, gpus_per_node, s.dp, s.tp, s.pp, s.cp, s.ep).items() if n > 1]
    return (" (" + ", ".join(f"{name} over {n} nodes" for name, n in cross) + ")") if cross else \
        " (every group within a node)"


def _placement_lines(frame: pd.DataFrame, best: pd.Series, gpus_per_node: int | None) -> list[str]:
    """The fastest ranked row with the best plan's layout (:func:`_layout_of`, ZeRO stage and offload;
    the gradient sync may differ: the second phase varies the orders of the best bases) and another
    placement order: what another rank order (tp across nodes, dp inside the node...) costs. Row 1
    (the runner-up) is already said."""
    s = best["strategy"]
    same = (_layout_of(s), s.zero, s.offload, s.offload_activations)
    for i, other in enumerate(frame["strategy"]):
        if not i or other.placement is s.placement or (_layout_of(other), other.zero, other.offload,
                                                       other.offload_activations) != same:
            continue
        if i == 1:
            return []
        row = frame.iloc[i]
        a, b = _analytical_s(best), _analytical_s(row)
        side = "slower" if b >= a else "faster"
        return [f"Placement {s.placement.value}{_crossing_text(s, gpus_per_node)}: the best other order of the "
                f"same layout, {other.placement.value}{_crossing_text(other, gpus_per_node)}, is {abs(b - a):.3g} s "
                f"per step {side} in the closed form ({b:.3g} s vs {a:.3g} s): {_differences(best, row, a)}."]
    return []


def _feature_lines(frame: pd.DataFrame, best: pd.Series) -> list[str]:
    """Why the best plan uses (or not) each of :data:`FEATURES`, where the search ranked both sides."""
    lines = []
    for with_label, without_label, has in FEATURES:
        member = [has(s) for s in frame["strategy"]]
        if all(member) or not any(member):
            continue
        uses = has(best["strategy"])
        rows = frame[[m != uses for m in member]]
        label = f"best {without_label if uses else with_label}"
        lines.append(_sentence(label, best, rows.iloc[0]))
    return lines


def _layout_of(s) -> tuple:
    """What places the work: degrees, micro-batch, schedule, recomputation (not ZeRO, sync or offload)."""
    return (s.dp, s.tp, s.pp, s.ep, s.micro_batch, s.schedule, s.virtual_stages, s.recompute, s.sequence_parallel,
            s.attention, s.cp, s.cp_kind, s.precision)


def _ep_alternatives(frame: pd.DataFrame) -> list[tuple[int, pd.Series]]:
    """(ep, the fastest ranked row with that expert-parallel degree) for each ep other than the best
    plan's, smallest first: what sharding the experts more or less would cost (a MoE model only)."""
    eps = [s.ep for s in frame["strategy"]]
    best = eps[0]
    return [(ep, frame.iloc[eps.index(ep)]) for ep in sorted(set(eps)) if ep != best]


def _sync_alternatives(frame: pd.DataFrame):
    """The fastest ranked row with the best plan's layout and another gradient sync (algorithm, bucket
    or parameter server), or None."""
    best = frame["strategy"].iloc[0]
    same = [i for i, s in enumerate(frame["strategy"]) if i and s.dp_sync != best.dp_sync
            and s.offload is best.offload and s.offload_activations == best.offload_activations
            and s.placement is best.placement and _layout_of(s) == _layout_of(best)]
    return frame.iloc[same[0]] if same else None
