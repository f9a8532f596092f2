"""The second H200 lease (2026-11-25) next to the model: sustained clocks, GEMM operand layouts, MoE grouped
GEMMs, causal attention at 32k-128k tokens, token counts that are no multiple of 8, the GEMM table timed
after idle, the clock and power of real steps, and the real runs. Reads the raw files that
``bash benchmarks/gpu_session.sh`` wrote (``docs/measured/h200-2026-11-25/call*/``); no GPU needed.

    python benchmarks/gpu_compare2.py                                        # print the tables
    python benchmarks/gpu_compare2.py --write-md docs/hardware_measured.md   # refill its gpu-compare2 sections
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import gpu_compare  # noqa: E402
from gpu_compare import PAPER_CLUSTER, attention_points, pct, runs_md, table  # noqa: E402
from gpu_power import STEP_W, classpower_md, duty_md, powermodel_md  # noqa: E402

from simulator.cluster.io import load_cluster  # noqa: E402
from simulator.compute import rates_for  # noqa: E402
from simulator.errors import SpecError  # noqa: E402
from simulator.validate import signed_error  # noqa: E402
from simulator.workload.kinds import DtypePolicy  # noqa: E402
from simulator.workload.ops import gemm  # noqa: E402

RAW = Path(__file__).resolve().parent.parent / "docs" / "measured" / "h200-2026-11-25"
SECTIONS = ("clocks", "layout", "grouped", "longattn", "tokens", "cooled", "power", "duty", "classpower", "powermodel", "runs2")
FIRST = RAW.parent / "h200-2026-11-24" / "call1" / "gpu_measure-gemm.json"
"""The first lease's GEMM table, timed back to back (the card at its power cap for most of it)."""
LOADED_W = 600.0
"""A log line counts as 'under load' above this power draw (the idle card draws ~80 W, the cap is 700 W)."""
IMPLS = ("grouped_mm", "bmm", "mm_loop")


def marker(name: str, end: bool = False) -> str:
    return f"<!-- gpu-compare2:{name}:{'end' if end else 'start'} -->"


def load_extra(raw: Path) -> dict:
    """Every call's gpu_extra*.json merged (each section is measured in one call only)."""
    paths = [raw / "call1" / "gpu_extra.json", raw / "call2" / "gpu_extra-extra2.json"]
    for path in paths:
        if not path.is_file():
            raise SpecError("--raw", f"{path} is missing; give the folder holding call1/ and call2/ of the lease")
    paths += sorted(set(raw.glob("call*/gpu_extra*.json")) - set(paths))
    return {k: v for path in paths for k, v in json.loads(path.read_text()).items() if k != "env"}


def smi_rows(csv_text: str) -> list[tuple[float, float]]:
    """(SM clock MHz, power W) of each nvidia-smi log line."""
    out = []
    for line in csv_text.strip().splitlines()[1:]:
        cells = [c.strip() for c in line.split(",")]
        out.append((float(cells[1].split()[0]), float(cells[3].split()[0])))
    return out


def clocks_md(extra: dict) -> str:
    """Per square: TFLOP/s of the first and last seconds of back-to-back calls; the log's clock and power."""
    c, rows = extra["clocks"], []
    for n, v in c["calls"].items():
        times = v["t_s_and_us"]
        rate = lambda sel: v["flops"] / (statistics.median(us for _, us in sel) * 1e-6) / 1e12
        first = [r for r in times if r[0] < 1.0]
        rest = [r for r in times if r[0] >= 1.0]
        rows.append([f"{n}³", len(times), f"{rate(first):.0f}", f"{rate(rest):.0f}",
                     f"{min(v['flops'] / (us * 1e-6) / 1e12 for _, us in times):.0f}"])
    loaded = [(mhz, w) for mhz, w in smi_rows(c["nvidia_smi_csv"]) if w > LOADED_W]
    mhz = sorted(m for m, _ in loaded)
    summary = (f"Under load (log lines above {LOADED_W:.0f} W: {len(loaded)} of 50 ms each): power "
               f"{statistics.median(w for _, w in loaded):.0f} W median (limit 700 W), SM clock median "
               f"{statistics.median(mhz):.0f} MHz, range {mhz[0]:.0f}-{mhz[-1]:.0f} (max 1980).")
    cap = [ln.split(":")[1].strip() for ln in c["performance_after"].splitlines() if "SW Power Capping" in ln]
    if cap:
        summary += f" `nvidia-smi -q -d PERFORMANCE` afterwards: SW power capping counter {cap[0]}."
    return "\n\n".join([table(["square", "calls", "TFLOP/s first 1 s", "TFLOP/s after 1 s", "slowest call"], rows),
                        summary])


def model_tflops(device, m: int, n: int, k: int, batch: int = 1) -> float:
    kernel = gemm("g", m, n, k, 2, batch)
    return kernel.flops / rates_for(DtypePolicy.BF16_MIXED, device).time(kernel)[0] / 1e12


