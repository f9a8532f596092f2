"""A simulated step's timeline, exported for people: Chrome-trace JSON (Perfetto) and a Gantt PNG.

The timeline is the pandas DataFrame of :attr:`simulator.results.StepResult.timeline`, one row per
timed task with the columns of :data:`TIMELINE_COLUMNS` (``category`` a :class:`Category` or its
value; ``microbatch`` and ``stage`` may be missing for tasks that belong to neither).

- :func:`to_chrome_trace` writes the Trace Event Format (Google, "Trace Event Format" document,
  the JSON that ``chrome://tracing`` and https://ui.perfetto.dev read): complete events
  (``"ph": "X"``) with microsecond ``ts``/``dur``, one process per rank named
  ``rank 3 (stage 1)``, one thread (track) per stream, sorted compute first.
- :func:`gantt_figure` draws one row per (rank, stream) with matplotlib's ``broken_barh``, a colour
  per category and the micro-batch number inside bars wide enough to hold it, so a 1F1B pattern
  (warm-up forwards, alternating forward/backward, cool-down backwards) reads at a glance;
  :func:`gantt` saves it as a PNG.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.checks import enum_member
from simulator.errors import SpecError
from simulator.results import Category

TIMELINE_COLUMNS = ("rank", "stream", "name", "category", "start_s", "end_s", "microbatch", "stage")
"""Columns every timeline DataFrame has (the contract of :class:`StepResult`)."""

COMPUTE_STREAM = "compute"
"""Stream listed first in both outputs (the others follow in order of first use)."""

CATEGORY_COLOURS: dict[Category, str] = {
    Category.FORWARD: "#4C72B0", Category.BACKWARD: "#DD8452", Category.RECOMPUTE: "#8172B3",
    Category.OPTIMIZER: "#937860", Category.TP: "#55A868",
    Category.EP: "#8DA0CB", Category.PP: "#64B5CD", Category.DP: "#C44E52",
    Category.ZERO: "#DA8BC3", Category.PS: "#8C8C8C", Category.OFFLOAD: "#CCB974", Category.DATA: "#1B9E77",
    Category.BUBBLE: "#E5E5E5", Category.STRAGGLER: "#333333",
}
"""One colour per category (seaborn's "deep" palette order; bubble light grey, straggler near black)."""

_US_PER_S = 1e6
_DPI = 120


def category_of(value: Any) -> Category:
    """A timeline ``category`` cell (a :class:`Category`, its value or its name) as a :class:`Category`."""
    return enum_member(Category, value, "timeline.category", "category")


def check_timeline(timeline) -> None:
    """Raise :class:`SpecError` unless ``timeline`` is a DataFrame with :data:`TIMELINE_COLUMNS`."""
    if timeline is None or not hasattr(timeline, "columns"):
        raise SpecError("timeline", "no timeline: only the discrete-event engine records one (--engine des)")
    missing = [c for c in TIMELINE_COLUMNS if c not in timeline.columns]
    if missing:
        raise SpecError("timeline", f"missing columns {', '.join(missing)}; expected {', '.join(TIMELINE_COLUMNS)}")


def _int_or_none(value: Any) -> int | None:
    if value is None:
        return None
    try:
        if math.isnan(value):
            return None
    except TypeError:
        return None
    number = int(value)
    return None if number < 0 else number


def stream_order(timeline) -> list[str]:
    """Streams in display order: ``compute`` first, then the others in order of first appearance."""
    seen = list(dict.fromkeys(str(s) for s in timeline["stream"]))
    return sorted(seen, key=lambda s: (s != COMPUTE_STREAM, seen.index(s)))


def rank_label(rank: int, stages: list[int]) -> str:
    """``rank 3 (stage 1)``, or ``rank 3 (stages 1, 5)`` for interleaved chunks, or ``rank 3``."""
    if not stages:
        return f"rank {rank}"
    word = "stage" if len(stages) == 1 else "stages"
    return f"rank {rank} ({word} {', '.join(map(str, stages))})"


def _optional_ints(column) -> list[int | None]:
    """A column of micro-batch or stage numbers as ints, None where missing (NaN, None, negative)."""
    values = pd.to_numeric(column, errors="coerce").to_numpy(float)
    return [None if not (v >= 0) else int(v) for v in values]


def _stages_by_rank(timeline) -> dict[int, list[int]]:
    out: dict[int, set[int]] = {}
    for rank, stage in zip(timeline["rank"], timeline["stage"]):
        out.setdefault(int(rank), set())
        number = _int_or_none(stage)
        if number is not None:
            out[int(rank)].add(number)
    return {r: sorted(s) for r, s in out.items()}


def _rank_streams(timeline) -> set[tuple[int, str]]:
    return {(int(r), str(s)) for r, s in zip(timeline["rank"], timeline["stream"])}


def chrome_trace_events(timeline) -> list[dict]:
    """Trace Event Format events: ``M`` metadata (process/thread names and sort order), then ``X`` tasks."""
    check_timeline(timeline)
    streams = stream_order(timeline)
    tid = {s: i for i, s in enumerate(streams)}
    stages = _stages_by_rank(timeline)
    pairs = _rank_streams(timeline)
    events: list[dict] = []
    for rank in sorted(stages):
        events.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": rank_label(rank, stages[rank])}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}})
        for stream in (s for s in streams if (rank, s) in pairs):
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid[stream], "args": {"name": stream}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid[stream],
                           "args": {"sort_index": tid[stream]}})
    cat_of = {value: category_of(value).value for value in set(timeline["category"])}
    start = timeline["start_s"].to_numpy(float)
    # nanosecond resolution is plenty for a step and keeps the file a third smaller
    ts = np.round(start * _US_PER_S, 3).tolist()
    dur = np.round(np.maximum(timeline["end_s"].to_numpy(float) - start, 0.0) * _US_PER_S, 3).tolist()
    tids = [tid[s] for s in timeline["stream"].astype(str)]
    mbs, stage_ids = _optional_ints(timeline["microbatch"]), _optional_ints(timeline["stage"])
    for rank, name, cat, t, d, track, mb, stage in zip(timeline["rank"].astype(int).tolist(),
                                                       timeline["name"].astype(str).tolist(), timeline["category"],
                                                       ts, dur, tids, mbs, stage_ids):
        args = {}
        if mb is not None:
            args["microbatch"] = mb
        if stage is not None:
            args["stage"] = stage
        events.append({"name": name, "cat": cat_of[cat], "ph": "X", "pid": rank, "tid": track, "ts": t,
                       "dur": d, "args": args})
    return events


def to_chrome_trace(timeline, path: str | Path) -> Path:
    """Write ``timeline`` as Chrome-trace JSON to ``path`` (open it at https://ui.perfetto.dev); return the path."""
    events = chrome_trace_events(timeline)
    out = Path(path)
    document = {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"producer": "trainplan", "time_unit": "ts and dur in microseconds"}}
    out.write_text(json.dumps(document), encoding="utf-8")  # dumps uses the C encoder; dump(f) does not
    return out


def pick_ranks(ranks: list[int], max_ranks: int) -> list[int]:
    """At most ``max_ranks`` of ``ranks`` (sorted), evenly spread and always the first and last."""
    ranks = sorted(set(ranks))
    if max_ranks < 1:
        raise SpecError("max_ranks", f"must be at least 1, got {max_ranks}")
    if len(ranks) <= max_ranks:
        return ranks
    index = np.unique(np.round(np.linspace(0, len(ranks) - 1, max_ranks)).astype(int))
    return [ranks[i] for i in index]


def gantt(timeline, path: str | Path, *, max_ranks: int = 16, title: str | None = None) -> Path:
    """Write :func:`gantt_figure` of ``timeline`` to ``path`` (PNG); return the path."""
    out = Path(path)
    gantt_figure(timeline, max_ranks=max_ranks, title=title).savefig(out, dpi=_DPI)
    return out


