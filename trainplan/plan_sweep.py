"""``trainplan plan`` over several GPU counts or clusters (issue 8 §2): the lists' parsing and the table.

``--gpus 16,32,64`` (a list) or ``--gpus 16..256`` (the powers of two from 16 to 256);
``--cluster dgx-a100,dgx-h100`` (a comma-separated list of presets or files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.checks import positive_int
from simulator.errors import SpecError

if TYPE_CHECKING:  # imported by the table's caller, not with the parser: ``trainplan plan --help`` skips pandas
    import pandas as pd


def _int(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SpecError("--gpus", f"{text.strip()!r} is not a whole number; give G, G1,G2,... or G1..G2") from None
    return positive_int("--gpus", value)


def _power_of_two(text: str) -> int:
    value = _int(text)
    if value & (value - 1):
        raise SpecError("--gpus", f"a range G1..G2 runs over powers of two; {value} is not one (give a list instead)")
    return value


def gpu_counts(text: str) -> tuple[int, ...]:
    """The GPU counts of ``--gpus``: ``64``, ``16,32,64`` or ``16..256`` (16, 32, ..., 256)."""
    if ".." in text:
        low, _, high = text.partition("..")
        start, stop = _power_of_two(low), _power_of_two(high)
        if stop < start:
            raise SpecError("--gpus", f"the range {text} is empty; write the smaller count first")
        return tuple(1 << k for k in range(start.bit_length() - 1, stop.bit_length()))
    values = [v for v in text.split(",") if v.strip()]
    if not values:
        raise SpecError("--gpus", "give G, G1,G2,... or G1..G2")
    return tuple(dict.fromkeys(_int(v) for v in values))


def cluster_names(text: str | None) -> tuple[str | None, ...]:
    """The clusters of ``--cluster`` (``None``: the default cluster, once)."""
    if text is None:
        return (None,)
    names = tuple(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    if not names:
        raise SpecError("--cluster", "give a cluster preset or file, or a comma-separated list")
    return names


def _number(value: float, fmt: str) -> str:
    from pandas import isna  # loaded already: a frame exists

    return "-" if isna(value) else format(value, fmt)


def table(frame: pd.DataFrame) -> str:
    """The sweep as text: one line per (cluster, GPU count), the reason where nothing fits."""
    from planner.result import SECONDS_PER_HOUR

    train = "time_to_train_s" in frame
    cost = "cost" in frame
    head = f"{'cluster':<12} {'GPUs':>5} {'step s':>9} {'tok/s/GPU':>10} {'MFU':>6} {'scaling':>7}"
    if train:
        head += f" {'train h':>9} {'GPU-h':>10}" + (f" {'cost':>10}" if cost else "")
    lines = [head + "  strategy"]
    for _, r in frame.iterrows():
        line = (f"{str(r['cluster'])[:12]:<12} {r['gpus']:>5} {_number(r['step_time_s'], '.4g'):>9} "
                f"{_number(r['tokens_per_s_per_gpu'], ',.0f'):>10} {_number(r['mfu'], '.1%'):>6} "
                f"{_number(r['scaling_efficiency'], '.2f'):>7}")
        if train:
            line += (f" {_number(r['time_to_train_s'] / SECONDS_PER_HOUR, ',.4g'):>9} {_number(r['gpu_hours'], ',.4g'):>10}"
                     + (f" {_number(r['cost'], ',.4g'):>10}" if cost else ""))
        lines.append(line + "  " + (r["strategy"] if r["reason"] is None else r["reason"]))
    return "\n".join(lines)
