"""The validation suite's Markdown report (``trainplan validate --suite ... --out report.md``).

Sections: the run (date, machine, cluster and its calibration, measurement settings, load average and
the quiet/noisy verdict), step time (MAPE overall and per family, the scatter), every case, memory,
and the notes the validations raised. The figures come from :mod:`simulator.suite_report`.
"""

from __future__ import annotations

from simulator.suite_report import SPEED_DRIFT_MAX, Hygiene, SuiteReport, columns, pct, table_cells


def _loads(values) -> str:
    return "-" if not values else " / ".join(f"{v:.2f}" for v in values) + " (1 / 5 / 15 min)"


def _run_section(report: SuiteReport) -> list[str]:
    m = report.manifest
    lines = ["## The run", ""]
    if m is None:
        lines += ["Results files made elsewhere (no `suite.json` manifest): date, machine and load not recorded "
                  "by this command.", ""]
    else:
        host = m.host
        lines += [f"- started: {m.date}",
                  f"- machine: {host.get('node', '?')}, {host.get('cpu_model', '?')}, {host.get('cores', '?')} cores, "
                  f"{host.get('system', '?')}; torch {host.get('torch', '?')}, backend {host.get('backend', '?')}",
                  f"- measurement: `--scale tiny --precision fp32`, at least {m.steps} steps of which {m.warmup} warm-up "
                  "(more where the suite's time budget asks for them: each case's count is in its results file), "
                  "median with p10/p90 of the slowest rank per step; torch threads per rank = cores ÷ local ranks",
                  f"- load average at the start: {_loads(m.load_average_start)}; at the end: "
                  f"{_loads(m.load_average_end)}"]
        if m.speed_reference_s is not None:
            n = len(m.speed_reference_readings_s)
            taken = (f"the median of {n} readings before the runs (around the calibration when there is one), "
                     + ", ".join(f"{t * 1e3:.1f}" for t in m.speed_reference_readings_s) + " ms"
                     if m.speed_reference_readings_s else "one reading at the start of the runs")
            lines.append(f"- machine-speed reference: {m.speed_reference_s * 1e3:.1f} ms (the fixed single-thread "
                         f"probe, {taken}; each case's drift from it is in the table)")
        lines += [f"- {note}" for note in m.cluster_notes]
        lines.append("")
    lines += [f"Estimated on **{report.cluster}**.", "",
              ("**" + report.verdict() + ".**") if report.hygiene is Hygiene.NOISY else report.verdict() + ".", ""]
    return lines


def _family_table(report: SuiteReport) -> list[str]:
    lines = ["| family | cases | completed | step-time MAPE (analytical) | (DES) |", "|---|---|---|---|---|"]
    des = report.family_mape("des")
    for family, value in report.family_mape().items():
        cases = [r for r in report.rows if r.case.family is family]
        lines.append(f"| {family.value} | {len(cases)} | {sum(r.ok for r in cases)} | {pct(value, signed=False)} | "
                     f"{pct(des[family], signed=False)} |")
    lines.append(f"| **overall** | {len(report.rows)} | {len(report.done)} | "
                 f"**{pct(report.step_time_mape(), signed=False)}** | "
                 f"{pct(report.step_time_mape('des'), signed=False)} |")
    return lines


def markdown(report: SuiteReport, scatter: str | None = None) -> str:
    """The report; ``scatter`` is the image's path relative to the report (None: no image)."""
    lines = [f"# Validation suite `{report.suite}`: estimated vs measured", ""]
    lines += _run_section(report)
    lines += ["## Step time", "",
              "Error = estimate / measured − 1 (negative: the model is too fast); MAPE = mean |error| over the "
              "cases that completed.", ""]
    lines += _family_table(report) + ["", f"Mean signed error (analytical) over the completed cases: "
                                           f"{pct(report.step_time_bias())}.", ""]
    if scatter:
        lines += [f"![estimated vs measured step time]({scatter})", ""]
    heads = columns(report)
    lines += ["## Cases", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for row in table_cells(report):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    lines += ["", "`other cpu`: the share of the machine's CPU time other work took during the case "
              "(`noisy` above the threshold); `speed drift`: how far the machine's speed, a fixed single-thread "
              "reference read before and after the case, moved from its reading after the calibration (`noisy` "
              f"above {SPEED_DRIFT_MAX:.0%}); `load 1m`: the 1-minute load average before it started"
              + ("" if not report.retries else f"; `attempts` (`--retries {report.retries}`): a case noisy by either "
                 "is run again; `k/n: d1 d2 ..` is attempt k of n reported (the first quiet one, else the least "
                 "drifted), then each attempt's speed drift") + ".", ""]
    lines += ["## Memory", "", f"Model states (parameters, gradients, optimizer state of the most loaded rank; "
              f"should be exact): MAPE {pct(report.memory_mape('model_state_bytes'), signed=False)}. Peak: MAPE "
              f"{pct(report.memory_mape('peak_memory_bytes'), signed=False)}. Each case's signed errors are in the "
              "table (`states err`, `peak err`).", ""]
    notes = sorted({n for r in report.done for n in r.validation.notes})
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)
