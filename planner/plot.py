"""The buy-or-rent picture of a sweep (issue 8 §2): time and GPU-hours (or cost) against GPUs.

matplotlib is imported on call only; the figure is a ``matplotlib.figure.Figure`` (no pyplot
state, no backend switch): save it, or display it in a notebook.
"""

from __future__ import annotations

import pandas as pd

from planner.result import SECONDS_PER_HOUR


def _panels(frame: pd.DataFrame) -> tuple[tuple[str, str, float], tuple[str, str, float]]:
    """((column, label, divisor) of the left panel, the same of the right)."""
    if "time_to_train_s" in frame:
        right = ("cost", "cost to train", 1.0) if "cost" in frame else ("gpu_hours", "GPU-hours to train", 1.0)
        return ("time_to_train_s", "time to train (hours)", SECONDS_PER_HOUR), right
    return ("step_time_s", "step time (s)", 1.0), ("tokens_per_s_per_gpu", "tokens/s per GPU", 1.0)


def sweep_figure(frame: pd.DataFrame, title: str | None = None):
    """Two panels against the GPU count (log2 axis), one line per cluster: time to train and
    GPU-hours (or cost, with a price) when the sweep had ``tokens``, else step time and tokens/s
    per GPU. Points where nothing fits are left out (NaN)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, (column, label, divisor) in zip(axes, _panels(frame)):
        for cluster, rows in frame.groupby("cluster", sort=False):
            ax.plot(rows["gpus"], rows[column] / divisor, marker="o", label=str(cluster))
        ax.set_xscale("log", base=2)
        ticks = sorted(set(frame["gpus"]))
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("GPUs")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    if title:
        fig.suptitle(title)
    return fig
