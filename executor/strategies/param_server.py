"""The parameter-server family (Li et al. OSDI'14): dp workers push gradients to k server ranks and
pull parameters back, over point-to-point ``send``/``recv`` on the process group.

Ranks ``0 .. dp−1`` are workers, ranks ``dp .. dp+k−1`` the servers: the world is dp + k
processes (``executor.strategies.base.processes``; the server shards run as processes of their own, whether the plan colocates them with
workers or gives them nodes; on CPU that is only a placement). The flat parameter vector is split
into k contiguous shards of near-equal size (the simulator's "evenly, by bytes"); server j holds
shard j and its AdamW state (AdamW is elementwise, so a sharded step equals the unsharded one).

- ``ps_mode sync``: every step each worker pushes its gradient (its share of the global batch) and
  its loss; each server averages the dp gradients, steps, and sends the new shard and the mean
  loss back. The run equals single-process training on the global batch.
- ``ps_mode async`` with ``staleness_steps`` s (stale-synchronous parallel, Ho et al. NIPS'13):
  a server applies each push as it arrives (receive from any worker) and answers the pusher with
  the current shard, but holds the answer while the pusher's next step would run more than s
  steps ahead of the slowest worker (None: never held). Measured per push: the *update staleness*
  (server updates between the pull a gradient was computed on and its own update) and the *clock
  gap* (how far ahead of the slowest worker a released worker starts; at most s). While a worker
  runs step t, every other worker has finished at least t − s steps and may start steps up to
  t + s, so at most 2s + 1 of its pushes land in between: update staleness ≤ (dp − 1)·(2s + 1).
  Also per push, the *step lag* the discrete-event engine reports (``simulator.engine.step``'s
  ``_async_run``): how many steps the pushing worker's step count trails the furthest other worker's,
  ``max(0, max over other workers of completed steps − completed steps of the pusher)``, as this
  server counts them when the push arrives. :meth:`ParamServerRunner.pushes` hands both to the
  runner, which records them in the results file (``simulator.run_results.Staleness``).

Messages are float32 vectors: push ``[step, version pulled, loss, gradient shard]``, answer
``[version, loss, parameter shard]``. No collectives run between steps; in async mode a runner must
not add any (a held worker would never reach it).
"""

from __future__ import annotations

from functools import partial

import time
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from executor.data import batch_for, micro_batches, replica_samples
from executor.memory_measure import _storage_bytes
from executor.model import build_gpt
from executor.reference import make_optimizer
from executor.strategies.base import Family, FamilySpec, ModelStateBytes, Phase, StepRecord, register
from executor.strategies.run_context import RunContext
from simulator.errors import SpecError
from simulator.strategy import ParallelLayout
from simulator.strategy.kinds import Offload, ZeroStage
from simulator.strategy.sync import ParamServerMode
from simulator.workload import Recompute
from simulator.workload.moe_routing import Routing

_HEAD = 3
"""Header floats of a push (step, version pulled, loss); an answer has 2 (version, loss)."""


def check(plan, layout: ParallelLayout) -> None:
    """Refuse, in one line, what this family cannot run as the plan says (torch-free)."""
    s = layout.strategy
    if layout.tp > 1 or layout.pp > 1:
        raise SpecError("plan.strategy.dp_sync", f"a parameter server with tp={layout.tp} pp={layout.pp} is not "
                        "run here; use tp 1 and pp 1 with param-server")
    if s.zero is not ZeroStage.ZERO0 or s.offload is not Offload.NONE or s.recompute is not Recompute.NONE:
        raise SpecError("plan.strategy.dp_sync", "the parameter-server family runs without ZeRO, offload and "
                        "recompute; use zero 0, offload none, recompute none")
    if s.moe_routing is Routing.ROUND_ROBIN and getattr(plan.model, "moe", None) is not None:
        raise SpecError("plan.strategy.moe_routing", "round-robin: the parameter-server family runs the model's "
                        "learned gate only; use moe_routing learned, or an all-reduce dp_sync")


