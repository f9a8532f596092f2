"""The power cap on the H200 (second lease, 2026-11-25): what each kernel class draws, the GEMMs' rate against
their share of the time, and a power model checked against both and against the real runs. Tables for
``benchmarks/gpu_compare2.py``; see docs/hardware_measured.md, "The power cap".

The model: a mix of kernel classes, each c drawing ``P_c`` watts busy all the time at the maximum clock and
taking a share ``s_c`` of the time there, draws ``P = P_idle + Σ s_c (P_c − P_idle)``. Over the limit, the
driver lowers the clock until the card draws the limit, and compute-bound kernels take ``k`` times longer,

    k = ((P − P_idle) / (P_limit − P_idle))^γ,

with γ from each class measured alone, capped and uncapped (:func:`stretch_exponent`).
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from gpu_compare import pct, table  # noqa: E402

from simulator.cluster.io import load_cluster  # noqa: E402
from simulator.validate import signed_error  # noqa: E402

MAX_CLOCK_MHZ = 1980.0
"""The H200's maximum SM clock (nvidia-smi clocks.max.sm); a point at it was not power-capped."""
STEP_W = 300.0
"""A power log line of an execute counts as within the steps above this draw."""


def duty_md(extra: dict) -> str:
    rows = [[r["copies"], f"{r['gemm_share']:.2f}", f"{r['gemm_tflops']:.0f}", f"{r['sm_clock_MHz']:.0f}",
             f"{r['power_W']:.0f}"] for r in extra["duty"]]
    return table(["512 MB copies per 8192³ GEMM", "GEMM share of the time", "GEMM TFLOP/s", "SM clock MHz",
                  "power W"], rows)


def full_busy_W(row: dict, idle_W: float) -> float:
    """The power the kernel would draw busy all the time at this clock: idle + (measured − idle) / busy share."""
    return idle_W + (row["power_W"] - idle_W) / row["busy_share"]


def classpower_md(extra: dict) -> str:
    rows_in = [*extra.get("power", []), *extra.get("power2", [])]
    idle = next(r["power_W"] for r in rows_in if r["kernel"] == "spin only")
    rows = []
    for r in (r for r in rows_in if "busy_share" in r and r["kernel"] != "spin only"):
        rows.append([r["kernel"], r["idle_per_busy"], f"{r['busy_share']:.2f}", f"{r['kernel_ms']:.3f}",
                     f"{r['sm_clock_MHz']:.0f}", f"{r['power_W']:.0f}",
                     f"{full_busy_W(r, idle):.0f}" if r["sm_clock_MHz"] >= MAX_CLOCK_MHZ else "(capped)"])
    return table(["kernel", "idle per busy", "busy share", "kernel ms", "SM clock MHz", "power W",
                  f"busy-all-the-time W at {MAX_CLOCK_MHZ:.0f} MHz (idle {idle:.0f} W)"], rows)


_DRAW = load_cluster("hgx-h200").device
"""The H200 preset: its ``power_draw`` holds the class draws read off the ``classpower`` table (one home)."""
CLASS_W = {"layer GEMMs": _DRAW.power_draw.gemm_W, "attention": _DRAW.power_draw.attention_W,
           "aligned logits GEMM": _DRAW.power_draw.gemm_W, "misaligned logits GEMM": _DRAW.power_draw.misaligned_gemm_W,
           "optimizer": 568.0, "memory-bound": _DRAW.power_draw.memory_W, "copy": 595.0}
"""Watts each kernel class draws busy all the time at the 1,980 MHz maximum clock: the preset's classes, plus
two of the ``classpower`` table's own rows this check needs (foreach AdamW 567-568; the 512 MB copy 592-608 at
busy shares ≥ 0.3, where the sensor's noise is amplified least)."""
IDLE_W, LIMIT_W = _DRAW.power_draw.idle_W, _DRAW.power_limit_W
"""The spin kernel alone (the GPU awake, doing nothing); the card's power limit (nvidia-smi power.limit)."""


