"""The step-level discrete-event engine: :func:`simulate` plays a compiled :class:`StepWork` on SimPy.

One process per simulated rank follows its pipeline schedule (:mod:`simulator.engine.rank`);
communication goes on the flow network (:mod:`simulator.engine.replay_work`). Symmetry: each
pipeline stage is simulated once, for the representative dp replica, while the replicas' flows that
share its links ride along. Stragglers break symmetry: each step, dp replicas are grouped by their
per-stage speed factors and each distinct group is simulated (its calls timed as alone, the base
group's on the network); gradient sync waits for all of them. An asynchronous parameter server
simulates every worker, each running steps on its own, bounded by the staleness (stale-synchronous
parallel, Ho et al. NIPS'13).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace

import simpy

from simulator.checks import positive_int
from simulator.cluster.spec import Cluster
from simulator.engine.faults import failure_extras
from simulator.engine.callfold import CallFolder
from simulator.engine.fold import Folder
from simulator.engine.gc_passes import fewer_young_passes
from simulator.engine.imbalance import imbalance
from simulator.engine.network_store import main_network
from simulator.engine.rank import Pipe, PipeKey, first_variants, rank_step
from simulator.engine.step_accounts import accounts, call_folds, staleness_summary
from simulator.engine.replay_work import CommRunner
from simulator.engine.streams import KIND_STREAM, Barrier, CountingEnv, Recorder, SendStream
from simulator.engine.unrolled import start_unrolled
from simulator.errors import SpecError
from simulator.receive_first import receive_posts
from simulator.results import Category, Engine, StepResult
from simulator.schedules import ActionKind
from simulator.strategy import Offload, ParamServerMode, ParamServerSync
from simulator.work import StepWork


class _Ctx:
    """What every rank process of one simulation shares."""

    def __init__(self, work: StepWork, cluster: Cluster, trace: bool, shortcuts: bool, *, env=None, net=None,
                 unrolled: bool = False, plans=None):
        self.env = CountingEnv() if env is None else env
        self.net = main_network(self.env, work.layout.world_size) if net is None else net
        self.work, self.layout, self.schedule = work, work.layout, work.schedule
        self.rec = Recorder(trace)
        self.runner = CommRunner(self.env, self.net, cluster, work.layout, replicas=True, fuse=shortcuts, plans=plans)
        self.unrolled = unrolled
        """Every dp replica is its own pipeline (:mod:`simulator.engine.unrolled`); no replica shortcuts."""
        if unrolled:
            _check_unrolled(work.layout)
        self.first_calls = first_variants(work)
        """Per p2p call (by id), its variant priced as a transfer whose receive was posted first."""
        self.receive_posts = receive_posts(work.schedule) if self.first_calls else None
        """Per rank and compute action, the transfers whose receives torch's runtime posts before it."""
        self.posted: dict[tuple, float] = {}
        """When each transfer's receive was posted (key as :attr:`arrivals`')."""
        self.post_events: dict[tuple, simpy.Event] = {}
        """A send waiting for its receive's posting (gloo's rendezvous), by transfer."""
        if not unrolled:
            self.runner.prepare(_classes(work, self.first_calls), isolate=shortcuts)
        self.folder = Folder(self.env, self.net, self.runner) if shortcuts and not unrolled else None
        if shortcuts and not unrolled:
            self.runner.callfolder = CallFolder(self.env, self.net)
        """Folds runs of compute and idle-link TP calls (:mod:`simulator.engine.fold`); None: step by step."""
        self.rendezvous: dict[tuple, int] = {}
        self.chunk_of = {c.chunk: c for sw in work.stages for c in sw.chunks}
        self.last_backward = [max(i for i, a in enumerate(acts) if a.kind in (ActionKind.B, ActionKind.I))
                              for acts in self.schedule.ranks]
        self.optimizer_stream = "compute" if work.strategy.offload is Offload.NONE else "cpu"
        self.arrivals: dict[tuple, simpy.Event] = {}
        self.sent_at: dict[tuple, float] = {}
        self.barriers: dict[tuple, Barrier] = {}
        self.pp_streams: dict[tuple, SendStream] = {}
        self.parties_of: dict[int, int] = {}

    def dependency(self, act):
        """(stage, kind) whose output ``act`` needs from another stage, or None: a forward needs the
        previous stage's forward (F), a backward the next stage's input gradient (sent by its B or I)."""
        if act.kind is ActionKind.F:
            return (act.stage - 1, ActionKind.F) if act.stage > 0 else None
        if act.kind is ActionKind.W or act.stage == self.schedule.n_stages - 1:
            return None
        return (act.stage + 1, ActionKind.B)

    def arrival(self, key: tuple) -> simpy.Event:
        ev = self.arrivals.get(key)
        if ev is None:
            ev = self.arrivals[key] = simpy.Event(self.env)
        return ev

    def pp_stream(self, pipe: Pipe, r: int, k: int) -> SendStream:
        key = (pipe.key, r)
        if key not in self.pp_streams:
            self.pp_streams[key] = SendStream()
        return self.pp_streams[key]

    def start(self, call, klass, pipe: Pipe) -> simpy.Event:
        """Start ``call`` for ``pipe``: the representative's call with its replicas riding along (the
        base pipeline; others timed alone), or, unrolled, the pipe's own groups (:func:`start_unrolled`)."""
        if self.unrolled:
            return start_unrolled(self, call, klass, pipe)
        return self.runner.start(call, klass, network=pipe.base)

    def start_shared(self, call, klass) -> simpy.Event:
        """Start a call all simulated pipelines wait for together (a barrier's release)."""
        if self.unrolled:
            return self.runner.start_groups(call, klass, call.group)
        return self.runner.start(call, klass, network=True)

    def parties(self, k: int) -> int:
        return self.parties_of.get(k, 1)

    def barrier(self, key: tuple, parties: int) -> Barrier:
        if key not in self.barriers:
            self.barriers[key] = Barrier(self.env, parties)
        return self.barriers[key]