def shard_bounds(numel: int, shards: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each of ``shards`` contiguous pieces of ``numel`` elements (sizes differ by ≤ 1)."""
    base, extra = divmod(numel, shards)
    bounds, start = [], 0
    for j in range(shards):
        end = start + base + (1 if j < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


class ParamServerRunner:
    """A worker or a server of a parameter-server run (a :class:`StepRunner`)."""

    phase_notes = {
        Phase.FORWARD.value: "workers: forward and backward together, summed over micro-batches",
        Phase.DP.value: "workers: push, the servers' update and pull (what the worker waited for)",
        Phase.OPTIMIZER.value: "servers: receiving the pushes and updating the shard (the server's whole step)",
    }

    def __init__(self, ctx: RunContext, optimizer: Callable | None = None, batch_fn: Callable = batch_for):
        """``optimizer``: builds a server's optimizer from its shard; None: AdamW as the plan's ``optimizer_impl``."""
        self.ctx, self.layout, self.batch_fn = ctx, ctx.layout, batch_fn
        optimizer = optimizer or partial(make_optimizer, impl=ctx.layout.strategy.optimizer_impl)
        self.sync = self.layout.strategy.dp_sync
        self.dp, self.k = self.layout.dp, self.sync.shards
        if ctx.world != self.dp + self.k:
            raise SpecError("nproc", f"a parameter-server run needs dp + shards = {self.dp + self.k} processes, "
                            f"got {ctx.world}")
        self.model = build_gpt(ctx.spec, seed=ctx.seed).to(ctx.device)
        self.params = list(self.model.parameters())
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.bounds = shard_bounds(flat.numel(), self.k)
        self.is_server = ctx.rank >= self.dp
        self.version = 0
        """A server's update count; on a worker, see ``versions``."""
        self.versions = [0] * self.k
        """On a worker: the version of each server's shard it last pulled."""
        self.staleness: list[int] = []
        self.clock_gaps: list[int] = []
        self.push_log: list[tuple[int, int, int, int]] = []
        """On a server: (worker, step, update staleness, step lag) of every push, in arrival order."""
        if self.is_server:
            lo, hi = self.bounds[ctx.rank - self.dp]
            self.shard = nn.Parameter(flat[lo:hi].clone())
            self.optimizer = optimizer([self.shard])
            self.completed = [0] * self.dp
            """Steps each worker has pushed, as this server counts them."""
            self.pending: list[tuple[int, int]] = []  # (worker, next step) answers held back
            self.model = None
            self.params = [self.shard]

    @property
    def _async(self) -> bool:
        return self.sync.mode is ParamServerMode.ASYNC

    def train_step(self, step: int) -> StepRecord:
        if self.is_server:
            return self._serve()
        return self._work(step)

    # --- worker -------------------------------------------------------------------------------------

    def _work(self, step: int) -> StepRecord:
        ctx, layout, phases = self.ctx, self.layout, {}
        start = time.perf_counter()
        inputs, targets = (replica_samples(x, ctx.rank, self.dp).to(ctx.device) for x in self.batch_fn(ctx, step))
        for p in self.params:
            p.grad = None
        m, loss = layout.micro_batches, torch.zeros(())
        for x, y in zip(micro_batches(inputs, m), micro_batches(targets, m)):
            with ctx.autocast():
                part = self.model(x, y) / m
            part.backward()
            loss += part.detach().float()
        grads = torch.cat([p.grad.reshape(-1) for p in self.params]).float()
        phases[Phase.FORWARD] = time.perf_counter() - start  # forward and backward together
        start = time.perf_counter()
        sends = []
        for j, (lo, hi) in enumerate(self.bounds):
            msg = torch.cat([torch.tensor([float(step), float(self.versions[j]), float(loss)]), grads[lo:hi]])
            sends.append(dist.isend(msg, dst=self.dp + j))
        flat, mean_loss = torch.empty(self.bounds[-1][1]), 0.0
        for j, (lo, hi) in enumerate(self.bounds):
            answer = torch.empty(2 + hi - lo)
            dist.recv(answer, src=self.dp + j)
            flat[lo:hi] = answer[2:]
            self.versions[j], mean_loss = int(answer[0]), float(answer[1])
        for work in sends:
            work.wait()
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(flat, self.params)
        phases[Phase.DP] = time.perf_counter() - start  # push, server update, pull: what the worker waited
        return StepRecord(loss=float(loss) if self._async else mean_loss, phases_s=phases)

    # --- server -------------------------------------------------------------------------------------

    def _serve(self) -> StepRecord:
        """Take one push from each worker (sync), or the next dp pushes from any workers (async)."""
        n = self.shard.numel()
        losses, start = [], time.perf_counter()
        if not self._async:
            grad = torch.zeros(n)
            for w in range(self.dp):
                msg = torch.empty(_HEAD + n)
                dist.recv(msg, src=w)
                grad += msg[_HEAD:]
                losses.append(float(msg[2]))
                self._log(w, msg)
            self._apply(grad / self.dp)
            mean = float(torch.tensor(sum(losses) / self.dp))  # float32, as the answer carries it to workers
            for w in range(self.dp):
                self._answer(w, mean)
        else:
            for _ in range(self.dp):
                msg = torch.empty(_HEAD + n)
                w = dist.recv(msg)
                losses.append(float(msg[2]))
                self._log(w, msg)
                self._apply(msg[_HEAD:])
                self.pending.append((w, self.completed[w]))
                self._release()
            mean = sum(losses) / len(losses)
        return StepRecord(loss=mean, phases_s={Phase.OPTIMIZER: time.perf_counter() - start})

    def _log(self, worker: int, msg: torch.Tensor) -> None:
        """Record a push's update staleness and step lag, then count the worker's step as completed."""
        step, stale = int(msg[0]), self.version - int(msg[1])
        lag = max(0, max((c for i, c in enumerate(self.completed) if i != worker), default=0) - self.completed[worker])
        self.staleness.append(stale)
        self.push_log.append((worker, step, stale, lag))
        self.completed[worker] = step + 1

    def _apply(self, grad: torch.Tensor) -> None:
        self.shard.grad = grad.clone()
        self.optimizer.step()
        self.version += 1

    def _release(self) -> None:
        """Answer every held worker whose next step stays within the staleness bound."""
        bound, slowest = self.sync.staleness_steps, min(self.completed)
        held = []
        for w, next_step in self.pending:
            if bound is None or next_step - slowest <= bound:
                self.clock_gaps.append(next_step - slowest)
                self._answer(w, float("nan"))
            else:
                held.append((w, next_step))
        self.pending = held

    def _answer(self, worker: int, loss: float) -> None:
        dist.send(torch.cat([torch.tensor([float(self.version), loss]), self.shard.detach()]), dst=worker)

    # --- the rest of the contract ---------------------------------------------------------------------

    def measured_staleness(self) -> dict[str, int | float]:
        """This server's pushes: count, max and mean update staleness, max clock gap (empty on a worker)."""
        if not self.staleness:
            return {}
        return {"pushes": len(self.staleness), "max_updates": max(self.staleness),
                "mean_updates": sum(self.staleness) / len(self.staleness),
                "max_clock_gap": max(self.clock_gaps, default=0)}

    def pushes(self) -> list[tuple[int, int, int, int]]:
        """(worker, step, update staleness, step lag) of every push this server took (none on a worker)."""
        return list(self.push_log)

    def model_state_bytes(self) -> ModelStateBytes:
        seen: dict[int, int] = {}
        params = _storage_bytes(self.params, seen)
        grads = _storage_bytes((p.grad for p in self.params), seen)
        states = (t for st in getattr(self, "optimizer", None).state.values() for t in st.values()
                  if torch.is_tensor(t)) if self.is_server else ()
        return ModelStateBytes(params_bytes=params, grads_bytes=grads, optimizer_bytes=_storage_bytes(states, seen))

    def components(self) -> dict[str, str]:
        bound = self.sync.staleness_steps
        mode = "synchronous" if not self._async else \
            f"asynchronous, staleness bound {'none' if bound is None else bound} steps"
        out = {"parameter server": f"{self.k} server ranks (ranks {self.dp}..{self.dp + self.k - 1}) over "
                                   f"dist.send/recv, {mode}; AdamW on each server's shard"}
        if self.is_server:
            out["measured staleness"] = ", ".join(f"{k}={v:g}" for k, v in self.measured_staleness().items())
        return out


def build(ctx: RunContext) -> ParamServerRunner:
    return ParamServerRunner(ctx)


register(FamilySpec(family=Family.PARAM_SERVER, check=check, build=build))
