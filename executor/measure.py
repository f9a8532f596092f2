"""What the plan runner records besides the families' own phases: the environment, peak memory,
per-step records, and the profiler trace.

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated`` (the caching allocator's peak of live
tensor bytes, reset after set-up so it covers the steps). On CPU, the same quantity from the CPU
allocator's allocation and free events: ``torch.profiler`` with ``profile_memory=True`` records each
allocation (+bytes) and free (-bytes) of torch's CPU allocator; summed in time order from a window that
opens before the family builds its model and closes after the warm-up steps (:class:`AllocationWindow`),
their running total is the live tensor bytes, and its largest value the peak allocated bytes
(:func:`live_peak`). The profiler's per-operator bookkeeping slows the steps it covers, so the window
holds only the warm-up steps, which the statistics leave out; with no warm-up step, or with ``--trace``
(whose profiler covers every step, and profilers do not nest), no allocated peak is measured. The
process's peak resident set from ``getrusage`` (``ru_maxrss``, KiB on Linux: getrusage(2)), which also
holds torch itself and the Python heap, is recorded beside it (``peak_rss_bytes``) and stands in for it
when the window did not run.
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


def live_peak(prof) -> tuple[int, int]:
    """(peak, final) of the CPU allocator's live bytes over a profiled window, relative to its start: the
    allocation events' sizes (+ on allocation, - on free) summed in time order."""
    from torch._C._profiler import _EventType

    allocations, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.typed[0] == _EventType.Allocation and event.typed[1].device.type == "cpu":
            allocations.append((event.start_time_ns, event.typed[1].alloc_size))
        stack.extend(event.children)
    live = peak = 0
    for _, size in sorted(allocations):
        live += size
        peak = max(peak, live)
    return peak, live


class AllocationWindow:
    """The CPU allocator's peak live bytes from :meth:`open` to :meth:`close` (module docstring); a CUDA run,
    a run without warm-up steps and a traced run open none (``peak_bytes`` stays None)."""

    def __init__(self, ctx: RunContext, warmup: int, traced: bool):
        self.wanted = ctx.device.type == "cpu" and warmup > 0 and not traced
        self.prof = None
        self.peak_bytes: int | None = None

    def open(self) -> None:
        if self.wanted:
            from torch.profiler import ProfilerActivity, profile

            self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self.prof.__enter__()

    def close(self) -> None:
        if self.prof is not None:
            self.prof.__exit__(None, None, None)
            self.peak_bytes = live_peak(self.prof)[0]
            self.prof = None


def peak_rss_bytes() -> int:
    """The process's peak resident set so far (``ru_maxrss`` is KiB on Linux: getrusage(2))."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_memory(ctx: RunContext, window: AllocationWindow, rss_bytes: int | None = None) -> tuple[int, PeakMemoryKind]:
    """(bytes, what they count): CUDA's peak allocated since :func:`reset_peak`, the CPU allocator's over
    ``window``, else the CPU process's peak resident set: ``rss_bytes`` where the caller read it (so the record's
    ``peak_rss_bytes`` and this fallback are one reading; a later read can be higher), else read now."""
    if ctx.device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(ctx.device)), PeakMemoryKind.CUDA_MAX_ALLOCATED
    if window.peak_bytes is not None:
        return window.peak_bytes, PeakMemoryKind.CPU_PEAK_ALLOCATED
    return (peak_rss_bytes() if rss_bytes is None else rss_bytes), PeakMemoryKind.CPU_MAX_RSS


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
