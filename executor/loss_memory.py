"""Measure on CPU (gloo) what the memory model counts around the loss: the cross-entropy's working
set (``loss_working_bytes``, :mod:`simulator.memory.activations`, :mod:`simulator.memory.dtensor_tp`)
and the input torchtitan's output layer saves (:func:`measure_head_saved`).

Each rank holds random 16-bit logits for ``tokens`` tokens (its ``vocab / tp`` slice under
``loss_parallel``, the whole vocabulary otherwise) and runs
``F.cross_entropy(logits.float(), labels)`` as torchtitan does, then deletes the logits and runs
backward. The CPU allocator's allocation and free events (``torch.profiler`` with
``profile_memory=True``, read from the profiler's event tree by timestamp) give the live bytes over
time; per window (the loss's forward, then its backward) the peak above the bytes live when the
window opened. :func:`measure_loss_working` returns per rank, in bytes:

- ``forward_peak_bytes``: above the 16-bit logits (which exist before the loss);
- ``kept_bytes``: live after the forward besides the logits (the saved fp32 log-probabilities);
- ``backward_peak_bytes``: above what the forward kept (the logits deleted);
- ``local_logits``: the logits this rank holds.

The model's working set on top of the saved log-probabilities is then
max(forward_peak + e·local_logits − kept, backward_peak), e = 2.

``autocast=True`` runs instead what ``F.cross_entropy(logits)`` on 16-bit logits becomes under CUDA
autocast (the executor's loss): ``cross_entropy`` is on no CUDA autocast list and calls
``log_softmax(self, dim, self.scalar_type())`` (``aten/src/ATen/native/LossNLL.cpp``), which autocast leaves
16-bit since its dtype is given, then ``nll_loss`` (fp32 list) on an fp32 cast of it: here
``nll_loss(log_softmax(logits, -1, dtype=bf16).float(), labels)`` without autocast, as CPU autocast
lists ``cross_entropy_loss`` itself as fp32 and would run another path [src: torch-autocast-cache].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from executor.launch import run
from executor.measure import live_peak as _live_peak
from executor.memory_measure import saved_shard_counter
from simulator.checks import positive_int
from simulator.errors import SpecError


@dataclass(frozen=True, kw_only=True)
class _Job:
    tokens: int
    vocab: int
    loss_parallel: bool
    seed: int
    autocast: bool = False


def _rank(rank: int, world: int, job: _Job) -> dict:
    import contextlib

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import loss_parallel
    from torch.profiler import ProfilerActivity, profile

    g = torch.Generator().manual_seed(job.seed)
    local_vocab = job.vocab // world if job.loss_parallel else job.vocab
    labels = torch.randint(0, job.vocab, (job.tokens,), generator=g)
    local = torch.randn(job.tokens, local_vocab, generator=g).to(torch.bfloat16)
    if job.loss_parallel:
        mesh = init_device_mesh("cpu", (world,))
        logits = DTensor.from_local(local, mesh, [Shard(1)], run_check=False).requires_grad_()
    else:
        logits = local.requires_grad_()
    del local
    context = loss_parallel if job.loss_parallel else contextlib.nullcontext
    with context():
        loss = {}
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as forward:
            if job.autocast:  # what CUDA autocast runs for cross_entropy(bf16 logits) (module docstring)
                log_probs = torch.log_softmax(logits, -1, dtype=logits.dtype)
                loss["value"] = torch.nn.functional.nll_loss(log_probs.float(), labels)
                del log_probs
            else:
                loss["value"] = torch.nn.functional.cross_entropy(logits.float(), labels)
        del logits
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as backward:
            loss["value"].backward()
    forward_peak, kept = _live_peak(forward)
    return {"forward_peak_bytes": forward_peak, "kept_bytes": kept,
            "backward_peak_bytes": _live_peak(backward)[0], "local_logits": job.tokens * local_vocab}


def measure_loss_working(*, tokens: int, vocab: int, tp: int = 1, loss_parallel: bool = False,
                         seed: int = 0, autocast: bool = False) -> list[dict]:
    """Per-rank peaks of the cross-entropy on ``tp`` gloo processes (module docstring); ``loss_parallel``
    False runs the eager loss on whole logits on every rank; ``autocast`` the CUDA autocast path of
    ``cross_entropy`` on the 16-bit logits (module docstring)."""
    positive_int("tokens", tokens)
    positive_int("vocab", vocab)
    positive_int("tp", tp)
    if loss_parallel and vocab % tp:
        raise SpecError("vocab", f"{vocab} is not divisible by tp = {tp}; give a multiple of {tp}")
    if autocast and loss_parallel:
        raise SpecError("autocast", "is the eager loss on whole logits; give loss_parallel False")
    return run(_rank, tp, args=(_Job(tokens=tokens, vocab=vocab, loss_parallel=loss_parallel, seed=seed,
                                     autocast=autocast),))


def _head_rank(rank: int, world: int, tokens: int, hidden: int, vocab: int, seed: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    torch.manual_seed(seed)
    mesh = init_device_mesh("cpu", (world,))
    head = torch.nn.Linear(hidden, vocab, bias=False).to(torch.bfloat16)
    parallelize_module(head, mesh, ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                                   use_local_output=False))
    params = {p.to_local().untyped_storage().data_ptr() for p in head.parameters()}
    local = torch.randn(1, tokens // world, hidden).to(torch.bfloat16).requires_grad_()
    pack, seen = saved_shard_counter(params)  # ColwiseParallel's all-gather is issued async_op=True
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        head(DTensor.from_local(local, mesh, [Shard(1)], run_check=False))
    return {"saved_bytes": sum(seen.values()), "input_shard_bytes": local.untyped_storage().nbytes()}


def measure_head_saved(*, tokens: int, hidden: int, vocab: int, tp: int = 2, seed: int = 0) -> list[dict]:
    """Per rank, the bytes autograd saves (parameters excluded) in torchtitan's output layer,
    ``ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1))`` on a sequence-sharded bf16
    input of ``tokens`` tokens over ``tp`` gloo ranks, and the bytes of the rank's input shard."""
    for name, value in (("tokens", tokens), ("hidden", hidden), ("vocab", vocab), ("tp", tp)):
        positive_int(name, value)
    for name, value in (("tokens", tokens), ("vocab", vocab)):
        if value % tp:
            raise SpecError(name, f"{value} is not divisible by tp = {tp}; give a multiple of {tp}")
    return run(_head_rank, tp, args=(tokens, hidden, vocab, seed))
