"""The planner's best against a layout the user brings (``trainplan plan --against PLAN.json``), e.g.
a published expert configuration: where that layout ranks, whether it fits, and per category of the
closed form's breakdown why the best plan is faster (or, after the DES re-ranking, slower).

The layout is found in the ranked table when the search reached it; otherwise it is estimated on its
own with the same closed form and memory model, and the sentence says why the search did not rank
it (it does not fit, or it lies outside the searched space or the pins).
"""

from __future__ import annotations

import pandas as pd

from simulator.analytical_vec import OnInvalid, estimate_many
from simulator.errors import SpecError
from simulator.memory import memory_report
from simulator.strategy import Strategy, build_layout
from simulator.units import GB

from planner.explain import _sentence, describe


def reference_row(workload, cluster, strategy: Strategy, gpus: int | None = None) -> pd.Series:
    """``strategy``'s closed-form estimate and memory on ``gpus`` workers (None: the whole cluster) as
    one row shaped like the planner's table."""
    frame = estimate_many(cluster, workload, [strategy], on_invalid=OnInvalid.MARK, gpus=gpus)
    if frame["error"][0]:
        raise SpecError("against", f"the layout cannot be estimated here: {frame['error'][0]}")
    row = frame.iloc[0].copy()
    row["strategy"] = strategy
    layout = build_layout(strategy, cluster, workload, gpus=gpus)
    row["memory_bytes"] = memory_report(workload, cluster, layout).worst.total_bytes
    row["headroom_bytes"] = cluster.device.memory_bytes - row["memory_bytes"]
    return row


def against(frame: pd.DataFrame, workload, cluster, strategy: Strategy, reserve_gb: float = 0.0,
            label: str = "layout you gave", gpus: int | None = None) -> list[str]:
    """Sentences comparing row 0 of the ranked ``frame`` with ``strategy``."""
    matches = [i for i, s in enumerate(frame["strategy"]) if s == strategy]
    if matches:
        i = matches[0]
        row = frame.iloc[i]
        where = f"ranks #{i + 1} of {len(frame)}"
    else:
        row = reference_row(workload, cluster, strategy, None if gpus == cluster.world_size else gpus)
        limit = cluster.device.memory_bytes - reserve_gb * GB
        if row["memory_bytes"] > limit:
            where = (f"does not fit: {row['memory_bytes'] / GB:.1f} GB per GPU over the {limit / GB:.1f} GB "
                     "available, so the search dropped it")
        else:
            ahead = int((frame["step_time_s"] < row["step_time_s"]).sum()) if len(frame) else 0
            where = (f"was outside the searched space (pins, profile, or a variant not ranked); it would rank "
                     f"#{ahead + 1}")
    head = f"Against the {label} ({describe(strategy)}): it {where}."
    if frame.empty or matches[:1] == [0]:
        return [head + (" It is the best plan." if matches else "")]
    return [head, _sentence(label, frame.iloc[0], row)]


def check_comparable(plan, workload, cluster, gpus: int, global_batch: int) -> None:
    """A plan file compared with a search must describe the same job (one line naming what differs)."""
    theirs = (plan.model.name, getattr(plan.model, "seq_len", None), plan.cluster.device.name, plan.gpus,
              plan.strategy.global_batch)
    ours = (workload.name, getattr(workload, "seq_len", None), cluster.device.name, gpus, global_batch)
    names = ("model", "sequence length", "device", "GPUs", "global batch")
    for name, a, b in zip(names, theirs, ours):
        if a != b:
            raise SpecError("--against", f"the plan's {name} is {a}, the search's {b}; compare plans of the same job")
