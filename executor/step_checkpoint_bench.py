"""``torch.utils.checkpoint``'s host time per region as a rank's step pays it, not as a tight loop on one rank does.

``trainplan calibrate --compute`` timed the checkpoint terms on one process in a tight loop
(:func:`executor.host_bench.time_checkpoint`), where the wrapper's Python stays hot: 93-95 µs per region forward in the
quiet calibrations of 2026-11-25 20:42 / 20:45 UTC. In a rank's step (two gloo processes in lockstep, DDP-wrapped,
a barrier before each step) the same regions cost more: 155-163 µs per region forward at load 8-10 (2026-11-25,
ddp16) [src: own-step-checkpoint-probe], as DDP's wrapper did (:mod:`executor.step_bench`, ddp15).

This probe runs on :data:`~executor.step_bench.STEP_PROBE_PROCESSES` gloo processes two copies of the tiny model,
each wrapped as the executor's data-parallel family wraps it at ZeRO 0 (one bucket, the comm hook without its
collective, ``no_sync`` on all but the last micro-batch), one with every block checkpointed
(``Recompute.FULL``, :func:`executor.recompute.apply_recompute`); steps alternate between the two in one launch, so
the load drifts over both alike. Per micro-batch, medians over the steps, means over the ranks, ``blocks`` regions:

    checkpoint_forward_region_us  = (F_checkpointed − F_plain) / blocks · 1e6
    checkpoint_backward_region_us = max(0, (B_checkpointed − B_plain) / blocks − recompute_region_s) · 1e6

``recompute_region_s`` the model's time for rerunning one block's forward on the calibrated device (the kernels the
compute model already charges as recompute), as the tight loop subtracts it.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass

from executor.compute_bench import Timing, timing_of
from executor.step_bench import STEP_PROBE_MICRO_BATCHES, STEP_PROBE_PROCESSES
from simulator.workload.transformer import TransformerSpec

CALIBRATE_REPEATS = 60
"""Steps of each model ``trainplan calibrate --compute`` times (~1 s of steps)."""


@dataclass(frozen=True, kw_only=True)
class StepCheckpointTiming:
    """What :func:`time_step_checkpoint` measured, per rank, per micro-batch (median, p10, p90 over the steps)."""

    blocks: int
    plain_forward: tuple[Timing, ...]
    checkpointed_forward: tuple[Timing, ...]
    plain_backward: tuple[Timing, ...]
    checkpointed_backward: tuple[Timing, ...]
    recompute_region_s: float = 0.0
    """The model's recompute of one block, subtracted from the backward (set by :func:`with_recompute`)."""

    @staticmethod
    def _mean(ts: tuple[Timing, ...]) -> float:
        return statistics.fmean(t.median_s for t in ts)

    @property
    def forward_region_us(self) -> float:
        return max(0.0, (self._mean(self.checkpointed_forward) - self._mean(self.plain_forward)) / self.blocks * 1e6)

    @property
    def backward_region_us(self) -> float:
        extra = (self._mean(self.checkpointed_backward) - self._mean(self.plain_backward)) / self.blocks
        return max(0.0, extra - self.recompute_region_s) * 1e6


def _rank(rank: int, world: int, spec: TransformerSpec, micro_batch: int, m: int, repeats: int, warmup: int,
          seed: int) -> tuple[list[float], ...]:
    """One rank: alternating steps of the two DDP models (module docstring); per timed step the forward and the
    backward per micro-batch of each."""
    import torch
    import torch.distributed as dist

    from executor.data import global_batch, micro_batches, replica_samples
    from executor.model import build_gpt
    from executor.recompute import RecomputeClock, apply_recompute
    from executor.reference import make_optimizer
    from executor.step_bench import _ddp_model
    from simulator.workload import Recompute

    models = [_ddp_model(build_gpt(spec, seed)), None]
    checkpointed = build_gpt(spec, seed)
    apply_recompute(checkpointed, Recompute.FULL, RecomputeClock())
    models[1] = _ddp_model(checkpointed)
    optimizers = [make_optimizer(model.parameters()) for model in models]
    out = ([], [], [], [])  # plain forward, checkpointed forward, plain backward, checkpointed backward
    for step in range(2 * (warmup + repeats)):
        k = step % 2
        model = models[k]
        dist.barrier()
        inputs, targets = (replica_samples(t, rank, world) for t in
                           global_batch(seed, step, batch=micro_batch * m * world, seq=spec.seq_len, vocab=spec.vocab))
        f = b = 0.0
        local = torch.zeros(())
        for i, (x, y) in enumerate(zip(micro_batches(inputs, m), micro_batches(targets, m))):
            with model.no_sync() if i < m - 1 else contextlib.nullcontext():
                t0 = time.perf_counter()
                loss = model(x, y) / m
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
            f, b = f + t1 - t0, b + t2 - t1
            local += loss.detach()
        optimizers[k].step()
        optimizers[k].zero_grad(set_to_none=False)
        dist.all_reduce(local)
        if step >= 2 * warmup:
            out[k].append(f / m)
            out[2 + k].append(b / m)
    return out


