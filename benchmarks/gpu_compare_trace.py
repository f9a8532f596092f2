"""The H200 1.3B kernel trace class by class, against the compute model's kernels for the same plan.

    python benchmarks/gpu_compare_trace.py                      # print the table (from the committed classes file)
    python benchmarks/gpu_compare_trace.py --from-trace         # re-derive the classes file from the raw trace
    python benchmarks/gpu_compare_trace.py --write-md docs/hardware_measured.md

``--from-trace`` reads ``call2/trace-gpt3-1.3b.json.gz`` (torch.profiler, 3 steps of GPT-3 1.3B, one H200,
torch DDP, bf16 autocast, micro-batch 8 × 2048 tokens; 2026-11-24 [src: own-h200-2026-11-24]) and keeps steps 2
and 3 (the first creates the optimizer's states). Each kernel is attributed to the CPU operator stack that
launched it (its runtime call's correlation id, then the enclosing ``cpu_op`` and annotation events on that
thread) and to a class by the outermost autograd node or annotation and the innermost ``aten::`` operator
(:data:`RULES`); per class it keeps ms per step, calls per step and the 10th/50th/90th percentile µs per call.
The model's side: the kernels of :func:`simulator.compute.layer_times` / ``edge_times`` for the plan as run
(cuDNN attention, what the trace shows ran), each kernel timed alone, × 24 blocks, the analytical optimizer
phase less torch DDP's bucket copies, and those copies as their own class (:mod:`simulator.workload.ddp_bucket`;
the step estimate charges them before the optimizer, :mod:`simulator.compile.ddp_copies`); its full-clock times
(the step's power stretch, 3 % here, is not in them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_compare as g  # noqa: E402  (the run's cluster and results loaders)

RAW = Path(__file__).resolve().parent.parent / "docs" / "measured" / "h200-2026-11-24" / "call2"
CLASSES_FILE = RAW / "trace-classes-gpt3-1.3b.json"
CALIBRATED = Path(__file__).resolve().parent.parent / "docs" / "measured" / "h200-2026-11-25" / "call1" / \
    "h200-calibrated.yaml"

RULES = (  # first match wins: (class, outermost event contains, aten:: stack contains, kernel name contains)
    ("logits GEMMs (CUTLASS align1)", "", "", "align1"),
    ("block GEMMs", "", "aten::mm", "nvjet"),
    ("block GEMMs", "", "aten::addmm", "nvjet"),
    ("other", "forward", "aten::addmm", "Memset"),  # cuBLAS's memsets under addmm, not the residual add
    ("attention fwd", "forward", "", "cudnn"),
    ("attention bwd", "Attention", "", ""),
    ("norm fwd", "forward", "layer_norm", ""),
    ("norm bwd: grad-input kernel", "LayerNormBackward", "native_layer_norm_backward", "grad_input"),
    ("norm bwd: γ/β kernel", "LayerNormBackward", "native_layer_norm_backward", "GammaBeta"),
    ("residual: fp32 add fwd", "forward", "aten::add", ""),
    ("residual: bwd add and cast", "LayerNormBackward", "aten::add_", ""),
    ("residual: bwd add and cast", "AddBackward", "", ""),
    ("GELU fwd", "forward", "aten::gelu", ""),
    ("GELU bwd", "GeluBackward", "", ""),
    ("loss (cross-entropy) fwd", "forward", "cross_entropy", ""),
    ("loss (cross-entropy) bwd", "LogSoftmaxBackward", "", ""),
    ("loss (cross-entropy) bwd", "NllLossBackward", "", ""),
    # the fp32 → bf16 gradient of nll_loss's autocast cast of the log-probabilities (the model's cross_entropy.cast_bwd)
    ("loss (cross-entropy) bwd", "ToCopyBackward", "", "bfloat16_copy"),
    ("autocast casts fwd", "forward", "copy_", ""),
    ("autocast casts bwd (ToCopyBackward)", "ToCopyBackward", "", ""),
    ("bias-gradient sums", "AddmmBackward", "aten::sum", ""),
    ("QKV split bwd (cat)", "SplitWithSizesBackward", "", ""),
    ("embedding fwd/bwd", "mbedding", "", ""),
    ("embedding fwd/bwd", "forward", "aten::embedding", ""),
    ("grad-accumulation add (AccumulateGrad)", "AccumulateGrad", "aten::add_", ""),
    ("DDP bucket copies and division", "AccumulateGrad", "", ""),
    ("DDP bucket copies and division", "ddp.reducer", "", ""),
    ("optimizer (foreach AdamW)", "Optimizer.step", "", ""),
    ("zero_grad fill (outside the phases)", "zero_grad", "", ""),
    ("executor's gradient-norm check (untimed)", "aten::pow", "", ""),
    ("executor's gradient-norm check (untimed)", "aten::sum", "", ""),
)


def _class(context: str, aten: str, kernel: str) -> str:
    """The class of a kernel launched under ``context`` (the outermost event) and ``aten`` (its ``aten::`` stack
    joined)."""
    return next((c for c, a, b, k in RULES if a in context and b in aten and k in kernel), "other")


def _stacks(events: list, kernels: list) -> list[tuple[list[str], dict]]:
    """Each kernel with the names of the CPU events (outermost first) open on its launching thread at launch."""
    launch = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    ops = defaultdict(list)
    for e in events:
        if e.get("cat") in ("cpu_op", "user_annotation") and e.get("ph") == "X":
            ops[e["tid"]].append(e)
    out, by_tid = [], defaultdict(list)
    for k in kernels:
        r = launch.get(k["args"].get("correlation"))
        by_tid[r["tid"] if r else None].append((r["ts"] if r else 0.0, k))
    for tid, items in by_tid.items():
        seq, i, stack = sorted(ops.get(tid, []), key=lambda e: (e["ts"], -e["dur"])), 0, []
        for ts, k in sorted(items, key=lambda x: x[0]):
            while i < len(seq) and seq[i]["ts"] <= ts:
                while stack and stack[-1]["ts"] + stack[-1]["dur"] < seq[i]["ts"]:
                    stack.pop()
                stack.append(seq[i])
                i += 1
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < ts:
                stack.pop()
            out.append(([s["name"] for s in stack], k))
    return out


def classes_from_trace(path: Path) -> dict:
    """Per class: ms per step, calls per step and per-call µs percentiles over the steady steps (module docstring)."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    ends = sorted(e["ts"] + e["dur"] for e in events if e.get("cat") == "user_annotation"
                  and e["name"].startswith("Optimizer.zero_grad"))
    windows = list(zip(ends[:-1], ends[1:]))  # step k: after step k−1's zero_grad up to its own (k ≥ 2)
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
               and any(a < e["ts"] <= b for a, b in windows)]
    durs = defaultdict(list)
    for stack, k in _stacks(events, kernels):
        aten = " ".join(s for s in stack if s.startswith("aten::"))
        durs[_class(stack[0] if stack else "", aten, k["name"])].append(k["dur"])
    n = len(windows)
    return {"trace": str(path.name), "steps": n, "classes": {
        c: {"ms_per_step": sum(d) / 1e3 / n, "calls_per_step": len(d) / n,
            "us_per_call_p10_p50_p90": [round(x, 2) for x in _percentiles(d)]} for c, d in sorted(durs.items())}}


