"""The validation suite's scatter: estimated (analytical) vs measured step time, one marker per family.

Drawn by ``trainplan validate --suite ... --out report.md`` beside the report (``REPORT.png``); the figures
come from :mod:`simulator.suite_report`.
"""

from __future__ import annotations

from simulator.suite_report import Hygiene, SuiteReport, pct
from simulator.validation_suite import Family

MARKERS = {Family.DDP: "o", Family.ZERO: "s", Family.OFFLOAD: "D", Family.PIPELINE: "^", Family.TENSOR: "v",
           Family.HYBRID: "P", Family.RECOMPUTE: "X", Family.PARAM_SERVER: "*"}
"""One scatter marker per family."""
BAND = 0.10
"""The ±10 % band drawn around y = x."""


def scatter_figure(report: SuiteReport):
    """Estimated (analytical) vs measured step time, log axes, y = x and a ±10 % band, one marker per family."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 6))
    ax = fig.add_subplot()
    values = []
    for family in Family:
        pts = [(r.validation.row("step_time_s").measured, r.validation.row("step_time_s").analytical)
               for r in report.done if r.case.family is family]
        if pts:
            xs, ys = zip(*pts)
            values += [*xs, *ys]
            err = report.step_time_mape(family=family)
            ax.scatter(xs, ys, marker=MARKERS[family], s=60, label=f"{family.value} (MAPE {pct(err, signed=False)})")
    if values:
        lo, hi = min(values) / 2, max(values) * 2
        line = [lo, hi]
        ax.fill_between(line, [v * (1 - BAND) for v in line], [v * (1 + BAND) for v in line], color="0.85",
                        label=f"±{BAND:.0%}")
        ax.plot(line, line, color="0.3", linewidth=1, label="y = x")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured step time, s (median)")
    ax.set_ylabel("estimated step time, s (analytical)")
    ax.set_title(f"{report.suite} suite on {report.cluster}: step-time MAPE "
                 f"{pct(report.step_time_mape(), signed=False)}"
                 + (" (noisy machine)" if report.hygiene is Hygiene.NOISY else ""), fontsize="medium")
    ax.legend(fontsize="small", loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig
