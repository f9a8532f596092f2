"""Sum a torch.profiler Chrome trace's GPU kernels by class and by name (what a measured step spent its
GPU time on), to set against the compute model's op table.

    python benchmarks/trace_kernels.py TRACE.json [--steps N] [--out FILE.json]

``--steps``: the profiled steps, so that the sums are per step. Classes are read from the kernel names
(cuBLAS/CUTLASS GEMMs, flash/cuDNN attention, NCCL, the optimizer's multi-tensor kernels, norms, softmax,
dropout, the remaining elementwise and copy kernels); GPU idle time between kernels is the step's span
minus the kernels' union, reported as ``gaps_s``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

CLASSES = (  # first match wins; (class, substrings of the lower-cased kernel name)
    ("attention", ("flash", "fmha", "cudnn", "attn")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "sm90_", "sm80_", "cublas", "splitk")),
    ("nccl", ("nccl",)),
    ("optimizer", ("multi_tensor", "fused_adam", "adam")),
    ("norm", ("layer_norm", "layernorm", "rms")),
    ("softmax", ("softmax",)),
    ("dropout", ("dropout", "fused_dropout", "bernoulli")),
    ("loss", ("cross_entropy", "nll_loss", "log_softmax")),
    ("reduce", ("reduce",)),
    ("copy", ("copy", "memcpy", "memset", "cat")),
    ("elementwise", ("elementwise", "vectorized", "unrolled")),
)


def kernel_class(name: str) -> str:
    low = name.lower()
    return next((cls for cls, keys in CLASSES if any(k in low for k in keys)), "other")


def summarise(path: Path, steps: int = 1) -> dict:
    events = json.loads(path.read_text()).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    by_class, by_name, count = defaultdict(float), defaultdict(float), defaultdict(int)
    for e in kernels:
        by_class[kernel_class(e["name"])] += e["dur"] * 1e-6 / steps
        by_name[e["name"]] += e["dur"] * 1e-6 / steps
        count[e["name"]] += 1
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels)
    busy, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            busy += b - max(a, end)
            end = b
    span = (spans[-1][1] - spans[0][0]) if spans else 0.0
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:40]
    return {"trace": str(path), "steps": steps, "kernels": len(kernels),
            "busy_s_per_step": busy * 1e-6 / steps, "span_s_per_step": span * 1e-6 / steps,
            "by_class_s_per_step": dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
            "top_kernels": [{"name": n[:160], "s_per_step": s, "calls_per_step": count[n] / steps} for n, s in top]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps: must be a positive integer, got {args.steps}")
    try:
        result = summarise(args.trace, args.steps)
    except (OSError, ValueError) as err:
        ap.error(f"trace: cannot read {args.trace} as a Chrome trace ({type(err).__name__}); give the rank*.json "
                 "that `trainplan execute --trace DIR` wrote")
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(f"{result['kernels']} kernels; per step: busy {result['busy_s_per_step'] * 1e3:.1f} ms of "
          f"{result['span_s_per_step'] * 1e3:.1f} ms")
    for cls, s in result["by_class_s_per_step"].items():
        print(f"  {cls:12s} {s * 1e3:8.2f} ms")
    for row in result["top_kernels"][:15]:
        print(f"  {row['s_per_step'] * 1e3:8.2f} ms {row['calls_per_step']:6.0f}x  {row['name'][:90]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