def layout_md(extra: dict, device) -> str:
    rows = [[r["layer"], r["case"], f"{r['m']}×{r['n']}×{r['k']}", f"{r['tflops']:.0f}",
             f"{model_tflops(device, r['m'], r['n'], r['k']):.0f}"] for r in extra["layout"]]
    return table(["layer", "call", "m×n×k", "measured TFLOP/s", "model"], rows)


def grouped_points(extra: dict, device) -> list[dict]:
    """Per (preset, ep): the six expert GEMMs' total FLOPs over their total time, for each implementation
    that ran all six, and the model's (batched GEMM: tile and wave quantisation over batch × tiles)."""
    groups: dict[tuple, list[dict]] = {}
    for r in extra["grouped"]:
        groups.setdefault((r["preset"], r["ep"]), []).append(r)
    out = []
    for (preset, ep), rs in groups.items():
        flops = sum(2.0 * r["batch"] * r["m"] * r["n"] * r["k"] for r in rs)
        rates = rates_for(DtypePolicy.BF16_MIXED, device)
        model_s = sum(rates.time(gemm("g", r["m"], r["n"], r["k"], 2, r["batch"]))[0] for r in rs)
        point = {"preset": preset, "ep": ep, "experts": rs[0]["batch"], "m": rs[0]["m"], "flops": flops,
                 "model_s": model_s}
        for impl in IMPLS:
            ts = [r.get(impl, {}).get("median_s") for r in rs]
            point[impl] = sum(ts) if all(ts) else None
        out.append(point)
    return out


def grouped_md(extra: dict, device) -> str:
    rows = []
    for p in grouped_points(extra, device):
        cells = []
        for impl in IMPLS:
            t = p[impl]
            cells.append("-" if t is None else f"{p['flops'] / t / 1e12:.0f} ({pct(signed_error(p['model_s'], t))})")
        rows.append([p["preset"], p["ep"], p["experts"], p["m"], f"{p['flops'] / p['model_s'] / 1e12:.0f}", *cells])
    failed = sorted({f"{r['preset']} ep{r['ep']} {r['gemm']}: {r[i]['error'].split(':')[0]}"
                     for r in extra["grouped"] for i in IMPLS if "error" in r.get(i, {})})
    note = ("Calls that failed (so that column shows '-'): " + "; ".join(failed)) if failed else ""
    head = ["preset", "ep", "local experts", "rows per expert", "model TFLOP/s",
            *(f"{i} TFLOP/s (model time error)" for i in IMPLS)]
    return "\n\n".join(x for x in [table(head, rows), note] if x)


def longattn_md(extra: dict, device) -> str:
    paper = load_cluster(PAPER_CLUSTER).device.attention_efficiency
    points = attention_points(extra["longattn"], paper, device.attention_efficiency)
    rows = []
    for p in points:
        for d in ("fwd", "bwd"):
            c = p[d]
            model = c["own"] if c["own"] else c["paper"]
            rows.append([p["backend"], p["seq"], d, f"{c['measured']:.0f}", f"{model:.0f}" if model else "-",
                         pct(signed_error(c["measured"], model)) if model else "-"])
    return table(["SDPA backend", "seq (causal, d 128, 32 heads)", "pass", "measured TFLOP/s",
                  "model TFLOP/s (cluster curve, flat past 16k)", "model time error"], rows)


def tokens_md(extra: dict, device) -> str:
    rows = []
    for r in (r for r in extra["tokens"] if "fwd_tflops" in r):
        if r["what"] == "linear":
            what, m, batch = f"nn.Linear 2048→2816, {r['tokens']} tokens", r["tokens"], 1
        else:
            what, m, batch = f"grouped_mm {r['experts']} experts × {r['rows_per_expert']} rows", r["rows_per_expert"], r["experts"]
        rows.append([what, f"{r['fwd_tflops']:.0f}", f"{r['bwd_tflops']:.0f}",
                     f"{model_tflops(device, m, 2816, 2048, batch):.0f}"])
    return table(["call (autograd)", "fwd TFLOP/s", "bwd TFLOP/s", "model fwd TFLOP/s"], rows)


def cooled_points(extra: dict, device, first: Path = FIRST) -> list[dict]:
    """Each shape timed after idle beside the first lease's back-to-back time of the same shape, and the model."""
    hot = {(r["m"], r["n"], r["k"], r["batch"]): r["median_s"] for r in json.loads(first.read_text())["gemm"]
           if "median_s" in r}
    rates, out = rates_for(DtypePolicy.BF16_MIXED, device), []
    for r in (r for r in extra["cooled"] if "median_s" in r):
        key = (r["m"], r["n"], r["k"], r["batch"])
        kernel = gemm("g", *key[:3], 2, key[3])
        out.append({"flops": kernel.flops, "cooled_s": r["median_s"], "hot_s": hot.get(key),
                    "model_s": rates.time(kernel)[0], "aligned": all(d % 8 == 0 for d in key[:3])})
    return out


