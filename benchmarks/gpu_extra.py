"""Second-lease GPU measurements (docs/hardware_measured.md, "Second lease"): what the first lease left open.

    python benchmarks/gpu_extra.py --write-shapes          # here (CPU): the MoE grouped-GEMM shapes
    python benchmarks/gpu_extra.py --out DIR [--sections clocks,layout,grouped,longattn]   # on the GPU

Sections:

- ``clocks``: 16384³ and 8192³ BF16 GEMMs back to back for a few seconds each while ``nvidia-smi`` logs
  the SM clock, power draw, temperature and throttle reasons every 50 ms (the first lease saw the large
  squares fall from ~780 to ~695 TFLOP/s and did not log the clocks).
- ``layout``: the GPT-3 1.3B layer GEMMs (16384 tokens, hidden 2048) in the operand layouts autograd
  uses for ``nn.Linear`` (forward ``x·Wᵀ`` with and without bias, data gradient ``dy·W``, weight gradient
  ``dyᵀ·x``) next to ``torch.mm`` on contiguous operands (the first lease's isolated measurement, which
  ran 638-732 TFLOP/s where the real step's same GEMMs ran 791).
- ``grouped``: the experts' GEMMs of the MoE presets at a few expert-parallel degrees, balanced
  routing, as ``torch._grouped_mm`` (ragged rows, as grouped-GEMM MoE layers run them), ``torch.bmm``
  (uniform batch, what the model's batched GEMM describes) and a loop of ``torch.mm`` (one GEMM per
  expert, as eager MoE layers without grouped GEMMs run).
- ``tokens``: whether a token count that is no multiple of 8 slows a linear layer's GEMMs when it is
  never a leading dimension (activations are stored token-major): ``nn.Linear`` forward, data and weight
  gradient through autograd at 16384, 16383, 3276 and 1092 tokens; and a grouped-GEMM MoE layer's
  forward and backward (``torch._grouped_mm`` through autograd) with per-expert rows as the model states
  them and padded to a multiple of 16 (as torchtitan pads them).
- ``cooled``: every 4th shape of the first lease's GEMM table, each timed after 0.3 s of idle, so that the
  card is not at its power cap (the first lease timed them back to back for ~45 s).
- ``duty``: the power cap against the share of GEMM time: 8192³ BF16 GEMMs, each followed by c copies of
  512 MB (memory-bound, c = 0..14), for 3 s per c with ``nvidia-smi`` every 50 ms; per c the GEMMs' share
  of the time, their rate, and the clock and power of the last 2 s.
- ``power``: the power each kernel class draws, from kernels interleaved with idle GPU time
  (``torch.cuda._sleep``, a spin kernel): 8192³ GEMMs, 512 MB copies, causal cuDNN attention (8k
  tokens) and GELU over 64M elements, each at several shares of busy time, 2.5 s per point; per point
  the share, the kernel's time, and the clock and power of the last 1.5 s.
- ``power2``: the same for the GPT-3 1.3B step's own kernels: a layer GEMM (16384 × 2048 by 2048 × 6144),
  the misaligned logits GEMM (16384 × 2048 by 2048 × 50257), autocast's fp32 layer norm over 16384 × 2048,
  and torch's foreach AdamW over 24 tensors of 16M fp32 parameters.
- ``longattn``: causal SDPA (flash and cuDNN) at 32k-128k tokens, head dim 128, 32 heads, batch 1: the
  long-context rows' lengths, beyond the 16k of the first lease's attention table.

Timing is ``gpu_measure.timed`` (CUDA events, median and p10/p90); operands rotate over copies past the L2.
Nothing changes the card's settings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gpu_measure import _copies, environment, timed  # noqa: E402

MOE_SHAPES = Path(__file__).with_name("gpu_moe_shapes.json")
DEVICE = "cuda"
SECTIONS = ("env", "clocks", "layout", "grouped", "longattn", "tokens", "cooled", "duty", "power", "power2")
MOE_CASES = (("mixtral-8x7b", (8, 4)), ("qwen1.5-moe-a2.7b", (12, 4)), ("deepseek-v2-lite", (16, 8)),
             ("deepseek-v3", (64, 32)))
"""(preset, expert-parallel degrees): local experts E/ep from 1 to 8, as the published MoE rows run."""
MOE_TOKENS = 4096
"""Tokens per rank per micro-batch (micro-batch 1 at sequence 4096, the published MoE rows' shape)."""


def write_shapes() -> None:
    """Here (needs the project): each case's expert GEMMs (forward, data and weight gradient) as the
    model states them (:func:`simulator.workload.moe_ops.moe_mlp_kernels`, :func:`ops.backward`)."""
    sys.path.insert(0, str(Path(__file__).parent.parent))
    from simulator.workload.moe_ops import moe_mlp_kernels
    from simulator.workload.ops import backward
    from simulator.workload.presets import get_preset
    shapes = []
    for preset, eps in MOE_CASES:
        spec = get_preset(preset)
        for ep in eps:
            _, mlp, _ = moe_mlp_kernels(spec, MOE_TOKENS, 1, ep, 1.0)
            for kernel, shape in mlp:
                if shape is None or not kernel.name.startswith("experts"):
                    continue
                for k in [kernel, *backward(kernel, shape)]:
                    s = k.shape
                    shapes.append({"preset": preset, "ep": ep, "gemm": k.name, "m": int(s.m), "n": int(s.n),
                                   "k": int(s.k), "batch": int(s.batch)})
    MOE_SHAPES.write_text(json.dumps({"source": "benchmarks/gpu_extra.py --write-shapes", "tokens": MOE_TOKENS,
                                      "shapes": shapes}, indent=0))
    print(f"wrote {len(shapes)} shapes to {MOE_SHAPES}")


def clock_rows(torch, seconds: float = 4.0) -> dict:
    """Per-call times of back-to-back squares, with nvidia-smi's log over the same seconds."""
    query = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu"
    log = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv", "-lms", "50"],
                           stdout=subprocess.PIPE, text=True)
    out = {"calls": {}}
    try:
        time.sleep(0.5)
        for n in (16384, 8192):
            a, b = (torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
            torch.mm(a, b); torch.cuda.synchronize()
            t_start, rows = time.time(), []
            while time.time() - t_start < seconds:
                ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(20)]
                t0 = time.time()
                for s, e in ev:
                    s.record(); torch.mm(a, b); e.record()
                torch.cuda.synchronize()
                rows += [[round(t0 - t_start, 3), round(s.elapsed_time(e) * 1e3, 1)] for s, e in ev]
            out["calls"][str(n)] = {"flops": 2.0 * n**3, "t_s_and_us": rows}
            del a, b
            time.sleep(1.0)
    finally:
        log.terminate()
        out["nvidia_smi_csv"] = log.communicate(timeout=10)[0]
        out["performance_after"] = subprocess.run(["nvidia-smi", "-q", "-d", "PERFORMANCE"], capture_output=True,
                                                  text=True, timeout=30).stdout
    return out


