"""A readable text report of one simulated step (:class:`simulator.results.StepResult`).

``format_step(result)`` gives, in order: the headline (engine, step time, tokens/s, MFU, HFU), the
breakdown of the slowest rank by category with its share of the step, a per-rank table of the
distinct simulated ranks, a one-line memory summary from the memory model, and the extras an
engine adds (gradient staleness of an asynchronous parameter server, goodput and time-to-train
under failures). MFU and HFU follow PaLM (Chowdhery et al. 2022, appendix B): model FLOPs, or
executed FLOPs with recompute, over step time × GPUs × peak.
"""

from __future__ import annotations

import math
from typing import Any

from simulator.results import Category, StepResult
from simulator.units import GB

FAILURE_KEYS = ("time_to_train_sampled_s", "train_steps", "job_mtbf_s", "young_interval_s", "daly_interval_s")
"""Failure-model extras listed under the time to train, one per line (the DES's names)."""

MAX_RANK_ROWS = 16
"""Most rows of the per-rank table; the rest are summarised in one line."""


def _seconds(x: float) -> str:
    """Seconds with a unit that keeps 3-4 significant digits: ``12.35 s``, ``845.2 ms``, ``31.7 µs``."""
    x = float(x)
    if x == 0:
        return "0 s"
    if abs(x) >= 1:
        return f"{x:.3f} s"
    if abs(x) >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} µs"


def _count(x: float) -> str:
    """A large rate with thousands separators below 1e9, scientific notation above."""
    return f"{x:,.0f}" if abs(x) < 1e9 else f"{x:.3e}"


def headline(r: StepResult) -> list[str]:
    return [
        f"engine {r.engine.value}: step {_seconds(r.step_time_s)}, {_count(r.tokens_per_s)} tokens/s, "
        f"MFU {100 * r.mfu:.1f} %, HFU {100 * r.hfu:.1f} %",
        f"{r.world_size} GPUs, {r.tokens_per_step:,} tokens/step, model {r.model_flops_per_step:.3e} FLOP/step, "
        f"executed {r.hardware_flops_per_step:.3e} FLOP/step, peak {r.peak_flops_per_gpu / 1e12:.0f} TFLOP/s per GPU",
    ]


def time_unit(step_time_s: float) -> tuple[str, float]:
    """Unit of the tables: milliseconds for a step under a second, else seconds; and its factor."""
    return ("ms", 1e3) if step_time_s < 1 else ("s", 1.0)


def breakdown_lines(r: StepResult) -> list[str]:
    """One line per non-zero category (in :class:`Category` order), then the total and what it misses."""
    unit, k = time_unit(r.step_time_s)
    lines = [f"breakdown (slowest rank){'':16}{unit:>7}  % of step"]
    total = 0.0
    for cat in Category:
        seconds = float(r.breakdown.get(cat, 0.0))
        if seconds == 0:
            continue
        total += seconds
        kind = " (exposed)" if cat.is_comm else ""
        lines.append(f"  {cat.value + kind:<36}{seconds * k:>11.4f}  {_percent(seconds, r.step_time_s)}")
    lines.append(f"  {'total':<36}{total * k:>11.4f}  {_percent(total, r.step_time_s)}")
    gap = r.step_time_s - total
    if abs(gap) > 1e-6 * max(r.step_time_s, 1e-12):
        lines.append(f"  note: categories sum to {total:.6g} s, the step is {r.step_time_s:.6g} s")
    return lines


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:7.1f} %" if whole > 0 else "      - %"


def _column_category(column: Any) -> Category | None:
    if isinstance(column, Category):
        return column
    for cat in Category:
        if str(column).lower() in (cat.value, cat.name.lower()):
            return cat
    return None


def per_rank_lines(r: StepResult) -> list[str]:
    """The distinct simulated ranks: rank, stage, then seconds per non-zero category and their sum."""
    frame = r.per_rank
    if frame is None or len(frame) == 0:
        return []
    cats = [(col, cat) for col in frame.columns if (cat := _column_category(col)) is not None
            and float(frame[col].abs().sum()) > 0]
    cats.sort(key=lambda pair: list(Category).index(pair[1]))
    width = max([9] + [len(cat.value) + 1 for _, cat in cats])
    head = f"  {'rank':>6} {'stage':>5}" + "".join(f"{cat.value:>{width}}" for _, cat in cats) + f"{'total':>{width}}"
    unit, k = time_unit(r.step_time_s)
    lines = [f"per rank ({unit}; {len(frame)} distinct simulated rank{'s' if len(frame) != 1 else ''})", head]
    for _, row in frame.head(MAX_RANK_ROWS).iterrows():
        values = [float(row[col]) * k for col, _ in cats]
        stage = row["stage"] if "stage" in frame.columns else ""
        lines.append(f"  {_cell(row.get('rank', '')):>6} {_cell(stage):>5}"
                     + "".join(f"{v:>{width}.4f}" for v in values) + f"{sum(values):>{width}.4f}")
    if len(frame) > MAX_RANK_ROWS:
        lines.append(f"  ... {len(frame) - MAX_RANK_ROWS} more rank(s) not shown (--json has them all)")
    return lines


