"""How a :class:`simulator.validate.Validation` reads: the text table ``trainplan validate`` prints and the
measured-above-estimated bar figure of ``--plot`` (a matplotlib ``Figure``, no global backend)."""

from __future__ import annotations

import math
from pathlib import Path

from simulator.validate import Validation
from simulator.validate_staleness import staleness_lines


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e3:.3f} ms"
    return f"{value:,.0f} B" if value < 1e10 else f"{value / 2**30:.2f} GiB"


def _pct(error: float | None) -> str:
    return "-" if error is None or not math.isfinite(error) else f"{error * 100:+.2f}%"


def format_validation(v: Validation) -> str:
    """A text table: measured (p10-p90), analytical and DES estimates, and their signed errors."""
    head = f"{'':<20}{'measured':>15}{'p10-p90':>24}{'analytical':>15}{'error':>11}{'des':>14}{'error':>11}"
    lines = [head]
    for r in v.rows:
        spread = "-" if r.p10 is None else f"{_fmt(r.p10, r.unit)}-{_fmt(r.p90, r.unit)}"
        lines.append(f"{r.name:<20}{_fmt(r.measured, r.unit):>15}{spread:>24}{_fmt(r.analytical, r.unit):>15}"
                     f"{_pct(r.error_analytical):>11}{_fmt(r.des, r.unit):>14}{_pct(r.error_des):>11}")
    lines.append(f"step_time_error {_pct(v.step_time_error)} (analytical), memory_error {_pct(v.memory_error)} "
                 f"(model states), on {v.cluster_name}")
    lines += staleness_lines(v.staleness)
    lines += [f"note: {n}" for n in v.notes]
    if v.busy is not None:
        lines.append(f"note: {v.busy.note()}")
    return "\n".join(lines)


def validation_figure(v: Validation):
    """Two stacked bars, measured phases above the analytical estimate's breakdown, as a matplotlib ``Figure``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 2.8))
    ax = fig.add_subplot()
    measured = {r.name: r.measured for r in v.rows if r.unit == "s" and r.name != "step_time_s"}
    step = v.row("step_time_s").measured
    if sum(measured.values()) < step:
        measured["other (unmeasured)"] = step - sum(measured.values())
    estimated = {c.value: s for c, s in v.analytical.breakdown.items() if s > 0}
    names = list(dict.fromkeys([*measured, *estimated]))
    colors = {n: f"C{i % 10}" for i, n in enumerate(names)}
    for y, parts in ((1, measured), (0, estimated)):
        left = 0.0
        for name, seconds in parts.items():
            ax.barh(y, seconds * 1e3, left=left * 1e3, color=colors[name], edgecolor="white",
                    label=name if y == 1 or name not in measured else None)
            left += seconds
    ax.set_yticks([0, 1], ["estimated (analytical)", "measured (median)"])
    ax.set_xlabel("ms per step")
    ax.set_title(f"measured vs estimated on {v.cluster_name}: step-time error {_pct(v.step_time_error)}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    fig.tight_layout()
    return fig


def save_figure(v: Validation, path: str | Path) -> Path:
    out = Path(path)
    validation_figure(v).savefig(out, dpi=120)
    return out
