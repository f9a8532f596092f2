"""Measure the model-state memory torch really holds per rank under DDP, ZeRO-1 and FSDP2 (gloo, CPU, fp32).

What is counted: tensor *storage* bytes (``untyped_storage().nbytes()``), each storage once (keyed by its
``data_ptr``), so views — DDP gradients that are views into bucket buffers, FSDP2 unsharded parameters
that are views into the padded all-gather output — are never double-counted, and padding that torch
allocates on purpose is counted. DTensors are counted by their local shard (``.to_local()``); the DTensor's
own ``untyped_storage()`` reports the global size. Not counted: process RSS, allocator caches, activations.

Per rank, after one forward / backward / ``optimizer.step()`` on random tokens (``zero_grad`` not called):

- ``params_bytes``: parameters (local shards under FSDP2).
- ``grads_bytes``: the ``.grad`` tensors (local shards under FSDP2).
- ``optimizer_bytes``: Adam's ``exp_avg`` and ``exp_avg_sq`` tensors this rank holds.
- ``optimizer_step_bytes``: Adam's per-parameter ``step`` counters (0-d fp32 tensors, 4 bytes each).
- ``optimizer_state_tensors``: how many parameter tensors this rank keeps Adam state for.
- ``grad_buckets_bytes``: DDP bucket buffers not aliased by any ``.grad`` (recorded by a comm hook that
  forwards to the stock all-reduce hook): with ``gradient_as_bucket_view=False`` (DDP's default) the
  buckets are a second full copy of the gradients; with ``True`` the grads are views into them (0 extra).
- ``params_bytes_after_forward``: parameter storages alive right after the forward (before backward):
  the persistent (sharded) parameters plus any unsharded copies FSDP2 keeps for backward.

Modes: ``ddp`` (DDP + AdamW: ZeRO 0), ``zero1`` (DDP + ``ZeroRedundancyOptimizer(AdamW)``: ZeRO 1),
``fsdp2-noreshard`` / ``fsdp2-reshard`` (``fully_shard`` on every block and on the root with
``reshard_after_forward=False`` / ``True``). See docs/memory_measured.md for what these hold and how they
map to ZeRO stages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from executor.launch import run
from executor.model import build_gpt
from simulator.checks import positive_int
from simulator.errors import SpecError
from simulator.workload import TransformerSpec, Workload

MODES = ("ddp", "zero1", "fsdp2-noreshard", "fsdp2-reshard")
"""Wrappings :func:`measure_model_states` knows."""

LR = 1e-3
"""AdamW learning rate of the one step (any value: it does not change memory)."""


@dataclass(frozen=True, kw_only=True)
class _Job:
    spec: TransformerSpec
    modes: tuple[str, ...]
    batch: int
    seq: int
    seed: int
    gradient_as_bucket_view: bool


def _storage_bytes(tensors: Iterable[torch.Tensor], seen: dict[int, int] | None = None) -> int:
    """Bytes of the distinct storages behind ``tensors`` (local shards of DTensors); updates ``seen``."""
    seen = {} if seen is None else seen
    total = 0
    for t in tensors:
        if t is None:
            continue
        if hasattr(t, "to_local"):
            t = t.to_local()
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr == 0 or ptr in seen:
            continue
        seen[ptr] = storage.nbytes()
        total += storage.nbytes()
    return total


storage_bytes = _storage_bytes
"""Public name of the storage accounting (the plan runner's families count model states with it)."""


def _wrap(model: torch.nn.Module, mode: str, nproc: int, job: _Job, bucket_storages: dict[int, int]):
    """Wrap ``model`` for ``mode``; returns (module to call, optimizer, Adam state dict)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    if mode in ("ddp", "zero1"):
        ddp = DDP(model, gradient_as_bucket_view=job.gradient_as_bucket_view)

        def recording_hook(state, bucket):
            buf = bucket.buffer()
            bucket_storages[buf.untyped_storage().data_ptr()] = buf.untyped_storage().nbytes()
            return default_hooks.allreduce_hook(state, bucket)

        ddp.register_comm_hook(dist.group.WORLD, recording_hook)
        if mode == "ddp":
            opt = torch.optim.AdamW(ddp.parameters(), lr=LR)
            return ddp, opt, lambda: opt.state
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=LR)
        return ddp, opt, lambda: opt.optim.state
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (nproc,))
    reshard = mode == "fsdp2-reshard"
    for block in model.layers:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    return model, opt, lambda: opt.state


def _measure_one(mode: str, rank: int, nproc: int, job: _Job) -> dict:
    model = build_gpt(job.spec, seed=job.seed)
    bucket_storages: dict[int, int] = {}
    module, opt, adam_state = _wrap(model, mode, nproc, job, bucket_storages)
    persistent = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    g = torch.Generator().manual_seed(job.seed + 1 + rank)
    tokens = torch.randint(0, job.spec.vocab, (job.batch, job.seq + 1), generator=g)
    loss = module(tokens[:, :-1], tokens[:, 1:])
    seen: dict[int, int] = {}
    after_forward = _storage_bytes(persistent, seen) + _storage_bytes(model.parameters(), seen)
    loss.backward()
    opt.step()
    params = list(model.parameters())
    grad_seen: dict[int, int] = {}
    grads_bytes = _storage_bytes((p.grad for p in params), grad_seen)
    state = adam_state()
    moments = [s[k] for s in state.values() for k in ("exp_avg", "exp_avg_sq")]
    steps = [s["step"] for s in state.values() if torch.is_tensor(s.get("step"))]
    extra_buckets = sum(n for ptr, n in bucket_storages.items() if ptr not in grad_seen)
    result = {
        "rank": rank, "mode": mode,
        "params_bytes": _storage_bytes(params),
        "grads_bytes": grads_bytes,
        "optimizer_bytes": _storage_bytes(moments),
        "optimizer_step_bytes": _storage_bytes(steps),
        "optimizer_state_tensors": len(state),
        "grad_buckets_bytes": extra_buckets,
        "params_bytes_after_forward": after_forward,
        "loss": float(loss.detach()),
    }
    del module, opt, model, persistent, state, moments, steps, params
    dist.barrier()
    return result


def _measure_rank(rank: int, nproc: int, job: _Job) -> dict[str, dict]:
    """One rank's body under :func:`executor.launch.run` (which owns the gloo process group)."""
    return {mode: _measure_one(mode, rank, nproc, job) for mode in job.modes}


def _check_args(spec: TransformerSpec, nproc: int, modes: Iterable[str], batch: int, seq: int | None) -> int:
    if not isinstance(spec, Workload) or not spec.has_activation_shapes:
        raise SpecError("spec", f"must be a transformer workload (the executor builds a GPT from its shapes), "
                        f"got {type(spec).__name__}")
    positive_int("nproc", nproc)
    for mode in modes:
        if mode not in MODES:
            raise SpecError("mode", f"unknown {mode!r}; known: {', '.join(MODES)}")
    positive_int("batch", batch)
    seq = spec.seq_len if seq is None else seq
    if not isinstance(seq, int) or seq < 1 or seq > spec.positions:
        raise SpecError("seq", f"must be an integer in 1..{spec.positions}, got {seq!r}")
    return seq


def measure_modes(spec: TransformerSpec, *, nproc: int, modes: Iterable[str] = MODES, batch: int = 2,
                  seq: int | None = None, seed: int = 0,
                  gradient_as_bucket_view: bool = False) -> dict[str, list[dict]]:
    """Run every mode in ``modes`` in one set of ``nproc`` gloo processes (:func:`executor.launch.run`);
    ``{mode: [per-rank dict]}``. One launch for several modes saves the process start-up (seconds each
    on a small CPU machine). A failing rank raises :class:`executor.launch.LaunchError` with its traceback.
    """
    modes = tuple(modes)
    seq = _check_args(spec, nproc, modes, batch, seq)
    job = _Job(spec=spec, modes=modes, batch=batch, seq=seq, seed=seed,
               gradient_as_bucket_view=gradient_as_bucket_view)
    per_rank = run(_measure_rank, nproc, args=(job,), backend="gloo")
    return {mode: [per_rank[r][mode] for r in range(nproc)] for mode in modes}


def measure_model_states(spec: TransformerSpec, *, nproc: int, mode: str, batch: int = 2,
                         seq: int | None = None, seed: int = 0,
                         gradient_as_bucket_view: bool = False) -> list[dict]:
    """Per-rank model-state bytes for one ``mode`` (see the module docstring for the fields)."""
    return measure_modes(spec, nproc=nproc, modes=(mode,), batch=batch, seq=seq, seed=seed,
                         gradient_as_bucket_view=gradient_as_bucket_view)[mode]

def _is_parameter_cast(t: torch.Tensor) -> bool:
    """Whether ``t`` is (a view of) autocast's cast of a parameter: its base's autograd node is a copy
    whose input is a leaf's gradient accumulator."""
    base = t if t._base is None else t._base
    fn = base.grad_fn
    return fn is not None and fn.name() == "ToCopyBackward0" and \
        any(type(n).__name__ == "AccumulateGrad" for n, _ in fn.next_functions if n is not None)


def block_saved_bytes(spec: TransformerSpec, *, batch: int = 2, seq: int | None = None, seed: int = 0,
                      autocast: bool = False) -> dict:
    """Bytes autograd saves for backward in one transformer block (fp32, one process, no dropout;
    ``autocast``: the block under ``torch.autocast("cpu", bfloat16)`` on its fp32 residual-stream input,
    the parameters' bf16 casts left out like the parameters: the memory model counts them apart).

    Runs ``build_gpt(spec).layers[0]`` on a random ``(batch, seq, h)`` input that requires grad and
    counts, through ``torch.autograd.graph.saved_tensors_hooks``, the distinct storages saved that are
    not parameters. Returns ``{"saved_bytes", "saved_tensors", "by_shape"}`` (``by_shape``: bytes per
    saved-storage shape, to say which tensor is which). Compare with Korthikanti et al. 2022's
    ``s·b·h·(34 + 5·a·s/h)`` in docs/memory_measured.md.
    """
    seq = spec.seq_len if seq is None else seq
    for name, value in (("batch", batch), ("seq", seq)):
        positive_int(name, value)
    block = build_gpt(spec, seed=seed).layers[0]
    param_ptrs = {p.untyped_storage().data_ptr() for p in block.parameters()}
    seen: dict[int, int] = {}
    by_shape: dict[str, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in param_ptrs and ptr not in seen and not _is_parameter_cast(t):
            seen[ptr] = t.untyped_storage().nbytes()
            key = "x".join(map(str, t.shape))
            by_shape[key] = by_shape.get(key, 0) + seen[ptr]
        return t

    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, seq, spec.hidden, generator=g, requires_grad=True)
    precision = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), precision:
        block(x)
    return {"saved_bytes": sum(seen.values()), "saved_tensors": len(seen), "by_shape": by_shape}