def gantt_figure(timeline, *, max_ranks: int = 16, title: str | None = None):
    """A Gantt chart of ``timeline`` as a matplotlib ``Figure``: one row per (rank, stream), colours per category.

    With more than ``max_ranks`` ranks, an even spread of them is drawn (the title says how many).
    Compute bars wide enough carry their micro-batch number. The figure is a plain
    ``matplotlib.figure.Figure`` (no pyplot, no global backend switch): save it, or display it in a notebook.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    check_timeline(timeline)
    all_ranks = sorted(int(r) for r in set(timeline["rank"]))
    ranks = pick_ranks(all_ranks, max_ranks)
    shown = timeline[timeline["rank"].isin(ranks)]
    streams = stream_order(shown) if len(shown) else []
    pairs = _rank_streams(shown)
    rows = [(r, s) for r in ranks for s in streams if (r, s) in pairs]
    row_of = {key: i for i, key in enumerate(rows)}
    t0 = float(timeline["start_s"].min()) if len(timeline) else 0.0
    span = max(float(timeline["end_s"].max()) - t0, 1e-12) if len(timeline) else 1.0
    scale, unit = (1e3, "ms") if span < 1.0 else (1.0, "s")

    width_in = 14.0
    fig = Figure(figsize=(width_in, max(2.5, 0.32 * len(rows) + 1.6)))
    ax = fig.subplots()
    axes_px = width_in * 0.8 * _DPI
    min_width = span * scale / axes_px
    cat_of = {value: category_of(value) for value in set(shown["category"])}
    cats = [cat_of[c] for c in shown["category"]]
    frame = shown.assign(_cat=cats, _row=[row_of[(int(r), str(s))] for r, s in zip(shown["rank"], shown["stream"])])
    for (row, cat), group in frame.groupby(["_row", "_cat"], sort=False):
        starts = (group["start_s"].to_numpy(float) - t0) * scale
        widths = (group["end_s"].to_numpy(float) - group["start_s"].to_numpy(float)) * scale
        half = 0.4 if rows[row][1] == COMPUTE_STREAM else 0.25  # compute rows stand out
        widths = np.maximum(widths, min_width)  # a 1 µs call stays visible as a hairline
        ax.broken_barh(list(zip(starts, widths)), (row - half, 2 * half), facecolors=CATEGORY_COLOURS[cat],
                       edgecolor="none", linewidth=0)
    for i in range(1, len(rows)):
        if rows[i][0] != rows[i - 1][0]:
            ax.axhline(i - 0.5, color="#BBBBBB", linewidth=0.5)
    _draw_actions(ax, frame, t0, scale, span * scale, axes_px)
    ax.set_yticks(range(len(rows)), [f"r{r} {s}" for r, s in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, span * scale)
    ax.set_xlabel(f"time ({unit})")
    used = [c for c in Category if c in set(cats)]
    ax.legend(handles=[Patch(facecolor=CATEGORY_COLOURS[c], label=c.value) for c in used], loc="upper center",
              bbox_to_anchor=(0.5, -0.08 if len(rows) > 8 else -0.18), ncol=min(len(used), 8) or 1, fontsize=8,
              frameon=False)
    head = title or "simulated step"
    if len(ranks) < len(all_ranks):
        head += f" ({len(ranks)} of {len(all_ranks)} simulated ranks shown)"
    ax.set_title(head, fontsize=10)
    fig.tight_layout()
    return fig


_MAX_LABELS = 3000
"""Most micro-batch labels drawn: beyond this the text is unreadable and slows matplotlib down."""

_ACTION_CATEGORIES = (Category.FORWARD, Category.BACKWARD, Category.RECOMPUTE)


def action_spans(frame) -> pd.DataFrame:
    """Compute pieces merged into actions: consecutive pieces of one row with the same task name
    (an engine may time a forward layer by layer, ``0F3`` six times) become one span."""
    compute = frame[frame["_cat"].isin(_ACTION_CATEGORIES)].sort_values(["_row", "start_s"], kind="stable")
    if compute.empty:
        return compute.assign(_group=[])
    names, rows = compute["name"].astype(str).to_numpy(), compute["_row"].to_numpy()
    new = np.ones(len(compute), dtype=bool)
    new[1:] = (names[1:] != names[:-1]) | (rows[1:] != rows[:-1])
    grouped = compute.assign(_group=np.cumsum(new)).groupby("_group", sort=False)
    return grouped.agg(_row=("_row", "first"), start_s=("start_s", "min"), end_s=("end_s", "max"),
                       microbatch=("microbatch", "first"), _cat=("_cat", "first"))


def _draw_actions(ax, frame, t0: float, scale: float, span: float, axes_px: float) -> None:
    """Outline each forward/backward action and write its micro-batch number when there is room."""
    spans = action_spans(frame)
    if spans.empty:
        return
    starts = (spans["start_s"].to_numpy(float) - t0) * scale
    widths = (spans["end_s"].to_numpy(float) - spans["start_s"].to_numpy(float)) * scale
    for row, idx in spans.groupby("_row").indices.items():
        ax.broken_barh(list(zip(starts[idx], widths[idx])), (row - 0.4, 0.8), facecolors="none",
                       edgecolors="#333333", linewidth=0.4)
    labelled = 0
    for start, width, mb, row, cat in zip(starts, widths, _optional_ints(spans["microbatch"]), spans["_row"],
                                          spans["_cat"]):
        if mb is None or width / span * axes_px < 7 * len(str(mb)) + 4:
            continue
        ax.text(start + width / 2, row, str(mb), ha="center", va="center", fontsize=7, color="white",
                fontweight="bold", bbox={"boxstyle": "square,pad=0.1", "fc": CATEGORY_COLOURS[cat], "ec": "none"})
        labelled += 1
        if labelled >= _MAX_LABELS:
            return
