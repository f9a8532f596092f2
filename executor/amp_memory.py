"""Measure on CPU (gloo) what torch AMP allocates in a DDP training step, term by term, as the memory
model counts it (:mod:`simulator.memory.autocast`): the executor's way of training a mixed-precision
plan (fp32 ``build_gpt`` model, ``DistributedDataParallel``, ``torch.autocast(bfloat16)`` around the
forward only, ``torch.optim.AdamW``, ``zero_grad(set_to_none=False)``).

Each rank runs one warm-up step (Adam's state is created, DDP rebuilds its buckets), then a measured
step on random tokens:

- ``params_bytes``, ``grads_bytes``, ``moments_bytes`` (``exp_avg`` + ``exp_avg_sq``),
  ``grad_buckets_bytes`` (the DDP buckets the communication hook saw in the measured step, those no
  ``.grad`` aliases): storage bytes, each storage once.
- ``casts`` / ``cast_params``: how many times the forward cast a parameter to bf16 (``aten._to_copy``
  of a parameter's storage, seen by a ``TorchDispatchMode`` below autocast) and how many distinct
  parameters that was; equal when autocast's cache serves every later use; ``cast_names`` which.
- ``cast_bytes_in_region``: the bytes of those casts still allocated when the forward returns, inside
  the autocast region; ``cast_bytes_after_region``: still allocated after the region exits (saved by
  autograd for backward). From the CPU allocator's events (``torch.profiler`` with
  ``profile_memory=True``), matched by address with the casts.
- ``step_peak_bytes``: the peak of allocated bytes during ``optimizer.step()`` above those allocated
  when it starts (the step's temporaries); ``largest_param_numel``.

``foreach`` None is AdamW's default (the single-tensor loop on CPU); True asks for the foreach
implementation, the default on CUDA, whose CPU fallback allocates its outputs as the CUDA kernels do.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from executor.launch import run
from executor.model import build_gpt
from executor.recompute import apply_recompute
from simulator.checks import positive_int
from simulator.workload import Recompute, TransformerSpec

LR = 1e-3
"""AdamW learning rate (any value: it does not change memory)."""
_REGION_END = "amp_memory.region_end"
"""The profiler mark set inside the autocast region, after the forward has returned."""


@dataclass(frozen=True, kw_only=True)
class _Job:
    spec: TransformerSpec
    batch: int
    recompute: Recompute
    foreach: bool | None
    seed: int


def _events(prof) -> list[tuple[int, int, int]]:
    """(time ns, address, bytes: + allocated, − freed) of every CPU allocator event, in time order."""
    from torch._C._profiler import _EventType

    out, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.typed[0] == _EventType.Allocation:
            fields = event.typed[1]
            out.append((event.start_time_ns, fields.ptr, fields.alloc_size))
        stack.extend(event.children)
    return sorted(out)


def _marker_ns(prof, name: str) -> int:
    """Start time of the ``record_function`` event called ``name`` (the profiler's clock)."""
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.name == name:
            return event.start_time_ns
        stack.extend(event.children)
    raise RuntimeError(f"no {name!r} event in the profile")


def _net_bytes(events, ptrs: set[int]) -> int:
    """Bytes allocated at ``ptrs`` in the window and not freed in it."""
    return sum(size for _, ptr, size in events if ptr in ptrs)


def _peak_bytes(events) -> int:
    live = peak = 0
    for _, _, size in events:
        live += size
        peak = max(peak, live)
    return peak


class _CastRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Records ``_to_copy`` calls whose input is a parameter's storage: (parameter name, output address)."""

    def __init__(self, params: dict[int, str]):
        super().__init__()
        self.params, self.casts = params, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], torch.Tensor):
            name = self.params.get(args[0].untyped_storage().data_ptr())
            if name is not None:
                self.casts.append((name, out.untyped_storage().data_ptr()))
        return out


def _storage_bytes(tensors, seen: set[int]) -> int:
    total = 0
    for t in tensors:
        if t is None or t.untyped_storage().data_ptr() in seen:
            continue
        seen.add(t.untyped_storage().data_ptr())
        total += t.untyped_storage().nbytes()
    return total


def _rank(rank: int, world: int, job: _Job) -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, record_function

    model = build_gpt(job.spec, seed=job.seed)
    apply_recompute(model, job.recompute)
    buckets: dict[int, int] = {}

    def hook(state, bucket):
        buckets[bucket.buffer().untyped_storage().data_ptr()] = bucket.buffer().untyped_storage().nbytes()
        return default_hooks.allreduce_hook(state, bucket)

    ddp = DDP(model)
    ddp.register_comm_hook(None, hook)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, foreach=job.foreach)
    g = torch.Generator().manual_seed(job.seed + 1 + rank)
    params = {p.untyped_storage().data_ptr(): n for n, p in model.named_parameters()}
    out: dict = {}
    for step in range(2):
        tokens = torch.randint(0, job.spec.vocab, (job.batch, job.spec.seq_len + 1), generator=g)
        buckets.clear()
        measured = step == 1
        recorder = _CastRecorder(params) if measured else contextlib.nullcontext()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as forward:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                with recorder:
                    loss = ddp(tokens[:, :-1], tokens[:, 1:])
                with record_function(_REGION_END):
                    pass
        if measured:
            events, end_ns = _events(forward), _marker_ns(forward, _REGION_END)
            ptrs = {ptr for _, ptr in recorder.casts}
            out["casts"], out["cast_params"] = len(recorder.casts), len({n for n, _ in recorder.casts})
            out["cast_names"] = sorted({n for n, _ in recorder.casts})
            out["cast_bytes_in_region"] = _net_bytes([e for e in events if e[0] < end_ns], ptrs)
            out["cast_bytes_after_region"] = _net_bytes(events, ptrs)
        loss.backward()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as stepped:
            opt.step()
        if measured:
            out["step_peak_bytes"] = _peak_bytes(_events(stepped))
        opt.zero_grad(set_to_none=False)
    ps = list(model.parameters())
    grad_seen: set[int] = set()
    out["grads_bytes"] = _storage_bytes((p.grad for p in ps), grad_seen)
    out["params_bytes"] = _storage_bytes(ps, set())
    out["moments_bytes"] = _storage_bytes((s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")),
                                          set())
    out["grad_buckets_bytes"] = sum(n for ptr, n in buckets.items() if ptr not in grad_seen)
    out["largest_param_numel"] = max(p.numel() for p in ps)
    return out


def measure_amp_step(spec: TransformerSpec, *, nproc: int = 1, batch: int = 2, recompute: Recompute = Recompute.NONE,
                     foreach: bool | None = None, seed: int = 0) -> list[dict]:
    """Per-rank rows of the module docstring for ``spec`` on ``nproc`` gloo processes."""
    positive_int("nproc", nproc)
    positive_int("batch", batch)
    return run(_rank, nproc, args=(_Job(spec=spec, batch=batch, recompute=Recompute(recompute), foreach=foreach,
                                        seed=seed),))
