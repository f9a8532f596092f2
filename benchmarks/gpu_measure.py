"""Measure an NVIDIA GPU's compute for trainplan's device model: GEMMs by shape (BF16 and FP8), fused
attention by backend, memory-bound kernels' achieved bandwidth and per-kernel host time.

    python benchmarks/gpu_measure.py --write-shapes      # here (CPU): the GEMM shapes the table's runs use
    python benchmarks/gpu_measure.py --out DIR [--quick] # on the GPU: writes DIR/gpu_measure-TAG.json

The GEMM shapes are every distinct (m, n, k, batch) that :func:`executor.calibrate_compute.run_shapes`
gives for the rows of ``benchmarks/published_runs.yaml`` (forward and backward, at each row's micro-batch,
sequence and tp), kept when its operands and output fit in 12 GB and it is under 30 TFLOP, plus squares.
They are written to ``benchmarks/gpu_gemm_shapes.json`` so that the GPU side needs torch only.

Timing (docs/hardware_measured.md): each call is bracketed by CUDA events on the current stream, after
warm-up calls; the median and the 10th/90th percentiles of the per-call times are kept. Operands are
drawn from ``randn`` (never zeros, which run faster) and rotated over enough copies to exceed the L2
(60 MB on an H200), so that small GEMMs are not timed from the cache. Nothing here changes the card's
settings; the clocks and power limit are only read (``nvidia-smi --query-gpu``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

SHAPES = Path(__file__).with_name("gpu_gemm_shapes.json")
SQUARES = (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
MAX_BYTES, MAX_FLOPS = 12e9, 30e12
SECTIONS = ("env", "gemm", "fp8", "align", "attention", "memory", "host")
ROTATE_BYTES = 256e6
"""Operands are rotated over copies until their total passes this (several times a 60 MB L2)."""


def write_shapes() -> None:
    """Here (needs the project): the published rows' GEMM shapes, with the rows that use each."""
    sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]
    import validate_published as vp
    from executor.calibrate_compute import run_shapes
    rows: dict[tuple, list[str]] = {}
    for run in vp.load_runs():
        if run.unsupported:
            continue
        st = run.strategy
        for s in run_shapes(vp.workload_of(run), st.get("micro_batch", 1), st.get("tp", 1)):
            key = (int(s.m), int(s.n), int(s.k), int(s.batch))
            rows.setdefault(key, []).append(run.id)
    kept = [{"m": m, "n": n, "k": k, "batch": b, "rows": ids[:3]} for (m, n, k, b), ids in rows.items()
            if 2 * b * (m * k + k * n + m * n) <= MAX_BYTES and 2 * b * m * n * k <= MAX_FLOPS]
    SHAPES.write_text(json.dumps({"source": "benchmarks/gpu_measure.py --write-shapes", "shapes": kept}, indent=0))
    print(f"wrote {len(kept)} shapes of {len(rows)} to {SHAPES}")


def timed(torch, fn, *, budget_s: float = 0.15, min_reps: int = 5, max_reps: int = 40) -> dict:
    """Per-call GPU time by CUDA events: warm-up, then reps sized to ``budget_s``; median, p10, p90."""
    fn(); fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); fn(); end.record(); torch.cuda.synchronize()
    estimate_s = max(start.elapsed_time(end) / 1e3, 1e-6)
    reps = int(min(max_reps, max(min_reps, budget_s / estimate_s)))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in events:
        a.record(); fn(); b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) / 1e3 for a, b in events)
    pick = lambda q: t[min(len(t) - 1, int(q * (len(t) - 1) + 0.5))]
    return {"median_s": statistics.median(t), "p10_s": pick(0.1), "p90_s": pick(0.9), "reps": reps}


def _copies(nbytes: float) -> int:
    return int(min(8, max(1, math.ceil(ROTATE_BYTES / max(nbytes, 1)))))


