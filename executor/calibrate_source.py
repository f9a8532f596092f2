"""What a calibration says about itself: the calibrated cluster's ``source`` text and the notes beside it.

:func:`source_text` writes the date, host, design (process counts, series, sizes, calls per point), what was fitted
and every measured wait with its spread, as ``trainplan calibrate`` records it in the calibrated file;
:func:`machine_note` says how quiet the machine was (:mod:`executor.calibrate_run`'s module docstring);
:func:`calls_text` and :func:`spread_text` are the parts the CLI and the suite print too.
"""

from __future__ import annotations

from typing import Sequence


def series_text(series, probes=()) -> str:
    """``all_reduce native, all_gather native (probes: ...)``: the series measured, then the probes if any."""
    what = ", ".join(f"{o.value} {a}" for o, a in series)
    if probes:
        what += " (probes: " + ", ".join(f"{o.value} {a}" for o, a in probes) + ")"
    return what


def source_text(base_name: str, fit, *, backend: str, nprocs: Sequence[int], what: str, sizes: list[int],
                repeats: int, warmup: int, moments: int, pairs: dict, dtensor: dict, dtensor_sp: dict, fsdp2: dict,
                batched: dict) -> str:
    """The calibrated cluster's ``source``: how ``fit`` (a :class:`~executor.calibrate_records.LinkFit` with its
    waits, replay step and machine note) was measured from the base ``base_name``, and the probes' waits beside it
    (``pairs``: ``comm.group_wait_us[2]``; ``dtensor``, ``dtensor_sp``, ``fsdp2``; ``batched``:
    ``comm.async_broadcast_us``), each per process count."""
    import datetime
    import platform

    from executor.calibrate_async import PROBE_BATCH
    from executor.calibrate_dtensor import dtensor_source_text
    from executor.calibrate_fsdp2 import fsdp2_source_text
    from executor.calibrate_modes import op_waits_text, waits_text
    from executor.calibrate_moments import moments_source_text
    from simulator.units import format_size

    waits, replay_step_us, machine = fit.blocking_wait_us, fit.replay_step_us, fit.machine
    return (f"trainplan calibrate on {datetime.date.today().isoformat()}, host {platform.node()} "
            f"({platform.processor() or platform.machine()}, {platform.system()}), backend {backend}, "
            f"nproc {', '.join(map(str, nprocs))}, {what}, sizes {format_size(min(sizes))}.."
            f"{format_size(max(sizes))} ({len(sizes)} sizes), "
            f"repeats {calls_text(nprocs, repeats, backend, moments)}, warmup {warmup}; "
            f"fitted {', '.join(fit.fitted)} to the 10th percentiles from the base {base_name} (other values as "
            f"there), each process count estimated with its share of the cores; blocking_wait_us (mean excess of "
            f"the calls up to 256 KiB over that fit, executor.calibrate_modes): {waits_text(waits, fit.wait_spread)}; "
            f"op_wait_us (the same per op): {op_waits_text(fit.op_wait_us, fit.op_wait_spread)}; "
            f"{moments_source_text(fit.wait_moments, fit.op_wait_moments)}"
            f"median absolute error against the plain means {fit.median_abs_error_pct:.1f} %; "
            f"p10..p90 over bootstrap resamples: {spread_text(fit.spread)}"
            + ("" if replay_step_us is None else f"; replay_step_us {replay_step_us:.1f} fitted to the ring "
               "replays' means with the others held (executor.calibrate_replay)")
            + ("" if not pairs else "; group_wait_us (pairs calling at once, mean excess over that fit, "
               "executor.calibrate_groups): 2-rank groups " + ", ".join(f"{us:.1f} us at {p} processes"
                                                                          for p, us in sorted(pairs.items())))
            + dtensor_source_text(dtensor, dtensor_sp)
            + fsdp2_source_text(fsdp2)
            + ("" if not batched else "; async_broadcast_us (mean per call of a batch of "
               f"{PROBE_BATCH} asynchronous broadcasts, executor.calibrate_async): "
               + ", ".join(f"{p} processes {us:.1f} us" for p, us in sorted(batched.items()))) + f"; {machine}")


def machine_note(load_before: float, load_after: float, foreign: float | None) -> str:
    """How quiet the machine was while measuring, in words (:mod:`executor.calibrate_run`'s module docstring)."""
    from simulator.suite_report import QUIET_FOREIGN_CPU_FRACTION

    share = "not sampled" if foreign is None else f"{foreign:.0%}"
    noisy = foreign is not None and foreign > QUIET_FOREIGN_CPU_FRACTION
    return (("NOISY MACHINE: " if noisy else "") + f"load average {load_before:.2f} before, {load_after:.2f} after; "
            f"other work took {share} of the CPU while measuring")


def calls_text(nprocs: Sequence[int], repeats: int, backend: str, moments: int = 1) -> str:
    """``20`` or, on gloo, the calls per point of each process count: ``80 / 40 / 20 at 2 / 3 / 4 processes``; with
    ``moments`` > 1 a count taken at several moments reads ``3 × 27`` (:mod:`executor.calibrate_moments`)."""
    from executor.calibrate_host import host_cores
    from executor.calibrate_modes import calls_per_point
    from executor.calibrate_moments import MOMENT_PROCESSES, calls_per_moment

    if backend != "gloo":
        return str(repeats)
    calls = [f"{moments} × {calls_per_moment(c, moments)}" if moments > 1 and p in MOMENT_PROCESSES else str(c)
             for p, c in ((p, calls_per_point(p, repeats, host_cores())) for p in nprocs)]
    return f"{' / '.join(calls)} at {' / '.join(map(str, nprocs))} processes"


def spread_text(spread: dict[str, tuple[float, float]] | None) -> str:
    """``name lo..hi`` per parameter, as the source field and the CLI print it."""
    if not spread:
        return "not computed"
    return ", ".join(f"{name} {lo:.4g}..{hi:.4g}" for name, (lo, hi) in spread.items())