def cooled_md(extra: dict, device) -> str:
    points = [p for p in cooled_points(extra, device) if p["aligned"] and p["hot_s"]]
    rows = []
    for lo, hi in ((1e10, 1e11), (1e11, 1e12), (1e12, 1e13), (1e13, 1e14), (1e10, 1e14)):
        sel = [p for p in points if lo <= p["flops"] < hi]
        if not sel:
            continue
        err = {w: [signed_error(p["model_s"], p[f"{w}_s"]) for p in sel] for w in ("hot", "cooled")}
        rate = {w: statistics.median(p["flops"] / p[f"{w}_s"] / 1e12 for p in sel) for w in ("hot", "cooled")}
        rows.append(["all" if (lo, hi) == (1e10, 1e14) else f"{lo:.0e} ≤ F < {hi:.0e}", len(sel),
                     f"{rate['hot']:.0f} / {rate['cooled']:.0f}",
                     *(f"{statistics.fmean(map(abs, err[w])) * 100:.1f} % / {pct(statistics.median(err[w]))}"
                       for w in ("hot", "cooled"))])
    return table(["aligned table shapes", "shapes", "median TFLOP/s back to back / after idle",
                  "model MAPE / median error, back to back", "after idle"], rows)


def power_md(raw: Path) -> str:
    """Per execute's log: lines in the steps, SM clock, ``power.draw`` (the driver's averaged reading) and, where the
    log has it, ``power.draw.instant``."""
    rows = []
    for path in sorted(raw.glob("call*/power-*.csv")):
        cells = [c for c in (ln.split(",") for ln in path.read_text().splitlines()[1:] if "MHz" in ln)]
        vals = [tuple(float(x.split()[0]) for x in c[1:3]) + ((float(c[3].split()[0]),) if len(c) > 3 and "W" in c[3]
                                                              else ()) for c in cells]
        steps = [v for v in vals if v[1] > STEP_W]
        if not steps:
            continue
        clocks = sorted(v[0] for v in steps)
        instant = [v[2] for v in steps if len(v) > 2]
        rows.append([f"{path.parent.name}/{path.name}", len(steps), f"{statistics.median(clocks):.0f}",
                     f"{clocks[len(clocks) // 10]:.0f}", f"{statistics.median(v[1] for v in steps):.0f}",
                     f"{max(v[1] for v in vals):.0f}",
                     f"{statistics.median(instant):.0f} / {sorted(instant)[int(0.9 * len(instant))]:.0f}" if instant else "-"])
    return table([f"execute's log (lines above {STEP_W:.0f} W)", "lines", "SM clock median MHz", "p10 MHz",
                  "power.draw median W", "power.draw max W", "power.draw.instant median / p90 W"], rows)


def sections(raw: Path, cluster_arg: str) -> dict[str, str]:
    try:
        device = load_cluster(cluster_arg).device
    except SpecError as err:
        raise SpecError("--cluster", f"{cluster_arg}: {err}") from None
    extra = load_extra(raw)
    return {"clocks": clocks_md(extra), "layout": layout_md(extra, device), "grouped": grouped_md(extra, device),
            "longattn": longattn_md(extra, device), "tokens": tokens_md(extra, device),
            "cooled": cooled_md(extra, device), "power": power_md(raw), "duty": duty_md(extra),
            "classpower": classpower_md(extra), "powermodel": powermodel_md(extra, raw, cluster_arg),
            "runs2": runs_md(raw, cluster_arg)}


def fill(text: str, tables: dict[str, str], doc: Path) -> str:
    """``text`` with every gpu-compare2 section refilled (:func:`gpu_compare.fill`), if it has them all."""
    for name in (n for n in tables if marker(n) not in text or marker(n, end=True) not in text):
        raise SpecError("--write-md", f"{doc} has no {marker(name)} ... {marker(name, end=True)} section; give "
                        "the doc that holds them (docs/hardware_measured.md)")
    return gpu_compare.fill(text, tables, marker)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", type=Path, default=RAW, help="folder holding call1/ (default: %(default)s)")
    ap.add_argument("--cluster", default="hgx-h200", help="preset name or cluster file to compare with")
    ap.add_argument("--write-md", type=Path, metavar="FILE.md", help="replace the gpu-compare2 sections of this doc")
    args = ap.parse_args(argv)
    try:
        tables = sections(args.raw, args.cluster)
        if args.write_md:
            text = args.write_md.read_text() if args.write_md.is_file() else ""
            args.write_md.write_text(fill(text, tables, args.write_md))
    except SpecError as err:
        print(f"gpu_compare2: error: {err}", file=sys.stderr)
        return 2
    sys.stdout.write("\n\n".join(f"## {name}\n\n{body}" for name, body in tables.items()) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
