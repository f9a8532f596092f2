"""Measure what the localhost-cpu preset's device and host figures stand for, on this machine.

Each "GPU" of the localhost-cpu preset is one CPU process on one core, so everything runs on one
thread (``torch.set_num_threads(1)``) and reports the best of 5 repetitions (other processes on a
shared machine only slow a run down):

- fp32 matmul throughput of square n×n GEMMs, n = 64 … 2048, as FLOP/s and as efficiency over the
  preset's fp32 peak (the points of ``device.gemm_efficiency``);
- a 256 MB tensor copy: bytes read + written per second (``device.hbm_bw_GBps``);
- ``torch.optim.Adam.step`` over 10 M fp32 parameters: parameters per second (``host.cpu_adam_params_per_s``).

Storage read and write bandwidth come from ``dd`` with O_DIRECT (no page cache); run them yourself:
``dd if=/dev/urandom of=F bs=1M count=1024 conv=fsync; dd if=F of=/dev/null bs=4M iflag=direct;
dd if=/dev/zero of=F bs=4M count=256 oflag=direct``.

``trainplan calibrate --compute`` measures the same quantities (and the per-kernel overhead) the way
the executor runs them and writes them into a cluster file (docs/calibration.md, "Calibrating compute").

Usage: ``python benchmarks/cpu_probe.py [--peak-tflops 0.078]``. Results and dates: docs/sources.md,
entry ``own-cpu-probe``.
"""

from __future__ import annotations

import argparse
import time


def _best(fn, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak-tflops", type=float, default=0.078, help="fp32 peak the efficiencies are over")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for n in (64, 128, 256, 512, 1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        reps = max(3, int(2e9 / (2 * n ** 3)))
        t = _best(lambda: [a @ b for _ in range(reps)]) / reps
        flops = 2.0 * n ** 3
        print(f"matmul n={n}: {flops:.3e} FLOPs, {t * 1e6:.1f} us, {flops / t / 1e9:.2f} GFLOP/s, "
              f"efficiency {flops / t / (args.peak_tflops * 1e12):.3f}")
    src = torch.ones(64_000_000)
    dst = torch.empty_like(src)
    t = _best(lambda: dst.copy_(src))
    print(f"copy 256 MB: {t * 1e3:.1f} ms, {2 * src.numel() * 4 / t / 1e9:.2f} GB/s read + written")
    p = torch.nn.Parameter(torch.randn(10_000_000))
    p.grad = torch.randn_like(p)
    opt = torch.optim.Adam([p], lr=1e-3)
    opt.step()
    t = _best(opt.step)
    print(f"Adam step 1e7 params: {t * 1e3:.1f} ms, {1e7 / t:.3e} params/s")


if __name__ == "__main__":
    main()