def gemm_rows(torch, shapes: list[dict], fp8: bool) -> list[dict]:
    """``torch.mm``/``bmm`` in bf16, or ``torch._scaled_mm`` e4m3 × e4m3 → bf16 (per-tensor scales)."""
    rows = []
    for s in shapes:
        m, n, k, b = s["m"], s["n"], s["k"], s["batch"]
        if fp8 and (b > 1 or k % 16 or n % 16):
            continue
        try:
            esize = 1 if fp8 else 2
            copies = _copies(esize * b * (m * k + k * n))
            shape_a, shape_b = ((b, m, k), (b, k, n)) if b > 1 else ((m, k), (k, n))
            a = [torch.randn(shape_a, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
            if fp8:
                a = [x.to(torch.float8_e4m3fn) for x in a]
                bt = [torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t() for _ in range(copies)]
                one = torch.ones((), device="cuda")
                calls = [lambda x=x, y=y: torch._scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                         for x, y in zip(a, bt)]
            else:
                bb = [torch.randn(shape_b, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
                op = torch.bmm if b > 1 else torch.mm
                calls = [lambda x=x, y=y: op(x, y) for x, y in zip(a, bb)]
            turn = iter(range(10**9))
            r = timed(torch, lambda: calls[next(turn) % copies](), budget_s=0.06)
            flops = 2.0 * b * m * n * k
            rows.append({**{key: s[key] for key in ("m", "n", "k", "batch")}, **r,
                         "tflops": flops / r["median_s"] / 1e12, "rows": s.get("rows", [])})
            a = calls = None  # frees the GPU memory the timed lambda's cell holds, as del did
        except Exception as e:  # one shape's failure (memory, a layout _scaled_mm refuses) is recorded
            rows.append({**{key: s[key] for key in ("m", "n", "k", "batch")}, "error": f"{type(e).__name__}: {e}"[:300]})
        torch.cuda.empty_cache()
    return rows


def alignment_shapes() -> list[dict]:
    """The three logits GEMMs of a 16384-token micro-batch at hidden 2048 (forward T×V×h, data gradient
    T×h×V, weight gradient V×h×T) for vocabularies of each alignment class: 50257 (odd, 2 bytes in bf16),
    50258 (4 bytes), 50260 (8 bytes), 50264 and 50304 (16 bytes)."""
    T, h = 16384, 2048
    return [{"m": m, "n": n, "k": k, "batch": 1, "rows": [f"vocab {v}"]}
            for v in (50257, 50258, 50260, 50264, 50304) for m, n, k in ((T, v, h), (T, h, v), (v, h, T))]


def attention_rows(torch) -> list[dict]:
    """SDPA by backend, the FA2/FA3 papers' benchmark setup: 16k tokens, hidden 2048, bf16; forward and
    forward+backward; FLOPs as flash-attention's benchmark counts them (fwd 4·b·s²·a·d, ½ causal)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        for d in (64, 128):
            for causal in (False, True):
                for s in (512, 1024, 2048, 4096, 8192, 16384):
                    b, heads = 16384 // s, 2048 // d
                    row = {"backend": backend.name, "head_dim": d, "causal": causal, "seq": s, "batch": b, "heads": heads}
                    try:
                        q, k, v = (torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                                   for _ in range(3))
                        grad = torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16)
                        with sdpa_kernel(backend):
                            fwd = timed(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                            def both():
                                q.grad = k.grad = v.grad = None
                                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                                out.backward(grad)
                            full = timed(torch, both)
                        f = 4.0 * b * s * s * heads * d * (0.5 if causal else 1.0)
                        bwd_s = max(full["median_s"] - fwd["median_s"], 1e-9)
                        row.update(fwd=fwd, fwd_bwd=full, fwd_tflops=f / fwd["median_s"] / 1e12,
                                   bwd_tflops=2.5 * f / bwd_s / 1e12)
                    except Exception as e:
                        row["error"] = f"{type(e).__name__}: {e}"[:300]
                    rows.append(row)
                    torch.cuda.empty_cache()
    return rows


def memory_rows(torch, elements: int, width: int) -> list[dict]:
    """Memory-bound kernels over ``elements`` bf16 values in rows of ``width``; bytes as the model counts."""
    import torch.nn.functional as F
    x = torch.randn(elements // width, width, device="cuda", dtype=torch.bfloat16)
    y = torch.randn_like(x)
    xf = x.float()
    e = 2
    kernels = {
        "copy": (lambda: x.clone(), 2 * e), "add": (lambda: x + y, 3 * e),
        "layer_norm": (lambda: F.layer_norm(x, (width,)), 2 * e), "rms_norm": (lambda: F.rms_norm(x, (width,)), 2 * e),
        "softmax": (lambda: torch.softmax(x, dim=-1), 2 * e), "gelu": (lambda: F.gelu(x), 2 * e),
        "gelu_tanh": (lambda: F.gelu(x, approximate="tanh"), 2 * e),
        "swiglu_eager": (lambda: F.silu(x) * y, 3 * e), "dropout": (lambda: torch.native_dropout(x, 0.1, True), 2 * e + 1),
        # mixed formats: the TensorIterator casts inside the kernel [src: torch-cudaloops-dynamic-cast] (dynamic casting:
        # launch_unrolled_kernel, no vectorised loads), as autocast's gradient casts and fp32 residual adds run
        "cast_bf16_fp32": (lambda: x.float(), e + 4), "cast_fp32_bf16": (lambda: xf.to(torch.bfloat16), 4 + e),
        "add_fp32_bf16": (lambda: xf + x, 4 + e + 4), "add_fp32": (lambda: xf + xf, 12),
    }
    rows = []
    for name, (fn, per_element) in kernels.items():
        r = timed(torch, fn)
        rows.append({"kernel": name, "elements": elements, "width": width, "model_bytes": per_element * elements,
                     **r, "GBps": per_element * elements / r["median_s"] / 1e9})
    for fused in ("fused", "foreach"):  # AdamW on fp32 parameters with fp32 gradients, 8 tensors
        params = [torch.nn.Parameter(torch.randn(elements // 32, device="cuda")) for _ in range(8)]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=1e-4, **{fused: True})
        r = timed(torch, opt.step)
        rows.append({"kernel": f"adamw_{fused}", "elements": elements // 4, "dtype": "fp32 param+grad+m+v", **r})
        del params, opt
    return rows


def host_rows(torch) -> list[dict]:
    """Host time per eager kernel launch (tiny adds, back to back, wall clock) and the GPU's time per
    tiny kernel replayed from a CUDA graph."""
    a = torch.randn(256, device="cuda")
    for _ in range(100):
        a.add_(1.0)
    torch.cuda.synchronize()
    rows = []
    for n in (1000, 10000):
        t0 = time.perf_counter()
        for _ in range(n):
            a.add_(1.0)
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
        rows.append({"what": "eager add_ launch", "launches": n, "host_us_per_launch": host / n * 1e6,
                     "wall_us_per_launch": total / n * 1e6})
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(1000):
            a.add_(1.0)
    torch.cuda.synchronize()
    r = timed(torch, g.replay)
    rows.append({"what": "graph of 1000 tiny adds", "gpu_us_per_kernel": r["median_s"] / 1000 * 1e6, **r})
    return rows


def environment(torch) -> dict:
    p = torch.cuda.get_device_properties(0)
    env = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "torch": torch.__version__,
           "cuda": torch.version.cuda, "gpu": p.name, "sm_count": p.multi_processor_count,
           "memory_GiB": p.total_memory / 2**30, "cudnn": torch.backends.cudnn.version()}
    query = "clocks.sm,clocks.max.sm,clocks.mem,power.limit,power.default_limit,temperature.gpu,driver_version"
    try:
        env["nvidia_smi"] = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"],
                                           capture_output=True, text=True, timeout=30).stdout
    except Exception as e:
        env["nvidia_smi"] = repr(e)
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-shapes", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--quick", action="store_true", help="squares and 20 table shapes only")
    ap.add_argument("--sections", default="env,gemm,fp8,attention,memory,host")
    ap.add_argument("--tag", default="all", help="results go to DIR/gpu_measure-TAG.json")
    args = ap.parse_args(argv)
    if args.write_shapes:
        write_shapes()
        return 0
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if args.out is None or unknown:
        ap.error("--out DIR is required" if args.out is None else
                 f"--sections: unknown {', '.join(sorted(unknown))}; choose from {','.join(SECTIONS)}")
    import torch
    if not torch.cuda.is_available():
        print("gpu_measure: no CUDA device", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    table = json.loads(SHAPES.read_text())["shapes"]
    shapes = [{"m": n, "n": n, "k": n, "batch": 1, "rows": ["square"]} for n in SQUARES] + \
        (table[:20] if args.quick else table)
    result: dict = {}
    jobs = {"env": lambda: environment(torch), "gemm": lambda: gemm_rows(torch, shapes, fp8=False),
            "fp8": lambda: gemm_rows(torch, shapes, fp8=True),
            "align": lambda: gemm_rows(torch, alignment_shapes(), fp8=False), "attention": lambda: attention_rows(torch),
            "memory": lambda: memory_rows(torch, 2**28, 4096), "host": lambda: host_rows(torch)}
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        try:
            result[name] = jobs[name]()
        except Exception:
            result[name] = {"error": traceback.format_exc()[-2000:]}
        print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
        (args.out / f"gpu_measure-{args.tag}.json").write_text(json.dumps(result, indent=1))
    _summary(result)
    return 0


def _summary(result: dict) -> None:
    for r in result.get("align", []) if isinstance(result.get("align"), list) else []:
        if "tflops" in r:
            print(f"align {r['rows'][0]} {r['m']}x{r['n']}x{r['k']}: {r['tflops']:.0f} TFLOP/s")
    for name in ("gemm", "fp8"):
        rows = [r for r in result.get(name, []) if isinstance(r, dict) and "tflops" in r]
        if rows:
            sq = {r["m"]: round(r["tflops"]) for r in rows if r["rows"] == ["square"]}
            print(f"{name}: {len(rows)} shapes; squares TFLOP/s {sq}")
    for r in result.get("attention", []) if isinstance(result.get("attention"), list) else []:
        if "fwd_tflops" in r and r["seq"] in (2048, 16384):
            print(f"attn {r['backend']} d{r['head_dim']} causal={r['causal']} s{r['seq']}: "
                  f"fwd {r['fwd_tflops']:.0f} bwd {r['bwd_tflops']:.0f} TFLOP/s")
    for r in result.get("memory", []) if isinstance(result.get("memory"), list) else []:
        print(f"mem {r['kernel']}: {r['median_s'] * 1e6:.0f} us" + (f", {r['GBps']:.0f} GB/s" if "GBps" in r else ""))


if __name__ == "__main__":
    raise SystemExit(main())
