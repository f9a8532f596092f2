"""Compare the H200 measurements of 2026-11-24 (docs/measured/h200-2026-11-24) with trainplan's compute
model on a cluster (default ``hgx-h200``): Markdown tables, docs/hardware_measured.md's generated sections.

    python benchmarks/gpu_compare.py [--raw DIR] [--cluster NAME|FILE] [--write-md docs/hardware_measured.md]

Raw fields: benchmarks/gpu_measure.py, gpu_session.sh. Errors: ``model / measured - 1`` on times (positive: the
model is slow); MAPE the mean |error|. Model sides: GEMMs ``Rates.time(gemm(m, n, k, 2, batch))`` (FP8:
``dtype=FP8``); attention, the FA3 paper's H100 curves in ``dgx-h100`` [src: fa3-paper] as the model reads them;
``memory_kernel_s`` on the bytes the model counts (AdamW: ``adam_bytes_per_param``); runs,
:func:`simulator.validate.validate` (``trainplan validate``); the 1.3B trace by class against the op table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from simulator.attention_efficiency import AttentionBackend, AttentionCall, AttentionPass
from simulator.cluster.io import load_cluster
from simulator.compile.ddp_copies import ddp_copy_s
from simulator.compile.grad_adds import grad_add
from simulator.compile.offload_part import adam_bytes_per_param
from simulator.strategy.formats import runs_autocast, sync_dtype
from simulator.compute import rates_for, achievable_hbm_Bps, edge_times, layer_times, memory_kernel_s
from simulator.dtypes import Dtype
from simulator.errors import SpecError
from simulator.run_results import load_results
from simulator.validate import run_cluster, run_workload, signed_error, validate
from simulator.workload.kinds import DtypePolicy
from simulator.workload.ops import OpKind, gemm

RAW = Path(__file__).resolve().parent.parent / "docs" / "measured" / "h200-2026-11-24"
PAPER_CLUSTER = "dgx-h100"
"""The preset holding the FA3 paper's H100 attention figures [src: fa3-paper]."""
DECADES = (1e10, 1e11, 1e12, 1e13, 1e14)
SECTIONS = ("setup", "gemm", "attention", "memory", "host", "runs", "trace")
BACKENDS = {"FLASH_ATTENTION": AttentionBackend.FLASH_ATTENTION_2, "CUDNN_ATTENTION": AttentionBackend.CUDNN}
MODEL_CLASS = {OpKind.QKV: "layer GEMMs", OpKind.OUT_PROJ: "layer GEMMs", OpKind.MLP: "layer GEMMs",
               OpKind.LOGITS: "logits GEMM", OpKind.ATTENTION: "attention"}  # any other op: memory-bound
RUN_ROWS = ("step_time_s", "forward", "backward", "optimizer", "dp")


def marker(name: str, end: bool = False) -> str:
    return f"<!-- gpu-compare:{name}:{'end' if end else 'start'} -->"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def load_measured(raw: Path) -> dict:
    """call1's gpu_measure-*.json sections merged: env, gemm, fp8, attention, memory, host."""
    files = sorted((raw / "call1").glob("gpu_measure-*.json"))
    out = {k: v for path in files for k, v in json.loads(path.read_text()).items()}
    missing = sorted({"env", "gemm", "fp8", "attention", "memory", "host"} - set(out))
    if missing or not (raw / "call2").is_dir():
        raise SpecError("--raw", f"{raw}: no call2/, or no gpu_measure {missing} in call1/; give the folder holding "
                        "call1/ and call2/ from benchmarks/gpu_session.sh")
    return out


def misaligned(row: dict) -> bool:
    """A dimension not a multiple of 8 (16 bytes of bf16): cuBLAS cannot use its aligned kernels."""
    return any(row[d] % 8 for d in ("m", "n", "k"))


def gemm_points(rows: list[dict], device, fp8: bool) -> list[dict]:
    """One point per measured shape: FLOPs, measured and model seconds, signed error, square?, misaligned?"""
    rates, out = rates_for(DtypePolicy.BF16_MIXED, device), []
    for r in (r for r in rows if "median_s" in r):
        kernel = gemm("g", r["m"], r["n"], r["k"], 2, r["batch"])
        model_s = rates.time(replace(kernel, dtype=Dtype.FP8) if fp8 else kernel)[0]
        out.append({**{d: r[d] for d in ("m", "n", "k", "batch")}, "flops": kernel.flops, "model_s": model_s,
                    "measured_s": r["median_s"], "error": signed_error(model_s, r["median_s"]),
                    "square": r["rows"] == ["square"], "misaligned": misaligned(r)})
    return out


def error_summary(label: str, points: list[dict]) -> list:
    e = [p["error"] for p in points]
    return [label, len(e), *([f"{statistics.fmean(map(abs, e)) * 100:.1f} %", pct(statistics.median(e))] if e
                             else ["-", "-"])]