def _classes(work: StepWork, first_calls: dict | None = None) -> dict:
    """Calls per (stage, stream) class, for the runner's isolation check (a p2p call's receive-first variant in
    its call's class)."""
    classes: dict = defaultdict(list)
    first_calls = first_calls or {}
    for sw in work.stages:
        for c in sw.chunks:
            classes[(sw.stage, "tp")] += [*c.tp_fwd, *c.tp_bwd]
            classes[(sw.stage, "dp")] += [*c.zero_fwd, *c.zero_bwd]
            p2p = [x for x in (c.p2p_fwd, c.p2p_bwd) if x is not None]
            classes[(sw.stage, "pp")] += p2p + [first_calls[id(x)] for x in p2p if id(x) in first_calls]
        for call in (*sw.grad_sync, *sw.after_step):
            classes[(sw.stage, KIND_STREAM[call.kind])].append(call)
    return classes


def _factors(work: StepWork, model, dp: int, k: int) -> tuple[float, ...]:
    """Per stage of replica ``dp``: the slowest tp rank's compute multiplier (straggler × its device's)."""
    lay, dev = work.layout, work.compute_factor
    return tuple(max(model.factor(r, k) * dev(r) for r in (lay.rank_of(dp=dp, pp=s, tp=t) for t in range(lay.tp)))
                 for s in range(lay.pp))


def _has_stragglers(model, work: StepWork | None = None) -> bool:
    """Ranks that compute at different speeds: a straggler model, or a cluster whose nodes differ."""
    return (bool(model.speed_factors) and any(f != 1.0 for f in model.speed_factors) or model.slowdown_prob > 0
            or bool(work is not None and work.rank_factors))


def _pipes_for_step(work: StepWork, model, k: int, unrolled: bool = False) -> list[Pipe]:
    """dp replicas (dp·cp ranks per stage and tp rank: the context-parallel ranks of a replica run the
    same work) grouped by their per-stage factors; the group holding dp 0 goes on the network.
    Unrolled: every replica is a pipeline of its own, all on the network."""
    if unrolled:
        return [Pipe(PipeKey(d), _factors(work, model, d, k), True, True) for d in range(work.layout.dp)]
    if not _has_stragglers(model, work):
        return [Pipe(PipeKey(0), (1.0,) * work.layout.pp, True, True)]
    groups: dict[tuple, int] = {}
    for d in range(work.layout.dp_cp):
        groups.setdefault(_factors(work, model, d, k), d)
    return [Pipe(PipeKey(d), vec, d == 0, True) for vec, d in groups.items()]


