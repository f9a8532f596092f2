"""Staleness of a parameter-server run, measured (``simulator.run_staleness.Staleness``) beside the
discrete-event engine's (``StepResult.extras["staleness"]``, ``simulator.engine.step_accounts.staleness_summary``):
the step lag, which both measure alike (steps the pushing worker trails the furthest other worker), over
all pushes and per worker, and the measured update staleness (the DES does not report it)."""

from __future__ import annotations

from simulator.results import StepResult
from simulator.run_results import Results
from simulator.run_staleness import histogram


def staleness_rows(results: Results, des: StepResult) -> dict | None:
    """Measured staleness beside the DES's (module docstring); None for a run without a parameter server."""
    if results.staleness is None:
        return None
    sim = des.extras.get("staleness")
    if sim is not None:
        sim = {k: sim[k] for k in ("histogram", "mean", "max")} | {
            "per_worker": {str(w): histogram(v) for w, v in sim["per_worker"].items()}}
    return {"measured": results.staleness.summary(), "des": sim}


def _hist(h: dict | None) -> str:
    if h is None:
        return "-"
    counts = " ".join(f"{k}:{n}" for k, n in h["histogram"].items())
    return f"mean {h['mean']:.2f} max {h['max']} [{counts}]"


def staleness_lines(st: dict | None) -> list[str]:
    """Step lag (measured, DES) over all pushes and per worker, then the measured update staleness."""
    if st is None:
        return []
    measured, des = st["measured"], st["des"]
    lines = ["staleness, steps behind the furthest other worker per push ([value:pushes]):",
             f"  all workers  measured {_hist(measured['step_lag'])}   des {_hist(des)}"]
    for w, h in measured["step_lag"]["per_worker"].items():
        lines.append(f"  worker {w:<6}measured {_hist(h)}   des {_hist(des and des['per_worker'].get(w))}")
    lines.append(f"  update staleness (server updates between pull and apply), measured {_hist(measured['updates'])}")
    return lines