def decade_rows(points: list[dict]) -> list[list]:
    """MAPE and median signed error of the aligned table (non-square) shapes per FLOP decade, of all
    aligned ones, and of the misaligned ones."""
    shapes = [p for p in points if not p["square"]]
    aligned = [p for p in shapes if not p["misaligned"]]
    rows = [error_summary(f"{lo:.0e} ≤ F < {hi:.0e}", [p for p in aligned if lo <= p["flops"] < hi])
            for lo, hi in zip(DECADES, DECADES[1:])]
    return rows + [error_summary("all aligned", aligned),
                   error_summary("misaligned (a dim % 8 ≠ 0)", [p for p in shapes if p["misaligned"]])]


def gemm_md(measured: dict, device) -> str:
    bf16, fp8 = (gemm_points(measured[k], device, k == "fp8") for k in ("gemm", "fp8"))
    sq8 = {p["m"]: p for p in fp8 if p["square"]}

    def cells(p: dict | None) -> list:
        return ["-"] * 3 if p is None else [f"{p['flops'] / p['measured_s'] / 1e12:.0f}",
                                            f"{p['flops'] / p['model_s'] / 1e12:.0f}", pct(p["error"])]
    head = ["n (m=n=k)", "bf16 measured TFLOP/s", "bf16 model", "time error", "fp8 measured", "fp8 model", "time error"]
    squares = table(head, [[p["m"], *cells(p), *cells(sq8.get(p["m"]))] for p in bf16 if p["square"]])
    head = ["table shapes", "shapes", "MAPE", "median signed error"]
    return "\n\n".join([squares, "BF16 (`torch.mm`/`bmm`):", table(head, decade_rows(bf16)),
                        "FP8 (`torch._scaled_mm` e4m3; batch 1, k and n multiples of 16 only):",
                        table(head, decade_rows(fp8))])


def attention_points(rows: list[dict], paper, own) -> list[dict]:
    """Measured fwd/bwd TFLOP/s beside the paper curve the model reads for the same call (``paper``; ``read``:
    no bar at this point, a value the model derives) and the cluster's own curve (``own``, or None)."""
    out = []
    for r in (r for r in rows if "fwd_tflops" in r):
        point = {k: r[k] for k in ("backend", "head_dim", "causal", "seq")}
        for direction in AttentionPass:
            call = AttentionCall(backend=BACKENDS[r["backend"]], direction=direction, seq_len=r["seq"],
                                 head_dim=r["head_dim"], causal=r["causal"])
            curve, own_curve = paper.curve(call), own.curve(call) if own else None
            point[direction.value] = {
                "measured": r[f"{direction.value}_tflops"], "paper": curve.tflops(r["seq"]) if curve else None,
                "read": curve is not None and (curve.causal != r["causal"] or curve.head_dim != r["head_dim"]
                                               or r["seq"] not in dict(curve.points)),
                "own": own_curve.tflops(r["seq"]) if own_curve else None}
        out.append(point)
    return out


def attention_md(measured: dict, device) -> str:
    own = device.attention_efficiency
    points = attention_points(measured["attention"], load_cluster(PAPER_CLUSTER).device.attention_efficiency, own)

    def cells(c: dict) -> list:
        ref = "-" if c["paper"] is None else f"{c['paper']:.0f}" + ("†" if c["read"] else "")
        ratio = f"{c['measured'] / c['paper']:.2f}" if c["paper"] else "-"
        return [f"{c['measured']:.0f}", ref, ratio] + ([f"{c['own']:.0f}" if c["own"] else "-"] if own else [])
    extra = ["cluster curve"] if own else []
    head = ["SDPA backend", "d", "causal", "seq", "fwd measured", "fwd H100 paper", "ratio", *extra,
            "bwd measured", "bwd H100 paper", "ratio", *extra]
    rows = [[p["backend"], p["head_dim"], "yes" if p["causal"] else "no", p["seq"], *cells(p["fwd"]),
             *cells(p["bwd"])] for p in points]
    ratios = {(b, d): [p[d]["measured"] / p[d]["paper"] for p in points
                       if p["backend"] == b and p[d]["paper"] and not p[d]["read"]]
              for b in BACKENDS for d in ("fwd", "bwd")}
    summary = [[b, d, len(r), f"{statistics.median(r):.2f}", f"{min(r):.2f}..{max(r):.2f}"]
               for (b, d), r in ratios.items()]
    return "\n\n".join([table(["SDPA backend", "pass", "points with a paper bar", "median ratio", "range"],
                              summary), table(head, rows)])