def _cell(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def memory_lines(r: StepResult) -> list[str]:
    """One line from the memory report: the most loaded rank's device total against the device, its parts
    and its allocated / reserved peaks (as torch.cuda.max_memory_allocated / max_memory_reserved), and the verdict."""
    m = r.memory
    if m is None:
        return ["memory: not modelled for this workload"]
    try:
        w = m.worst
        line = (f"memory: most loaded rank (stage {w.stage}) {w.total_bytes / GB:.1f} GB of "
                f"{m.device_memory_bytes / GB:.1f} GB ({m.device_name}): params {w.params_bytes / GB:.1f}, "
                f"grads {w.grads_bytes / GB:.1f}, optimizer {w.optimizer_bytes / GB:.1f}, "
                f"activations {w.activations_bytes / GB:.1f}, buffers {w.buffers_bytes / GB:.1f} GB; peak allocated "
                f"{w.allocated_bytes / GB:.1f}, reserved {w.reserved_bytes / GB:.1f} GB")
        verdict = "memory: fits" if m.fits else "memory: DOES NOT FIT - " + "; ".join(m.reasons)
        return [line, verdict]
    except AttributeError:  # a report of another shape: its own text
        return [f"memory: {m}"]


def _staleness_lines(value: Any) -> list[str]:
    """Gradient staleness in steps: per worker when given per worker, else over all updates.

    Accepts a list of samples, a {worker: samples} mapping, or a summary {"per_worker": {...},
    "histogram": {steps: count}, "mean": ..., "max": ...}.
    """
    if isinstance(value, dict) and "per_worker" in value:
        lines = _staleness_lines(value["per_worker"])
        hist = value.get("histogram")
        if isinstance(hist, dict) and hist:
            lines.append("  histogram (staleness: updates): " + ", ".join(f"{k}: {v}" for k, v in hist.items()))
        if "mean" in value and "max" in value:
            lines.append(f"  all workers: mean {float(value['mean']):.2f}, max {value['max']}")
        return lines
    if isinstance(value, dict):
        lines = ["gradient staleness (steps) per worker:   mean    max"]
        for worker, samples in list(value.items())[:MAX_RANK_ROWS]:
            seq = _numbers(samples)
            if seq:
                lines.append(f"  worker {worker!s:<30}{sum(seq) / len(seq):>7.2f}{max(seq):>7g}")
            else:
                lines.append(f"  worker {worker!s:<30}{samples}")
        if len(value) > MAX_RANK_ROWS:
            lines.append(f"  ... {len(value) - MAX_RANK_ROWS} more worker(s)")
        return lines
    seq = _numbers(value)
    if seq:
        ordered = sorted(seq)
        return [f"gradient staleness (steps): mean {sum(seq) / len(seq):.2f}, "
                f"median {ordered[len(ordered) // 2]:g}, max {ordered[-1]:g} over {len(seq)} updates"]
    return [f"gradient staleness: {value}"]


def _numbers(value: Any) -> list[float]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        return [float(v) for v in value]
    return []


def extras_lines(r: StepResult) -> list[str]:
    """Staleness, goodput and time-to-train first (known meanings), then any other scalar extras."""
    extras = dict(r.extras)
    lines: list[str] = []
    if "goodput" in extras:
        lines.append(f"goodput: {100 * float(extras.pop('goodput')):.1f} % of time spent on useful steps")
    if "time_to_train_s" in extras:
        seconds = float(extras.pop("time_to_train_s"))
        lines.append(f"expected time to train: {seconds:,.0f} s ({seconds / 86400:.2f} days)")
    if "staleness" in extras:
        lines += _staleness_lines(extras.pop("staleness"))
    for key in FAILURE_KEYS:
        if key in extras:
            lines.append(f"  {key}: {_scalar(extras.pop(key))}")
    other = [f"{key} {_scalar(value)}" for key, value in extras.items()
             if isinstance(value, (int, str, bool)) or (isinstance(value, float) and math.isfinite(value))]
    if other:
        lines.append("engine notes: " + ", ".join(other))
    return lines


def _scalar(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def format_step(result: StepResult) -> str:
    """The whole report as text: headline, breakdown, per-rank table, memory, extras."""
    parts = [headline(result), breakdown_lines(result), per_rank_lines(result), memory_lines(result),
             extras_lines(result)]
    return "\n".join(line for part in parts for line in part)