def stretch_exponent(extra: dict) -> float:
    """γ of ``k = (P_dyn / P_dyn,cap)^γ`` from each class measured alone, capped (busy share 1, below the max clock)
    and uncapped (the same kernel at idle per busy 1): ``γ = ln(t_capped / t_uncapped) / ln((P_full − idle) /
    (P_capped − idle))``; the median over the classes that reached the cap."""
    rows = [*extra.get("power", []), *extra.get("power2", [])]
    out = []
    for name in {r["kernel"] for r in rows}:
        capped = [r for r in rows if r["kernel"] == name and r.get("idle_per_busy") == 0 and r["sm_clock_MHz"] < MAX_CLOCK_MHZ]
        free = [r for r in rows if r["kernel"] == name and r.get("idle_per_busy") == 1 and r["sm_clock_MHz"] >= MAX_CLOCK_MHZ]
        if capped and free:
            c, f = capped[0], free[0]
            out.append(math.log(c["kernel_ms"] / f["kernel_ms"]) /
                       math.log((full_busy_W(f, IDLE_W) - IDLE_W) / (c["power_W"] - IDLE_W)))
    return statistics.median(out)


def power_stretch(shares: list[tuple[float, float]], gamma: float) -> tuple[float, float]:
    """(stretch k ≥ 1 of the compute-bound kernels' time, the draw at the max clock) of a mix of kernel classes,
    each (share of the time at the max clock, watts busy all the time): ``P = idle + Σ s_c (P_c − idle)``;
    ``k = ((P − idle) / (limit − idle))^γ`` when P is over the limit."""
    dyn = sum(s * (w - IDLE_W) for s, w in shares)
    return max(1.0, (dyn / (LIMIT_W - IDLE_W)) ** gamma), IDLE_W + dyn


def powermodel_md(extra: dict, raw: Path, cluster_arg: str) -> str:
    """The power model's prediction for each duty point and each real run, beside what was measured."""
    import gpu_compare as gc
    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate
    gamma = stretch_exponent(extra)
    gemm_ms = next(r["kernel_ms"] for r in extra["power"] if r["kernel"] == "gemm 8192^3" and r["idle_per_busy"] == 1)
    copy_ms = next(r["kernel_ms"] for r in extra["power"] if r["kernel"] == "copy 512 MB" and r["idle_per_busy"] == 1)
    rows = []
    for r in extra["duty"]:
        tg, tc = gemm_ms, copy_ms * r["copies"]
        k, watts = power_stretch([(tg / (tg + tc), CLASS_W["layer GEMMs"]), (tc / (tg + tc), CLASS_W["copy"])], gamma)
        rows.append([f"duty: 8192³ GEMM + {r['copies']} copies", f"{watts:.0f}", f"{r['power_W']:.0f}", f"{k:.3f}",
                     f"GEMM {2 * 8192**3 / (tg * 1e-3) / k / 1e12:.0f} TFLOP/s", f"{r['gemm_tflops']:.0f} TFLOP/s"])
    for path in sorted(raw.glob("call*/results-*.json")):
        results = load_results(path)
        cluster = run_cluster(results, cluster_arg)
        free = replace(cluster, device=replace(cluster.device, power_draw=None))
        classes = gc.model_classes(results, free)
        without, with_term = (validate(results, c).row("step_time_s") for c in (free, cluster))
        spec = gc.run_workload(results)
        logits = "aligned logits GEMM" if spec.vocab % 8 == 0 else "misaligned logits GEMM"
        shares = [(t / without.analytical, CLASS_W[logits if c == "logits GEMM" else c]) for c, t in classes.items()]
        k, watts = power_stretch(shares, gamma)
        log = path.parent / f"power-{path.stem.removeprefix('results-')}.csv"
        drew = "-"
        if log.is_file():
            draws = [float(c[2].split()[0]) for c in (ln.split(",") for ln in log.read_text().splitlines()[1:] if "MHz" in ln)]
            drew = f"{statistics.median(w for w in draws if w > STEP_W):.0f}"
        rows.append([f"{path.parent.name}/{path.name}", f"{watts:.0f}", drew, f"{k:.3f}",
                     f"step {pct(signed_error(without.analytical, without.measured))} → "
                     f"{pct(signed_error(with_term.analytical, with_term.measured))} (simulator)",
                     f"{without.measured * 1e3:.1f} ms"])
    note = (f"γ = {gamma:.3f} (median over the classes measured alone, capped and uncapped); class watts "
            + ", ".join(f"{c} {w:.0f}" for c, w in CLASS_W.items()) + f"; idle {IDLE_W:.0f} W, limit {LIMIT_W:.0f} W.")
    return "\n\n".join([table(["mix", "model W at max clock", "measured W", "model stretch k",
                                "model (duty: rate; runs: step error without → with the power term)", "measured"], rows), note])