def _percentiles(d: list[float]) -> tuple[float, float, float]:
    if len(d) < 2:
        return (d[0],) * 3
    q = statistics.quantiles(d, n=10)
    return q[0], statistics.median(d), q[-1]


def model_kernels(results, cluster) -> dict[tuple[str, str], tuple[float, int]]:
    """(phase, kernel name) → (seconds per step, kernels per step) of the model for the plan as run, cuDNN
    attention (what ran), each kernel timed alone (:meth:`simulator.kernel_roofline.Rates.time`)."""
    from simulator.attention_efficiency import AttentionBackend
    from simulator.compute import Phase, rates_for, runs_cuda_kernels
    from simulator.compile.grad_adds import grad_add
    from simulator.strategy import Framework
    from simulator.strategy.formats import runs_autocast, sync_dtype
    from simulator.workload.ddp_bucket import ddp_bucket_kernel
    from simulator.validate import run_workload
    from simulator.workload.autocast import autocast_block
    from simulator.workload.blocks import block_work
    from simulator.workload.eager_norm import with_norm_weight_grads
    from simulator.workload.grad_accum import with_grad_add
    from simulator.workload.kinds import KernelFusion
    from simulator.workload.loss import with_loss
    from simulator.workload.chunks import edge_params_held
    from simulator.workload.ops import OpKind, Scope, edge_work
    from simulator.workload.protocol import ChunkSlice

    spec, layout, device = run_workload(results), results.run.plan.layout(), cluster.device
    s, m, cuda = layout.strategy, layout.micro_batches, runs_cuda_kernels(device)
    blocks = with_norm_weight_grads(block_work(spec, s.micro_batch, None, layout.tp, attention_backend=AttentionBackend.CUDNN),
                                    KernelFusion.EAGER, cuda)
    edges = with_norm_weight_grads(with_loss(edge_work(spec, s.micro_batch), layout.framework.loss_impl,
                                             spec.dtype.activation_bytes, autocast=runs_autocast(spec.dtype, s)),
                                   KernelFusion.EAGER, cuda)
    add, whole = grad_add(spec.dtype, layout), ChunkSlice(index=0, count=1, start=0, layers=spec.layers)
    out: dict[tuple[str, str], list] = defaultdict(lambda: [0.0, 0])
    parts = [(blocks, spec.layers * m, spec.layer_params, OpKind.ELEMENTWISE)]
    parts += [([w for w in edges if w.scope is scope], m, edge_params_held(spec, whole, layout.tp, scope), owner)
              for scope, owner in ((Scope.FIRST, OpKind.EMBEDDING), (Scope.LAST, OpKind.LOGITS))]
    for works, times, params, owner in parts:
        if runs_autocast(spec.dtype, s):
            works = autocast_block(works, spec.dtype.activation_bytes, spec.bias)
        works = with_grad_add(works, add, params, owner)
        for phase, rates in ((Phase.FWD, rates_for(spec.dtype, device)), (Phase.BWD, rates_for(spec.dtype, device, Phase.BWD))):
            for w in works:
                for k in (w.fwd if phase is Phase.FWD else w.bwd):
                    cell = out[(phase.value, k.name)]
                    cell[0] += rates.time(k)[0] * times
                    cell[1] += times
    if layout.framework is Framework.TORCH_DDP:  # the reducer's bucket copies, once per step
        k = ddp_bucket_kernel(spec.params, sync_dtype(spec.dtype, s).grad_bytes, s.gradient_as_bucket_view)
        out[("step", k.name)] = [rates_for(spec.dtype, device, Phase.BWD).time(k)[0], 1]
    return {key: (t, n) for key, (t, n) in out.items()}


