"""What the plan runner records besides the families' own phases: the environment, peak memory,
per-step records, and the profiler trace.

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated`` (the caching allocator's peak of live
tensor bytes, reset after set-up so it covers the steps); on CPU, the process's peak resident set
from ``getrusage`` (``ru_maxrss``, KiB on Linux: getrusage(2)), which includes torch itself and the
Python heap, so it is an upper bound on tensor memory.
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
from dataclasses import asdict
from pathlib import Path

import torch

from executor.strategies.run_context import RunContext
from simulator.run_results import PeakMemoryKind


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(ctx: RunContext) -> dict[str, object]:
    """Software and hardware the run used (as seen by rank 0)."""
    env: dict[str, object] = {"torch": torch.__version__, "python": platform.python_version(),
                              "backend": ctx.backend.value, "device": ctx.device.type, "cpu_model": cpu_model(),
                              "cores": os.cpu_count(), "threads_per_rank": torch.get_num_threads(),
                              "world": ctx.world, "precision": ctx.precision.value}
    if ctx.device.type == "cuda":
        env["gpu_model"] = torch.cuda.get_device_name(ctx.device)
        env["cuda"] = torch.version.cuda
        env |= {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    return env


def reset_peak(ctx: RunContext) -> None:
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)


def peak_memory(ctx: RunContext) -> tuple[int, PeakMemoryKind]:
    """(bytes, what they count) since :func:`reset_peak` (CUDA) or since the process started (CPU)."""
    if ctx.device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(ctx.device)), PeakMemoryKind.CUDA_MAX_ALLOCATED
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, PeakMemoryKind.CPU_MAX_RSS


def model_state_dict(runner) -> dict[str, int]:
    return asdict(runner.model_state_bytes())


def profiler(ctx: RunContext, trace_dir: str | None):
    """A torch.profiler context writing this rank's Chrome trace to ``trace_dir/rank{r}.json`` (or nothing)."""
    if trace_dir is None:
        return contextlib.nullcontext()
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    path = Path(trace_dir) / f"rank{ctx.rank}.json"
    return profile(activities=activities, on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)))