def _sync_driver(ctx: _Ctx, model, steps: int, step_times: list, tails: dict, progress=None):
    env = ctx.env
    for k in range(steps):
        if progress is not None:
            progress("des steps", k, steps)
        pipes = _pipes_for_step(ctx.work, model, k, ctx.unrolled)
        ctx.parties_of[k] = len(pipes)
        t0 = env.now
        procs = {(p.key, r): env.process(rank_step(ctx, p, r, k)) for p in pipes for r in range(ctx.layout.pp)}
        yield simpy.AllOf(env, list(procs.values()))
        for (key, r), proc in procs.items():
            tails[(k, key, r)] = env.now - proc.value
            ctx.rec.spend((k, key, r), Category.BUBBLE, env.now - proc.value)
        step_times.append(env.now - t0)
    if progress is not None:
        progress("des steps", steps, steps)


def _async_run(ctx: _Ctx, model, steps: int, bound: int | None, tails: dict, progress=None) -> tuple[float, dict]:
    """Every worker runs on its own until the workers together finished ``steps × dp`` steps."""
    env, dp, pp = ctx.env, ctx.layout.dp, ctx.layout.pp
    clock = [0] * dp
    state = {"progress": simpy.Event(env), "total": 0}
    done = simpy.Event(env)
    staleness: dict[int, list[int]] = {w: [] for w in range(dp)}

    def worker(w: int):
        k = 0
        while not done.triggered:
            t0 = env.now
            while bound is not None and clock[w] - min(clock) > bound:
                yield state["progress"]
            for r in range(pp):
                ctx.rec.spend((k, PipeKey(w, worker=True), r), Category.STRAGGLER, env.now - t0)
            pipe = Pipe(PipeKey(w, worker=True), _factors(ctx.work, model, w, k), w == 0, False)
            procs = [env.process(rank_step(ctx, pipe, r, k)) for r in range(pp)]
            yield simpy.AllOf(env, procs)
            for r, proc in enumerate(procs):
                tails[(k, pipe.key, r)] = env.now - proc.value
                ctx.rec.spend((k, pipe.key, r), Category.BUBBLE, env.now - proc.value)
            staleness[w].append(max(0, max((c for i, c in enumerate(clock) if i != w), default=0) - clock[w]))
            clock[w] += 1
            state["total"] += 1
            if progress is not None:
                progress("des worker steps", state["total"], steps * dp)
            state["progress"].succeed()
            state["progress"] = simpy.Event(env)
            if state["total"] == steps * dp and not done.triggered:
                done.succeed(env.now)
            k += 1

    for w in range(dp):
        env.process(worker(w))
    env.run(until=done)
    return done.value, staleness


def _check_unrolled(layout) -> None:
    """What unrolled pipelines (several jobs, mixed clusters) do not model: context parallelism, and
    expert parallelism (an ep group spans part of dp: :func:`simulator.engine.unrolled.start_unrolled`
    would hold every replica at a barrier and play only the first ep group's all-to-all)."""
    if layout.dp_cp != layout.dp:
        raise SpecError("cp", "several jobs on one network and clusters whose nodes differ are simulated with "
                        "unrolled pipelines, which do not model context parallelism yet; use cp 1 there")
    if layout.ep > 1:
        raise SpecError("ep", "several jobs on one network and clusters whose nodes differ are simulated with "
                        "unrolled pipelines, which do not model expert parallelism yet; use ep 1 there")


