"""``trainplan calibrate``'s network output: the fit and its probes as tables (stdout) or as a dict (``--json``)."""

from __future__ import annotations


def _rows_dict(rows) -> list[dict]:
    return [{"ranks": r.ranks, "op": r.op, "algorithm": r.algorithm, "bytes": r.nbytes, "measured_s": r.measured_s,
             "measured_median_s": r.median_s, "measured_p10_s": r.p10_s, "measured_p90_s": r.p90_s,
             "estimate_s": r.estimate_s, "error_pct": r.error_pct, "times_s": list(r.times_s)} for r in rows]


def _median_abs(rows) -> float:
    import statistics

    return statistics.median(abs(r.error_pct) for r in rows)


def as_dict(fit, path: str, fresh=None, async_broadcast_us=(), group_wait_us=(), dtensor_wait_us=(),
            dtensor_sp_wait_us=(), fsdp2_wait_us=()) -> dict:
    """``--json``: the fitted parameters, their spread, the rows and the probes' rows; with ``fresh`` (the
    ``(rows, probe_rows, machine)`` of :func:`executor.calibrate_run.check`) the fresh set under ``check``;
    ``async_broadcast_us``, ``group_wait_us``, ``dtensor_wait_us``, ``dtensor_sp_wait_us``, ``fsdp2_wait_us``: the
    written file's ``comm`` fields of those names (measured apart from the fit)."""
    d = {"out": path, "nproc": sorted({r.ranks for r in fit.rows}), "call_latency_us": fit.call_latency_us, "latency_us": fit.latency_us,
         "bw_GBps": fit.bw_GBps, "hbm_bw_GBps": fit.hbm_bw_GBps, "fitted": list(fit.fitted),
         "replay_step_us": fit.replay_step_us,
         "spread_p10_p90": {k: list(v) for k, v in (fit.spread or {}).items()},
         "median_abs_error_pct": fit.median_abs_error_pct, "relinearised": fit.relinearised,
         "machine": fit.machine, "rows": _rows_dict(fit.rows), "probes": _rows_dict(fit.probes),
         "blocking_wait_us": {str(p): w for p, w in sorted((fit.blocking_wait_us or {}).items())},
         "blocking_wait_spread_us": {str(p): list(v) for p, v in sorted((fit.wait_spread or {}).items())},
         "op_wait_us": {op.value: {str(p): w for p, w in sorted(t.items())} for op, t in (fit.op_wait_us or {}).items()},
         "op_wait_spread_us": {op.value: {str(p): list(v) for p, v in sorted(t.items())}
                               for op, t in (fit.op_wait_spread or {}).items()},
         "blocking_wait_moments_us": {str(p): list(m.values) for p, m in sorted((fit.wait_moments or {}).items())},
         "op_wait_moments_us": {op.value: {str(p): list(m.values) for p, m in sorted(t.items())}
                                for op, t in (fit.op_wait_moments or {}).items()},
         "async_broadcast_us": {str(p): us for p, us in async_broadcast_us},
         "group_wait_us": {str(g): {str(p): us for p, us in table} for g, table in group_wait_us},
         "dtensor_wait_us": {str(p): us for p, us in dtensor_wait_us},
         "dtensor_sp_wait_us": {str(p): us for p, us in dtensor_sp_wait_us},
         "fsdp2_wait_us": {str(p): us for p, us in fsdp2_wait_us}}
    if fresh is not None:
        rows, probes, machine = fresh
        d["check"] = {"median_abs_error_pct": _median_abs(rows), "machine": machine, "rows": _rows_dict(rows),
                      "probes": _rows_dict(probes)}
    return d


def _print_rows(rows) -> None:
    from simulator.units import format_size

    print(f"{'procs':>5} {'op':>10} {'size':>8} {'algorithm':>9} {'measured ms':>12} {'median ms':>10} "
          f"{'p10..p90 ms':>17} {'estimate ms':>12} {'error %':>8}")
    for r in rows:
        spread = f"{r.p10_s * 1e3:.3f}..{r.p90_s * 1e3:.3f}"
        print(f"{r.ranks:>5} {r.op:>10} {format_size(r.nbytes):>8} {r.algorithm:>9} {r.measured_s * 1e3:12.3f} "
              f"{r.median_s * 1e3:10.3f} {spread:>17} {r.estimate_s * 1e3:12.3f} {r.error_pct:8.1f}")
    errors = [abs(r.error_pct) for r in rows]
    print(f"\nmedian absolute error {_median_abs(rows):.1f} % (range {min(errors):.1f}..{max(errors):.1f} %) "
          f"over {len(rows)} points (measured: plain mean of the calls)")