def layout_rows(torch) -> list[dict]:
    """nn.Linear's three GEMMs per layer in autograd's layouts, against torch.mm on contiguous operands."""
    import torch.nn.functional as F
    T, rows = 16384, []
    for d_in, d_out in ((2048, 6144), (2048, 2048), (2048, 8192), (8192, 2048)):
        c = _copies(2 * (T * d_in + d_in * d_out))
        x = [torch.randn(T, d_in, device=DEVICE, dtype=torch.bfloat16) for _ in range(c)]
        w = [torch.randn(d_out, d_in, device=DEVICE, dtype=torch.bfloat16) for _ in range(c)]
        wt = [t.t().contiguous() for t in w]
        dy = [torch.randn(T, d_out, device=DEVICE, dtype=torch.bfloat16) for _ in range(c)]
        bias = torch.randn(d_out, device=DEVICE, dtype=torch.bfloat16)
        cases = {"fwd mm(x, Wt) contiguous": (lambda i: torch.mm(x[i], wt[i]), T, d_out, d_in),
                 "fwd linear(x, W)": (lambda i: F.linear(x[i], w[i]), T, d_out, d_in),
                 "fwd linear(x, W, b)": (lambda i: F.linear(x[i], w[i], bias), T, d_out, d_in),
                 "dgrad mm(dy, W)": (lambda i: torch.mm(dy[i], w[i]), T, d_in, d_out),
                 "wgrad mm(dy.t(), x)": (lambda i: torch.mm(dy[i].t(), x[i]), d_out, d_in, T),
                 "wgrad mm contiguous": (lambda i, dyt=[t.t().contiguous() for t in dy]: torch.mm(dyt[i], x[i]),
                                         d_out, d_in, T)}
        for name, (fn, m, n, k) in cases.items():
            turn = iter(range(10**9))
            r = timed(torch, lambda: fn(next(turn) % c), budget_s=0.1)
            rows.append({"layer": f"{d_in}->{d_out}", "case": name, "m": m, "n": n, "k": k, **r,
                         "tflops": 2.0 * m * n * k / r["median_s"] / 1e12})
        x = w = wt = dy = None  # frees the GPU memory the timed lambdas' cells hold, as del did
        torch.cuda.empty_cache()
    return rows