def time_step_checkpoint(spec: TransformerSpec, micro_batch: int, *, processes: int = STEP_PROBE_PROCESSES,
                         micro_batches: int = STEP_PROBE_MICRO_BATCHES, repeats: int = CALIBRATE_REPEATS,
                         warmup: int = 5, thread_count: int = 1, seed: int = 0) -> StepCheckpointTiming:
    """The probe of the module docstring (``recompute_region_s`` 0: see :func:`with_recompute`)."""
    from executor.launch import run

    per_rank = run(_rank, processes, args=(spec, micro_batch, micro_batches, repeats, warmup, seed),
                   num_threads=thread_count)
    pf, cf, pb, cb = (tuple(timing_of(r[k]) for r in per_rank) for k in range(4))
    return StepCheckpointTiming(blocks=spec.layers, plain_forward=pf, checkpointed_forward=cf, plain_backward=pb,
                                checkpointed_backward=cb)


def with_recompute(timing: StepCheckpointTiming | None, recompute_region_s: float) -> StepCheckpointTiming | None:
    """``timing`` with the model's recompute of one block to subtract."""
    from dataclasses import replace

    return None if timing is None else replace(timing, recompute_region_s=recompute_region_s)


def measure_step_checkpoint(spec: TransformerSpec, micro_batch: int, device, *, thread_count: int,
                            progress: bool = False) -> StepCheckpointTiming:
    """The probe for ``trainplan calibrate --compute`` (the CPU, fp32) on the tiny ``spec``, less the recompute of one
    block on ``device`` (the calibrated one: ``simulator.compute``'s recompute phase of a ``Recompute.FULL`` layer)."""
    from simulator.compute import Phase, layer_times, total_time
    from simulator.workload import Recompute

    if progress:
        import sys

        print(f"calibrate --compute: checkpointed blocks in the tiny model's DDP step on {STEP_PROBE_PROCESSES} "
              "processes", file=sys.stderr)
    rerun_s = total_time(layer_times(spec, device, micro_batch, recompute=Recompute.FULL), Phase.RECOMPUTE)
    return with_recompute(time_step_checkpoint(spec, micro_batch, thread_count=thread_count), rerun_s)


def with_step_checkpoint(node, timing: StepCheckpointTiming | None):
    """``node`` with ``host.checkpoint_forward_region_us`` and ``host.checkpoint_backward_region_us`` from the step
    probe in place of the tight loop's [src: own-step-checkpoint-probe]; as is without a host section or a probe."""
    from dataclasses import replace

    if node.host is None or timing is None:
        return node
    return replace(node, host=replace(node.host, checkpoint_forward_region_us=timing.forward_region_us,
                                      checkpoint_backward_region_us=timing.backward_region_us))


def step_checkpoint_line(t: StepCheckpointTiming) -> str:
    """``calibrate --compute``'s printed line."""
    ms = StepCheckpointTiming._mean
    return (f"checkpoint in step {t.forward_region_us:.1f} us per region forward, {t.backward_region_us:.1f} us per "
            f"region backward (DDP steps in lockstep, {t.blocks} regions: forward "
            f"{ms(t.checkpointed_forward) * 1e3:.3f} vs {ms(t.plain_forward) * 1e3:.3f} ms, backward {ms(t.checkpointed_backward) * 1e3:.3f} vs "
            f"{ms(t.plain_backward) * 1e3:.3f} ms per micro-batch, recompute {t.recompute_region_s * 1e6:.1f} us "
            "per region left out): host.checkpoint_*_region_us")


def step_checkpoint_dict(t: StepCheckpointTiming | None) -> dict | None:
    """``calibrate --compute --json``'s record of the probe."""
    if t is None:
        return None
    plain = lambda x: {"median_s": x.median_s, "p10_s": x.p10_s, "p90_s": x.p90_s}  # noqa: E731
    return {"blocks": t.blocks, "recompute_region_s": t.recompute_region_s,
            "checkpoint_forward_region_us": t.forward_region_us, "checkpoint_backward_region_us": t.backward_region_us,
            **{name: [plain(x) for x in getattr(t, name)] for name in
               ("plain_forward", "checkpointed_forward", "plain_backward", "checkpointed_backward")}}