def saved_shard_counter(params: set[int]):
    """A ``saved_tensors_hooks`` pack hook for a tp rank, and the dict it fills: each saved tensor's storage (a
    DTensor's local shard, waited for where a redistribution was issued ``async_op=True``) by data pointer → bytes,
    the storages in ``params`` (data pointers) left out. Counts each storage once, however often it is saved."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.tensor import DTensor

    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        local = t.to_local() if isinstance(t, DTensor) else t
        if isinstance(local, AsyncCollectiveTensor):
            local = local.wait()
        storage = local.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    return pack, seen


def _tp_block_rank(rank: int, world: int, spec: TransformerSpec, batch: int, seq: int, sp: bool, seed: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from executor.strategies.tensor import parallelize_blocks

    mesh = init_device_mesh("cpu", (world,))
    blocks = torch.nn.ModuleList([build_gpt(spec, seed=seed).layers[0]])
    parallelize_blocks(blocks, spec, mesh, sp)
    params = {(p.to_local() if isinstance(p, DTensor) else p).untyped_storage().data_ptr()
              for p in blocks.parameters()}
    pack, seen = saved_shard_counter(params)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, seq, spec.hidden, generator=g, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        blocks[0](x)
    return {"saved_bytes": sum(seen.values()), "saved_tensors": len(seen)}


def tp_block_saved_bytes(spec: TransformerSpec, *, tp: int, sequence_parallel: bool, batch: int = 2,
                         seq: int | None = None, seed: int = 0) -> list[dict]:
    """Per tp rank, the bytes autograd saves in one tensor-parallel block of the executor's GPT (fp32,
    DTensor plan :func:`executor.strategies.tensor.block_plan`: with sequence parallelism the norms run on
    the sequence shard and ``PrepareModuleInput`` gathers their outputs before the column-parallel
    matmuls, which save the gathered tensors), counted as :func:`block_saved_bytes` does."""
    seq = _check_args(spec, tp, (), batch, seq)
    return run(_tp_block_rank, tp, args=(spec, batch, seq, sequence_parallel, seed))