MODEL_RULES = (  # (class, phase, kernel-name test) for the model's kernels; first match wins
    ("logits GEMMs (CUTLASS align1)", "", lambda n: n.startswith("logits") and "cast" not in n),
    ("block GEMMs", "", lambda n: n.split(".")[0] in ("qkv", "out_proj", "mlp_in", "mlp_out") and
     n.split(".")[-1] in ("qkv", "out_proj", "mlp_in", "mlp_out", "dgrad", "wgrad")),
    ("attention fwd", "fwd", lambda n: n == "flash_attn"),
    ("attention bwd", "bwd", lambda n: n == "flash_attn.bwd"),
    ("norm bwd: γ/β kernel", "bwd", lambda n: n.endswith(".bwd_weight")),
    ("norm bwd: grad-input kernel", "bwd", lambda n: n in ("norm.bwd", "final_norm.bwd")),
    ("norm fwd", "fwd", lambda n: n in ("norm", "final_norm")),
    ("autocast casts fwd", "fwd", lambda n: ".cast_" in n and not n.startswith("cross_entropy")),
    ("autocast casts bwd (ToCopyBackward)", "bwd", lambda n: ".cast_" in n and not n.startswith("cross_entropy")),
    ("residual: fp32 add fwd", "fwd", lambda n: n == "residual"),
    ("residual: bwd add and cast", "bwd", lambda n: n == "residual.bwd"),
    ("GELU fwd", "fwd", lambda n: n == "activation"),
    ("GELU bwd", "bwd", lambda n: n == "activation.bwd"),
    ("loss (cross-entropy) fwd", "fwd", lambda n: n.startswith("cross_entropy")),
    ("loss (cross-entropy) bwd", "bwd", lambda n: n.startswith("cross_entropy")),
    ("bias-gradient sums", "bwd", lambda n: n.endswith(".bias_grad")),
    ("embedding fwd/bwd", "", lambda n: n.startswith("embedding")),
    ("grad-accumulation add (AccumulateGrad)", "bwd", lambda n: n == "grad_accumulate"),
    ("DDP bucket copies and division", "step", lambda n: n == "ddp_bucket_copies"),
)


def _optimizer_s(results, cluster, kernels: dict) -> float:
    """The analytical optimizer phase less torch DDP's bucket copies, which the step charges there
    (:mod:`simulator.compile.ddp_copies`) and the trace counts as their own kernels (``kernels``'s
    ``("step", "ddp_bucket_copies")``, timed alike)."""
    return g.validate(results, cluster).row("optimizer").analytical - kernels.get(("step", "ddp_bucket_copies"),
                                                                                   (0.0, 0))[0]


def model_classes(results, cluster) -> dict[str, float]:
    """The model's seconds per step in the trace's classes (:data:`MODEL_RULES`) and the optimizer phase."""
    out: dict[str, float] = defaultdict(float)
    kernels = model_kernels(results, cluster)
    for (phase, name), (sec, _) in kernels.items():
        cls = next((c for c, p, test in MODEL_RULES if p in phase and test(name)), "other")
        out[cls] += sec
    out["optimizer (foreach AdamW)"] = _optimizer_s(results, cluster, kernels)
    return dict(out)