def grouped_rows(torch) -> list[dict]:
    """Each MoE shape as torch._grouped_mm (ragged), torch.bmm (uniform) and a loop of torch.mm."""
    rows = []
    for s in json.loads(MOE_SHAPES.read_text())["shapes"]:
        m, n, k, g = s["m"], s["n"], s["k"], s["batch"]
        row = dict(s)
        try:
            c = _copies(2 * g * (m * k + k * n))
            a3 = [torch.randn(g, m, k, device=DEVICE, dtype=torch.bfloat16) for _ in range(c)]
            b3 = [torch.randn(g, k, n, device=DEVICE, dtype=torch.bfloat16) for _ in range(c)]
            bt = [t.transpose(-2, -1).contiguous().transpose(-2, -1) for t in b3]  # column-major, as _grouped_mm wants
            a2 = [t.reshape(g * m, k) for t in a3]
            offs = torch.arange(1, g + 1, device=DEVICE, dtype=torch.int32) * m
            if s["gemm"].endswith(".wgrad"):  # ragged K: xᵀ (m × g·k, row-major) by dy (g·k × n, column-major)
                xt = [t.transpose(0, 1).reshape(m, g * k) for t in a3]
                dy = [t.reshape(g * k, n).t().contiguous().t() for t in b3]
                offs_k = torch.arange(1, g + 1, device=DEVICE, dtype=torch.int32) * k
                grouped = lambda i: torch._grouped_mm(xt[i], dy[i], offs=offs_k)
            else:  # ragged M: tokens (g·m × k) by the experts' weights (g × k × n)
                grouped = lambda i: torch._grouped_mm(a2[i], bt[i], offs=offs)
            calls = {"grouped_mm": grouped,
                     "bmm": lambda i: torch.bmm(a3[i], b3[i]),
                     "mm_loop": lambda i: [torch.mm(a3[i][j], b3[i][j]) for j in range(g)]}
            for name, fn in calls.items():
                try:
                    turn = iter(range(10**9))
                    r = timed(torch, lambda: fn(next(turn) % c), budget_s=0.05)
                    row[name] = {**r, "tflops": 2.0 * g * m * n * k / r["median_s"] / 1e12}
                except Exception as e:
                    row[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
            a3 = b3 = bt = a2 = None  # frees the GPU memory the timed lambdas' cells hold, as del did
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:200]
        rows.append(row)
        torch.cuda.empty_cache()
    return rows