def memory_md(measured: dict, device) -> str:
    hbm_GBps, rows = achievable_hbm_Bps(device) / 1e9, []
    for r in measured["memory"]:
        nbytes = r.get("model_bytes", r["elements"] * adam_bytes_per_param(DtypePolicy.FP32))
        model_s, GBps = memory_kernel_s(device, DtypePolicy.BF16_MIXED, nbytes), nbytes / r["median_s"] / 1e9
        rows.append([r["kernel"], f"{nbytes / 1e6:.0f}", f"{r['median_s'] * 1e6:.0f}", f"{GBps:.0f}",
                     f"{GBps / hbm_GBps * 100:.0f} %", f"{model_s * 1e6:.0f}",
                     pct(signed_error(model_s, r["median_s"]))])
    return table(["kernel", "model MB", "measured µs", "GB/s", "of achievable", "model µs", "time error"], rows)


def host_md(measured: dict, device, raw: Path) -> str:
    rows = [[f"eager `add_` launch, host µs each ({r['launches']} back to back)", f"{r['host_us_per_launch']:.2f}",
             f"kernel_launch_overhead_us {device.kernel_launch_overhead_us:g}"]
            for r in measured["host"] if "host_us_per_launch" in r]
    rows += [["tiny kernel replayed from a CUDA graph, GPU µs each", f"{r['gpu_us_per_kernel']:.2f}",
              "(none: the device-side floor per kernel)"] for r in measured["host"] if "gpu_us_per_kernel" in r]
    for path in sorted(raw.glob("call*/h200-calibrated.yaml")):
        d = yaml.safe_load(path.read_text())["device"]
        rows.append([f"{path.parent.name}: `calibrate --compute`'s kernel_launch / op_call overhead",
                     f"{d['kernel_launch_overhead_us']:.0f} / {d['op_call_overhead_us']:.0f}",
                     f"{device.kernel_launch_overhead_us:g} / {device.op_call_overhead_us:g}"])
    return table(["what", "µs", "cluster field"], rows)


def runs_md(raw: Path, cluster_arg: str) -> str:
    """Each results file of the calls validated on the cluster, or why it cannot be (no completed step)."""
    rows = []
    for path in sorted(raw.glob("call*/results-*.json")):
        results, name = load_results(path), f"{path.parent.name}/{path.name}"
        if results.completed_steps == 0:
            planned_GB = json.loads(path.read_text())["plan"]["estimates"][0]["memory"]["total_bytes"] / 1e9
            rows.append([name, f"no step: {results.failure.error.split('. GPU')[0]} (planned {planned_GB:.1f} GB)"])
            continue
        v = validate(results, run_cluster(results, cluster_arg))
        peak = v.row("peak_memory_bytes")
        rows.append([name, *(f"{x.measured * 1e3:.1f} / {x.analytical * 1e3:.1f} ({pct(x.error_analytical)})"
                             for x in map(v.row, RUN_ROWS)),
                     f"{peak.measured / 2**30:.1f} / {peak.analytical / 2**30:.1f} GiB"])
    return table(["results", *(f"{n} ms measured / model" for n in RUN_ROWS), "peak memory measured / model"], rows)


def trace_classes(trace: dict) -> dict[str, float]:
    """Seconds per step by class: GEMMs on CUTLASS ``align1`` kernels (misaligned operands: here the
    vocab-50257 logits) apart from the others; each class but gemm, attention and optimizer is memory-bound."""
    by = trace["by_class_s_per_step"]
    align1 = sum(k["s_per_step"] for k in trace["top_kernels"] if "align1" in k["name"])
    return {"layer GEMMs": by.get("gemm", 0.0) - align1, "logits GEMM": align1,
            "attention": by.get("attention", 0.0), "optimizer": by.get("optimizer", 0.0),
            "memory-bound": sum(s for c, s in by.items() if c not in ("gemm", "attention", "optimizer"))}


def model_classes(results, cluster) -> dict[str, float]:
    """The model's seconds per step in the same classes: its op table for the plan as run and the
    analytical optimizer phase, less torch DDP's bucket copies it carries (:mod:`simulator.compile.ddp_copies`),
    which count as memory-bound here as the trace's classes count them."""
    spec, layout, device = run_workload(results), results.run.plan.layout(), cluster.device
    s = layout.strategy
    backend = s.resolved_attention_backend(device.compute_capability)
    autocast = runs_autocast(spec.dtype, s)
    add = grad_add(spec.dtype, layout)  # the gradient-accumulation adds (simulator.workload.grad_accum)
    layer = layer_times(spec, device, s.micro_batch, None, layout.tp, s.recompute, attention_backend=backend,
                        autocast=autocast, grad_add=add)
    edge = edge_times(spec, device, s.micro_batch, None, layout.tp, autocast=autocast, grad_add=add,
                      loss=layout.framework.loss_impl)
    out: dict[str, float] = defaultdict(float)
    for rows, times in ((layer, spec.layers * layout.micro_batches), (edge, layout.micro_batches)):
        for r in rows:
            out[MODEL_CLASS.get(r.op, "memory-bound")] += r.time_s * times
    copies = ddp_copy_s(device, spec.dtype, sync_dtype(spec.dtype, s).grad_bytes, spec.params, layout)
    out["optimizer"] = validate(results, cluster).row("optimizer").analytical - copies
    out["memory-bound"] += copies  # DDP's bucket copies: charged before the optimizer, memory-bound kernels in a trace
    return dict(out)