def table_md(classes: dict, cluster_args: tuple[str, ...]) -> str:
    """One row per class: the trace's ms per step, calls and per-call spread, each cluster's model ms and ratio."""
    results = g.load_results(RAW / "results-gpt3-1.3b.json")
    models = [model_classes(results, g.run_cluster(results, c)) for c in cluster_args]
    names = [Path(c).parent.parent.name + "/" + Path(c).parent.name if c.endswith(".yaml") else c
             for c in cluster_args]
    head = ["kernel class", "trace ms/step", "calls/step", "µs per call p10 / p50 / p90",
            *(x for n in names for x in (f"model ms ({n})", "trace ÷ model"))]
    rows, total = [], [0.0] * (1 + len(models))
    for cls, c in sorted(classes["classes"].items(), key=lambda kv: -kv[1]["ms_per_step"]):
        cells = []
        for i, mdl in enumerate(models):
            t = mdl.get(cls, 0.0) * 1e3
            total[i + 1] += t
            cells += [f"{t:.1f}", f"{c['ms_per_step'] / t:.2f}" if t > 0 else "not modelled"]
        total[0] += c["ms_per_step"]
        p = c["us_per_call_p10_p50_p90"]
        rows.append([cls, f"{c['ms_per_step']:.1f}", f"{c['calls_per_step']:.0f}", f"{p[0]:.0f} / {p[1]:.0f} / {p[2]:.0f}",
                     *cells])
    rows.append(["**all kernels**", f"{total[0]:.1f}", "", "",
                 *(x for t in total[1:] for x in (f"{t:.1f}", f"{total[0] / t:.2f}"))])
    return g.table(head, rows)


COARSE = ("GEMMs", "attention", "optimizer", "memory-bound")


def _coarse_model(results, cluster) -> dict[str, float]:
    """The model's kernels in the summaries' four classes: GEMMs (block and logits), fused attention, the
    optimizer phase, and every other (memory-bound) kernel."""
    out = dict.fromkeys(COARSE, 0.0)
    kernels = model_kernels(results, cluster)
    for (_, name), (sec, _) in kernels.items():
        mapped = next((c for c, _, test in MODEL_RULES[:4] if test(name)), None)
        out["attention" if mapped and "attention" in mapped else "GEMMs" if mapped else "memory-bound"] += sec
    out["optimizer"] = _optimizer_s(results, cluster, kernels)
    return out


def coarse_md(cluster_arg: str = "hgx-h200") -> str:
    """The two summarised traces (``trace-kernels-*.json``: every profiled step, the first included, by
    :mod:`trace_kernels`' name classes) against the model, four classes."""
    rows = []
    for call, model in (("call2", "gpt3-1.3b"), ("call4", "qwen2-0.5b")):
        by = json.loads((RAW.parent / call / f"trace-kernels-{model}.json").read_text())["by_class_s_per_step"]
        trace = {"GEMMs": by.get("gemm", 0.0), "attention": by.get("attention", 0.0),
                 "optimizer": by.get("optimizer", 0.0)}
        trace["memory-bound"] = sum(by.values()) - sum(trace.values())
        results = g.load_results(RAW.parent / call / f"results-{model}.json")
        mdl = _coarse_model(results, g.run_cluster(results, cluster_arg))
        rows += [[f"{call}/{model}", c, f"{trace[c] * 1e3:.1f}", f"{mdl[c] * 1e3:.1f}", f"{trace[c] / mdl[c]:.2f}"]
                 for c in COARSE]
    return g.table(["trace", "class", "trace ms/step", f"model ms/step ({cluster_arg})", "trace ÷ model"], rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-trace", action="store_true", help="re-derive the classes file from the raw trace")
    ap.add_argument("--cluster", action="append", help="preset or cluster file (repeatable; default: hgx-h200 "
                    "and the 2026-11-25 calibrated file)")
    ap.add_argument("--write-md", type=Path, metavar="FILE.md", help="replace the gpu-compare-trace section of this doc")
    args = ap.parse_args(argv)
    if args.from_trace:
        CLASSES_FILE.write_text(json.dumps(classes_from_trace(RAW / "trace-gpt3-1.3b.json.gz"), indent=1) + "\n")
    clusters = tuple(args.cluster or ("hgx-h200", str(CALIBRATED)))
    body, coarse = table_md(json.loads(CLASSES_FILE.read_text()), clusters), coarse_md(clusters[0])
    if args.write_md:
        mark = lambda name, end=False: f"<!-- gpu-compare-trace:{name}:{'end' if end else 'start'} -->"  # noqa: E731
        text = args.write_md.read_text() if args.write_md.is_file() else ""
        if mark("classes") not in text or mark("coarse") not in text:
            print(f"gpu_compare_trace: error: --write-md: {args.write_md} has no {mark('classes')} and "
                  f"{mark('coarse')} sections; give docs/hardware_measured.md", file=sys.stderr)
            return 2
        args.write_md.write_text(g.fill(text, {"classes": body, "coarse": coarse}, mark))
    print(body + "\n\n" + coarse)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