def longattn_rows(torch) -> list[dict]:
    """Causal SDPA, batch 1, 32 heads of 128, at 32k-128k tokens; FLOPs as flash-attention counts them."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows, heads, d = [], 32, 128
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        for s in (32768, 65536, 131072):
            row = {"backend": backend.name, "head_dim": d, "causal": True, "seq": s, "batch": 1, "heads": heads}
            try:
                q, k, v = (torch.randn(1, heads, s, d, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                grad = torch.randn(1, heads, s, d, device=DEVICE, dtype=torch.bfloat16)
                with sdpa_kernel(backend):
                    fwd = timed(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                budget_s=0.5, min_reps=3, max_reps=8)
                    def both():
                        q.grad = k.grad = v.grad = None
                        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
                    full = timed(torch, both, budget_s=1.0, min_reps=3, max_reps=8)
                f = 4.0 * s * s * heads * d * 0.5
                bwd_s = max(full["median_s"] - fwd["median_s"], 1e-9)
                row.update(fwd=fwd, fwd_bwd=full, fwd_tflops=f / fwd["median_s"] / 1e12,
                           bwd_tflops=2.5 * f / bwd_s / 1e12)
                q = k = v = grad = None  # frees the GPU memory the timed closures' cells hold, as del did
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
            torch.cuda.empty_cache()
    return rows


def _fwd_bwd(torch, fwd, inputs, grad) -> tuple[dict, dict]:
    """CUDA-event times of ``fwd()`` alone and of forward + backward through autograd."""
    def both():
        for t in inputs:
            t.grad = None
        fwd().backward(grad)
    return timed(torch, fwd, budget_s=0.1), timed(torch, both, budget_s=0.2)


def token_rows(torch) -> list[dict]:
    """Linear layers and a grouped-GEMM MoE layer at token counts that are and are not multiples of 8."""
    import torch.nn.functional as F
    rows, h, f = [], 2048, 2816
    for T in (16384, 16383, 3276, 1092):
        x = torch.randn(T, h, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(f, h, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
        fwd, both = _fwd_bwd(torch, lambda: F.linear(x, w), (x, w), torch.randn(T, f, device=DEVICE, dtype=torch.bfloat16))
        flops = 2.0 * T * h * f
        rows.append({"what": "linear", "tokens": T, "fwd": fwd, "fwd_bwd": both, "fwd_tflops": flops / fwd["median_s"] / 1e12,
                     "bwd_tflops": 2 * flops / max(both["median_s"] - fwd["median_s"], 1e-9) / 1e12})
    for experts, m in ((15, 1092), (15, 1104), (5, 3276), (5, 3280)):
        a = torch.randn(experts * m, h, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
        b = torch.randn(experts, f, h, device=DEVICE, dtype=torch.bfloat16).transpose(-2, -1).requires_grad_(True)
        offs = torch.arange(1, experts + 1, device=DEVICE, dtype=torch.int32) * m
        row = {"what": "grouped_mm", "experts": experts, "rows_per_expert": m}
        try:
            fwd, both = _fwd_bwd(torch, lambda: torch._grouped_mm(a, b, offs=offs), (a, b),
                                 torch.randn(experts * m, f, device=DEVICE, dtype=torch.bfloat16))
            flops = 2.0 * experts * m * h * f
            row.update(fwd=fwd, fwd_bwd=both, fwd_tflops=flops / fwd["median_s"] / 1e12,
                       bwd_tflops=2 * flops / max(both["median_s"] - fwd["median_s"], 1e-9) / 1e12)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        rows.append(row)
    return rows


def cooled_rows(torch) -> list[dict]:
    """Every 4th table shape of ``gpu_gemm_shapes.json``, each after 0.3 s of idle (module docstring)."""
    from gpu_measure import SHAPES, gemm_rows
    rows = []
    for s in json.loads(SHAPES.read_text())["shapes"][::4]:
        torch.cuda.synchronize()
        time.sleep(0.3)
        rows += gemm_rows(torch, [s], fp8=False)
    return rows


def duty_rows(torch, seconds: float = 3.0) -> list[dict]:
    """GEMM rate, clock and power against the GEMMs' share of the time (module docstring)."""
    n = 8192
    a, b = (torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    src = torch.randn(2**28, device=DEVICE, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    rows = []
    for copies in (0, 1, 2, 3, 4, 6, 9, 14):
        query = "timestamp,clocks.sm,power.draw,temperature.gpu"
        log = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader", "-lms", "50"],
                               stdout=subprocess.PIPE, text=True)
        gemm_ms, total_ms, t0 = [], [], time.time()
        try:
            while time.time() - t0 < seconds:
                ev = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(10)]
                for e0, e1, e2 in ev:
                    e0.record(); torch.mm(a, b); e1.record()
                    for _ in range(copies):
                        dst.copy_(src)
                    e2.record()
                torch.cuda.synchronize()
                if time.time() - t0 > 1.0:  # the last seconds only: the power has settled
                    gemm_ms += [e0.elapsed_time(e1) for e0, e1, _ in ev]
                    total_ms += [e0.elapsed_time(e2) for e0, _, e2 in ev]
        finally:
            log.terminate()
            smi = log.communicate(timeout=10)[0]
        cells = [ln.split(",") for ln in smi.strip().splitlines()[-int((seconds - 1.0) / 0.05):]]
        clock = [float(c[1].split()[0]) for c in cells if len(c) > 2]
        watts = [float(c[2].split()[0]) for c in cells if len(c) > 2]
        rows.append({"copies": copies, "gemm_share": sum(gemm_ms) / sum(total_ms),
                     "gemm_tflops": 2.0 * n**3 / (statistics.median(gemm_ms) * 1e-3) / 1e12,
                     "copy_GBps": (2 * src.numel() * 2 * copies / ((statistics.median(total_ms) - statistics.median(gemm_ms)) * 1e-3) / 1e9) if copies else None,
                     "sm_clock_MHz": statistics.median(clock), "power_W": statistics.median(watts),
                     "iterations": len(gemm_ms), "smi": smi})
        time.sleep(1.0)
    return rows