def simulate(work: StepWork, cluster: Cluster, *, seed: int = 0, steps: int = 1, trace: bool = True,
             train_steps: int | None = None, shortcuts: bool = True, unrolled: bool | None = None,
             progress=None, plans=None) -> StepResult:
    """Discrete-event estimate of ``work`` on ``cluster``: mean step time over ``steps`` steps.

    ``seed`` offsets the straggler model's seed; the sum seeds the straggler draws and the failure
    sampling alike, so a plan's own seed is enough and same inputs and seed give the same timeline. ``train_steps`` (default ``steps``) is the horizon of the failure
    model's time-to-train. ``shortcuts=False`` turns off step fusion and isolated-class delays
    (every call on the network, all replicas that meet the representatives' links): slow, for checks.
    ``unrolled=True`` simulates every dp replica as its own pipeline (:mod:`simulator.engine.unrolled`):
    what several jobs on one network need; slower still. ``None`` (default): unrolled where the cluster's
    nodes differ (``Cluster.varies``: replicas are no longer mirror images of the representative, so the
    replica shortcuts switch off), except under parameter servers (representative pipelines as before).
    ``progress(phase, done, total)`` is called as steps complete (the CLI's counter on long runs).
    ``plans``: a :class:`~simulator.engine.call_plan.CallPlanner` on ``cluster`` whose memoised call plans this
    simulation uses and adds to (several simulations on one cluster share them: a planner's refinement);
    None: its own. Its ``fuse`` must be ``shortcuts``. The cyclic collector makes fewer passes meanwhile
    (:mod:`simulator.engine.gc_passes`).
    """
    positive_int("steps", steps)
    with fewer_young_passes():
        return _simulate(work, cluster, seed, steps, trace, train_steps, shortcuts, unrolled, progress, plans)


def _simulate(work: StepWork, cluster: Cluster, seed: int, steps: int, trace: bool, train_steps: int | None,
              shortcuts: bool, unrolled: bool | None, progress, plans) -> StepResult:
    wall0 = time.perf_counter()
    strategy = work.strategy
    model = replace(strategy.stragglers, seed=strategy.stragglers.seed + seed)
    if unrolled is None:
        unrolled = cluster.varies and not isinstance(strategy.dp_sync, ParamServerSync)
    ctx = _Ctx(work, cluster, trace, shortcuts, unrolled=unrolled, plans=plans)
    tails: dict[tuple, float] = {}
    extras: dict = {}
    sync = strategy.dp_sync
    if unrolled and isinstance(sync, ParamServerSync):
        raise SpecError("dp_sync", "unrolled pipelines (several jobs) model all-reduce gradient sync, not "
                        "parameter servers")
    if isinstance(sync, ParamServerSync) and sync.mode is ParamServerMode.ASYNC and ctx.layout.dp > 1:
        end_s, staleness = _async_run(ctx, model, steps, sync.staleness_steps, tails, progress)
        step_time = end_s / steps
        extras["staleness"] = staleness_summary(staleness)
    else:
        step_times: list[float] = []
        ctx.env.process(_sync_driver(ctx, model, steps, step_times, tails, progress))
        ctx.env.run()
        step_time = sum(step_times) / steps
        extras["step_times_s"] = step_times
    async_ps = "staleness" in extras
    breakdown, per_rank, slowest = accounts(ctx, tails, step_time, steps_together=not async_ps)
    extras.update(slowest)
    if strategy.failures is not None:
        extras.update(failure_extras(strategy.failures, work.world_size, step_time, train_steps or steps,
                                     model.seed))
    if work.rank_factors:
        extras["imbalance"] = imbalance(ctx.rec.accounts, ctx.layout, cluster)
    stats = ctx.net.stats
    extras.update(events=ctx.env.events_processed, flows=stats.flows, wall_s=time.perf_counter() - wall0,
                  isolated_classes=len(ctx.runner.isolated), folds=ctx.folder.folds if ctx.folder else 0,
                  unfolds=ctx.folder.unfolds if ctx.folder else 0, **call_folds(ctx.runner.callfolder))
    return StepResult(engine=Engine.DES, step_time_s=step_time, tokens_per_step=work.tokens_per_step,
                      model_flops_per_step=work.model_flops_per_step,
                      hardware_flops_per_step=work.hardware_flops_per_step, world_size=work.world_size,
                      peak_flops_per_gpu=work.peak_flops_per_gpu, breakdown=breakdown, per_rank=per_rank,
                      memory=work.memory, timeline=ctx.rec.timeline() if trace else None, extras=extras)