def _print_probes(rows) -> None:
    """The probes' rows, series by series, each with its median absolute error (not part of the fit's)."""
    for op, algorithm in dict.fromkeys((r.op, r.algorithm) for r in rows):
        print(f"\nprobe {op} {algorithm} (measured beside the fit, not in it"
              + ("; sets replay_step_us):" if algorithm != "native" else "):"))
        _print_rows([r for r in rows if (r.op, r.algorithm) == (op, algorithm)])


def print_table(fit, fresh=None, async_broadcast_us=(), group_wait_us=(), dtensor_wait_us=(),
                dtensor_sp_wait_us=(), fsdp2_wait_us=()) -> None:
    """The fitted parameters (with their bootstrap p10..p90) and the written file's per-call broadcast cost of an
    asynchronous batch, the rows, the probes and the machine's quiet note; then the fresh set's, when given."""
    kept = "" if "inv_hbm_bw" in fit.fitted else " (kept)"
    spread = fit.spread or {}

    def band(name: str, fmt: str) -> str:
        return f"   p10..p90 {spread[name][0]:{fmt}}..{spread[name][1]:{fmt}}" if name in spread else ""

    print(f"call latency  {fit.call_latency_us:10.2f} us{band('call_latency_us', '.2f')}\n"
          f"hop latency   {fit.latency_us:10.2f} us{band('latency_us', '.2f')}\n"
          f"bandwidth     {fit.bw_GBps:10.3f} GB/s{band('bw_GBps', '.3f')}\n"
          f"reduction bw  {fit.hbm_bw_GBps:10.3f} GB/s{kept}{band('hbm_bw_GBps', '.3f')}")
    if fit.blocking_wait_us:
        from executor.calibrate_modes import waits_text

        from executor.calibrate_moments import moments_text

        print(f"wait per call {waits_text(fit.blocking_wait_us, fit.wait_spread)} (mean excess over the fit)")
        for op, table in sorted((fit.op_wait_us or {}).items(), key=lambda kv: kv[0].value):
            print(f"  {op.value:>11} {waits_text(table, (fit.op_wait_spread or {}).get(op))} (its own calls)")
        if fit.wait_moments:
            print(f"  at several moments (median written): {moments_text(fit.wait_moments)}")
            for op, table in sorted((fit.op_wait_moments or {}).items(), key=lambda kv: kv[0].value):
                print(f"  {op.value:>11} {moments_text(table)}")
    for size, table in group_wait_us:
        text = ", ".join(f"{us:.0f} us at {p}" for p, us in table)
        print(f"  {size}-rank groups {text} (groups calling at once, measured apart)")
    if async_broadcast_us:
        text = ", ".join(f"{us:.0f} us at {p}" for p, us in async_broadcast_us)
        print(f"async bcast   {text} (per broadcast of a batch, measured apart)")
    for label, table in (("DTensor call", dtensor_wait_us), ("  with SP", dtensor_sp_wait_us)):
        if table:
            text = ", ".join(f"{us:.0f} us at {p}" for p, us in table)
            print(f"{label:<13} {text} (wait per tp call in the tp model, measured apart)")
    if fsdp2_wait_us:
        text = ", ".join(f"{us:.0f} us at {p}" for p, us in fsdp2_wait_us)
        print(f"FSDP2 call    {text} (wait per call in the FSDP2 models, measured apart)")
    if fit.replay_step_us is not None:
        print(f"replay step   {fit.replay_step_us:10.2f} us (ring replays, the others held)")
    print()
    _print_rows(fit.rows)
    _print_probes(fit.probes)
    print(f"machine: {fit.machine}")
    if fresh is not None:
        rows, probes, machine = fresh
        print("\nfresh measurement against the written file:")
        _print_rows(rows)
        _print_probes(probes)
        print(f"machine: {machine}")
