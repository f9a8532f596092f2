"""Sweeps (issue 8 §2): "how many GPUs?" and "which hardware?" as one table.

:func:`sweep` runs :func:`planner.plan` once per (cluster, GPU count), each cluster sized to the
GPU count in whole nodes, and keeps the best plan of each point as one row:

- ``tokens_per_s_per_gpu`` = tokens/s ÷ GPUs;
- ``scaling_efficiency`` = tokens/s per GPU ÷ that of the smallest GPU count of the same cluster
  where a plan fits (1.0 there; below 1 where communication and pipeline bubbles grow with the
  GPUs for the same global batch);
- with ``tokens``: ``time_to_train_s`` = tokens ÷ tokens/s, ``gpu_hours`` = time · GPUs ÷ 3600,
  and with a price ``cost`` = GPU-hours · price (the planner's own objective columns).

A point where nothing fits stays in the table with its reason and NaN numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from planner.explain import describe
from planner.result import plan
from simulator.checks import positive_int
from simulator.errors import SpecError

NUMBERS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu")
"""Columns copied from the best row of each search."""
TRAIN = ("time_to_train_s", "gpu_hours", "cost")
"""Columns present with ``tokens`` (``cost`` only with a price)."""


def _check_sizes(clusters: Sequence, gpu_counts: Sequence[int]) -> list[int]:
    """The GPU counts, sorted and unique, each a whole number of nodes of every cluster or part of one node
    (before any search)."""
    if not clusters:
        raise SpecError("clusters", "give at least one cluster")
    if not gpu_counts:
        raise SpecError("gpus", "give at least one GPU count")
    counts = sorted({positive_int("gpus", g) for g in gpu_counts})
    for cluster in clusters:
        gpn = cluster.node.gpus_per_node
        bad = [g for g in counts if g % gpn and g > gpn]
        if bad:
            raise SpecError("gpus", f"{bad[0]} is not a whole number of {gpn}-GPU {cluster.name} nodes; use "
                                    f"multiples of {gpn}, or at most {gpn} for part of one node")
    return counts


def _reason(counts) -> str:
    d = counts.to_dict()
    if d["enumerated"] == 0:
        return "no candidate (the pins leave none)"
    why = ", ".join(f"{k} {v}" for k, v in d["infeasible_by_reason"].items())
    return f"nothing fits: {d['infeasible']} do not fit ({why}), {d['invalid']} invalid"


def _row(cluster, gpus: int, result, train_columns: tuple[str, ...]) -> dict:
    row = {"cluster": cluster.name, "gpus": gpus, "nodes": cluster.nodes}
    if result.best is None:
        return row | {"strategy": None} | dict.fromkeys(NUMBERS + train_columns, float("nan")) | {
            "reason": _reason(result.counts), "plan": None}
    best = result.frame.iloc[0]
    row |= {"strategy": describe(best["strategy"])}
    row |= {k: float(best[k]) for k in NUMBERS + train_columns}
    return row | {"reason": None, "plan": result.best}


def _scaling(frame: pd.DataFrame) -> pd.Series:
    """tokens/s per GPU ÷ that of the smallest GPU count of the same cluster where a plan fits
    (rows are in ascending GPU counts per cluster; ``first`` skips NaN)."""
    per_gpu = frame["tokens_per_s_per_gpu"]
    return per_gpu / per_gpu.groupby(frame["cluster"], sort=False).transform("first")


def sweep(workload, clusters: Sequence, gpu_counts: Sequence[int], global_batch: int, *,
          tokens: float | None = None, price_per_gpu_hour: float | None = None, **plan_kwargs) -> pd.DataFrame:
    """The best plan of ``workload`` on each cluster at each GPU count, one row per point.

    Columns: ``cluster``, ``gpus``, ``nodes``, ``strategy`` (one line, :func:`planner.explain.describe`),
    ``step_time_s``, ``tokens_per_s``, ``tokens_per_s_per_gpu``, ``mfu``, ``scaling_efficiency``,
    with ``tokens`` ``time_to_train_s`` and ``gpu_hours`` (and ``cost`` with a price), ``reason``
    (why nothing fits, else None) and ``plan`` (the best :class:`simulator.plan_file.Plan`, or None).
    Rows are in the order of ``clusters``, GPU counts ascending. ``plan_kwargs`` go to
    :func:`planner.plan` (pins, objective, refine, ...). A GPU count above one node that is not a
    whole number of a cluster's nodes is a SpecError naming ``gpus``.
    """
    counts = _check_sizes(clusters, gpu_counts)
    train_columns = (TRAIN[:2] + (("cost",) if price_per_gpu_hour is not None else ())) if tokens else ()
    rows = []
    for cluster in clusters:
        for gpus in counts:
            sized = cluster.with_nodes(-(-gpus // cluster.node.gpus_per_node))  # part of one node below a node
            result = plan(workload, sized, gpus=gpus, global_batch=global_batch, tokens=tokens,
                          price_per_gpu_hour=price_per_gpu_hour, **plan_kwargs)
            rows.append(_row(sized, gpus, result, train_columns))
    frame = pd.DataFrame(rows)
    position = frame.columns.get_loc("mfu") + 1
    frame.insert(position, "scaling_efficiency", _scaling(frame))
    return frame


def fastest(frame: pd.DataFrame) -> pd.Series | None:
    """The row with the most tokens/s (the shortest step: every point trains the same global batch), or None."""
    fits = frame.dropna(subset=["tokens_per_s"])
    return None if fits.empty else fits.loc[fits["tokens_per_s"].idxmax()]


def rows_as_dicts(frame: pd.DataFrame) -> list[dict]:
    """The rows as plain data (no plan objects; NaN as None) for JSON."""
    out = []
    for record in frame.drop(columns=["plan"]).to_dict(orient="records"):
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()})
    return out