def _interleaved(torch, fn, sleep_cycles: int, seconds: float = 2.5) -> dict:
    """``fn`` then a spin of ``sleep_cycles`` GPU cycles, repeated; share, kernel time, clock and power."""
    log = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    busy, total, t0 = [], [], time.time()
    try:
        while time.time() - t0 < seconds:
            ev = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(10)]
            for e0, e1, e2 in ev:
                e0.record(); fn(); e1.record()
                if sleep_cycles:
                    torch.cuda._sleep(sleep_cycles)
                e2.record()
            torch.cuda.synchronize()
            if time.time() - t0 > 1.0:
                busy += [e0.elapsed_time(e1) for e0, e1, _ in ev]
                total += [e0.elapsed_time(e2) for e0, _, e2 in ev]
    finally:
        log.terminate()
        smi = log.communicate(timeout=10)[0]
    cells = [c for c in (ln.split(",") for ln in smi.strip().splitlines()[-int((seconds - 1.0) / 0.05):]) if len(c) > 2]
    return {"sleep_cycles": sleep_cycles, "busy_share": sum(busy) / sum(total), "kernel_ms": statistics.median(busy),
            "sm_clock_MHz": statistics.median(float(c[1].split()[0]) for c in cells),
            "power_W": statistics.median(float(c[2].split()[0]) for c in cells), "smi": smi}