def trace_md(raw: Path, cluster_arg: str) -> str:
    trace = json.loads((raw / "call2" / "trace-kernels-gpt3-1.3b.json").read_text())
    results = load_results(raw / "call2" / "results-gpt3-1.3b.json")
    measured, model = trace_classes(trace), model_classes(results, run_cluster(results, cluster_arg))
    measured["**sum of kernels**"], model["**sum of kernels**"] = sum(measured.values()), sum(model.values())
    rows = [[c, f"{t * 1e3:.1f}", f"{model.get(c, 0) * 1e3:.1f}", f"{(t - model.get(c, 0)) * 1e3:+.1f}"]
            for c, t in measured.items()]
    rows.append(["GPU busy (kernels' union) / span of the profiled steps",
                 f"{trace['busy_s_per_step'] * 1e3:.1f} / {trace['span_s_per_step'] * 1e3:.1f}", "", ""])
    return table(["kernel class", "trace ms/step", "model ms/step", "trace − model ms"], rows)


def setup_md(measured: dict, cluster) -> str:
    d, env = cluster.device, measured["env"]
    return (f"Measured: {env['gpu']} ({env['sm_count']} SMs), torch {env['torch']}, cuDNN {env['cudnn']}, "
            f"{env['date_utc']} UTC. Model: `{cluster.name}`, {d.name}: peak bf16 {d.peak_tflops[Dtype.BF16]:g}, fp8 "
            f"{d.peak_tflops.get(Dtype.FP8, 0):g} TFLOP/s, sm_count {d.sm_count}, sustained_clock_ratio "
            f"{d.sustained_clock_ratio:g}, achievable HBM {achievable_hbm_Bps(d) / 1e9:.0f} GB/s, "
            f"kernel_launch_overhead_us {d.kernel_launch_overhead_us:g}.")


def sections(raw: Path, cluster_arg: str) -> dict[str, str]:
    """Every table, by section name (:data:`SECTIONS`)."""
    try:
        cluster, measured = load_cluster(cluster_arg), load_measured(raw)
    except SpecError as err:
        raise err if err.field == "--raw" else SpecError("--cluster", f"{cluster_arg}: {err}") from None
    d = cluster.device
    return {"setup": setup_md(measured, cluster), "gemm": gemm_md(measured, d),
            "attention": attention_md(measured, d), "memory": memory_md(measured, d),
            "host": host_md(measured, d, raw), "runs": runs_md(raw, cluster_arg), "trace": trace_md(raw, cluster_arg)}


def check_doc(doc: Path) -> str:
    """The doc's text, if it has every section's markers (else SpecError naming the first missing one)."""
    text = doc.read_text() if doc.is_file() else ""
    for name in (n for n in SECTIONS if marker(n) not in text or marker(n, end=True) not in text):
        raise SpecError("--write-md", f"{doc} has no {marker(name)} ... {marker(name, end=True)} section; give "
                        "the doc that holds them (docs/hardware_measured.md)")
    return text


def fill(text: str, tables: dict[str, str], mark=marker) -> str:
    """``text`` with each section between its markers (``mark(name)``, ``mark(name, end=True)``) replaced by its table."""
    for name, body in tables.items():
        head, rest = text.split(mark(name), 1)
        text = f"{head}{mark(name)}\n{body}\n{mark(name, end=True)}{rest.split(mark(name, end=True), 1)[1]}"
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", type=Path, default=RAW, help="folder holding call1/ and call2/ (default: %(default)s)")
    ap.add_argument("--cluster", default="hgx-h200", help="preset name or cluster file to compare with")
    ap.add_argument("--write-md", type=Path, metavar="FILE.md", help="replace the gpu-compare sections of this doc")
    args = ap.parse_args(argv)
    try:
        doc = check_doc(args.write_md) if args.write_md else None
        tables = sections(args.raw, args.cluster)
    except SpecError as err:
        print(f"gpu_compare: error: {err}", file=sys.stderr)
        return 2
    if doc is not None:
        args.write_md.write_text(fill(doc, tables))
    sys.stdout.write("\n\n".join(f"## {name}\n\n{body}" for name, body in tables.items()) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