def power_rows(torch) -> list[dict]:
    """Each kernel class at several busy shares (module docstring); the spin alone as the idle point."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    a, b = (torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    src = torch.randn(2**28, device=DEVICE, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    q, k, v = (torch.randn(2, 32, 8192, 128, device=DEVICE, dtype=torch.bfloat16) for _ in range(3))
    g = torch.randn(2**26, device=DEVICE, dtype=torch.bfloat16)

    def attention():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    kernels = {"gemm 8192^3": (lambda: torch.mm(a, b), (0, 1, 2, 4)), "copy 512 MB": (lambda: dst.copy_(src), (0, 1, 2)),
               "cudnn attention causal 8k": (attention, (0, 1, 2)), "gelu 64M": (lambda: F.gelu(g), (0, 2))}
    rows = [{"kernel": "spin only", **_interleaved(torch, lambda: None, 2_000_000)}]
    for name, (fn, ratios) in kernels.items():
        try:
            fn(); torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(); fn(); end.record(); torch.cuda.synchronize()
            cycles = int(start.elapsed_time(end) * 1e-3 * 1.98e9)  # one kernel's time in cycles at the max clock
            for r in ratios:
                rows.append({"kernel": name, "idle_per_busy": r, **_interleaved(torch, fn, r * cycles)})
                time.sleep(0.5)
        except Exception as e:  # one class's failure is recorded, the others still run
            rows.append({"kernel": name, "error": f"{type(e).__name__}: {e}"[:300]})
    return rows


def power2_rows(torch) -> list[dict]:
    """The 1.3B step's kernel classes at busy shares 1 and 1/2 (module docstring)."""
    import torch.nn.functional as F
    x = torch.randn(16384, 2048, device=DEVICE, dtype=torch.bfloat16)
    w, logits_w = (torch.randn(n, 2048, device=DEVICE, dtype=torch.bfloat16) for n in (6144, 50257))
    xf = torch.randn(16384, 2048, device=DEVICE)
    params = [torch.randn(2**24, device=DEVICE, requires_grad=True) for _ in range(24)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4)
    kernels = {"layer gemm 16384x6144x2048": lambda: F.linear(x, w), "logits gemm 16384x50257x2048": lambda: F.linear(x, logits_w),
               "fp32 layer_norm 16384x2048": lambda: F.layer_norm(xf, (2048,)), "foreach AdamW 24 x 16M": opt.step}
    rows = []
    for name, fn in kernels.items():
        try:
            fn(); torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(); fn(); end.record(); torch.cuda.synchronize()
            cycles = int(start.elapsed_time(end) * 1e-3 * 1.98e9)
            for r in (0, 1):
                rows.append({"kernel": name, "idle_per_busy": r, **_interleaved(torch, fn, r * cycles)})
                time.sleep(0.5)
        except Exception as e:
            rows.append({"kernel": name, "error": f"{type(e).__name__}: {e}"[:300]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-shapes", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--sections", default="env,clocks,layout,grouped,longattn")
    ap.add_argument("--tag", default="", help="results go to DIR/gpu_extra-TAG.json (default DIR/gpu_extra.json)")
    args = ap.parse_args(argv)
    if args.write_shapes:
        write_shapes()
        return 0
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if args.out is None or unknown:
        print("gpu_extra: " + ("--out DIR is required" if args.out is None else
              f"--sections: unknown {', '.join(sorted(unknown))}; choose from {','.join(SECTIONS)}"), file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("gpu_extra: no CUDA device", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = {"env": lambda: environment(torch), "clocks": lambda: clock_rows(torch),
            "layout": lambda: layout_rows(torch), "grouped": lambda: grouped_rows(torch),
            "longattn": lambda: longattn_rows(torch), "tokens": lambda: token_rows(torch),
            "cooled": lambda: cooled_rows(torch), "duty": lambda: duty_rows(torch),
            "power": lambda: power_rows(torch), "power2": lambda: power2_rows(torch)}
    result: dict = {}
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        try:
            result[name] = jobs[name]()
        except Exception:
            result[name] = {"error": traceback.format_exc()[-2000:]}
        print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
        (args.out / f"gpu_extra{'-' + args.tag if args.tag else ''}.json").write_text(json.dumps(result, indent=1))
    for r in result.get("layout", []) if isinstance(result.get("layout"), list) else []:
        print(f"layout {r['layer']} {r['case']}: {r['tflops']:.0f} TFLOP/s")
    for r in result.get("grouped", []) if isinstance(result.get("grouped"), list) else []:
        cells = [f"{k} {r[k]['tflops']:.0f}" for k in ("grouped_mm", "bmm", "mm_loop") if "tflops" in r.get(k, {})]
        print(f"grouped {r['preset']} ep{r['ep']} {r['gemm']} {r['batch']}x{r['m']}x{r['n']}x{r['k']}: {', '.join(cells)}")
    for r in result.get("tokens", []) if isinstance(result.get("tokens"), list) else []:
        if "fwd_tflops" in r:
            print(f"tokens {r}"[:60], f"fwd {r['fwd_tflops']:.0f} bwd {r['bwd_tflops']:.0f} TFLOP/s")
    for r in result.get("duty", []) if isinstance(result.get("duty"), list) else []:
        print(f"duty copies {r['copies']}: GEMM share {r['gemm_share']:.2f}, {r['gemm_tflops']:.0f} TFLOP/s, "
              f"{r['sm_clock_MHz']:.0f} MHz, {r['power_W']:.0f} W")
    for r in [*result.get("power", []), *result.get("power2", [])] if isinstance(result.get("power", []), list) \
            and isinstance(result.get("power2", []), list) else []:
        if "error" in r:
            print(f"power {r['kernel']}: {r['error']}")
            continue
        print(f"power {r['kernel']} idle/busy {r.get('idle_per_busy', '-')}: busy {r['busy_share']:.2f}, "
              f"{r['kernel_ms']:.3f} ms, {r['sm_clock_MHz']:.0f} MHz, {r['power_W']:.0f} W")
    for r in result.get("longattn", []) if isinstance(result.get("longattn"), list) else []:
        if "fwd_tflops" in r:
            print(f"longattn {r['backend']} s{r['seq']}: fwd {r['fwd_tflops']:.0f} bwd {r['bwd_tflops']:.0f} TFLOP/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
