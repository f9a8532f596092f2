"""Several training jobs on one cluster: each job's step time alone and together, and where it slows.

Each job is a (workload, strategy, nodes) on the shared cluster; its ranks fill its own nodes
(:class:`~simulator.cluster.placement.PlacedCluster`), so its flows name the cluster's real links and
two jobs' flows share a link where both cross it, max-min fairly like one job's own flows
(:mod:`simulator.engine.network`). Jobs hold disjoint nodes, so the only links two jobs can share are
a leaf's spine uplinks under ``inter_node.leaf_uplinks: shared`` (with ``per_nic`` every link a job
uses belongs to one of its nodes).

What runs (``shortcuts=True``):

- **Job isolation (exact).** A job's spine footprint is the leaves of its own nodes (every flow of
  a job goes between two of its nodes); jobs whose footprints meet are joined, transitively, into a
  component. Max-min rates couple flows only through shared resources, so a job alone in its
  component runs exactly as it runs alone: it is simulated once, by the step engine with its own
  shortcuts, and its together time is its alone time.
- **Co-simulation.** The jobs of a component run on one flow network as unrolled pipelines
  (:mod:`simulator.engine.unrolled`: every dp replica, every group, no replica or isolation
  shortcut and no step fusion — a second job breaks the symmetry they rely on). Each job runs steps
  back to back until every job of the component has done ``steps``, so every counted step runs with
  all the other jobs' traffic; a job's together time is the mean of its first ``steps``. Its alone
  time comes from the same unrolled play with the job alone.

``shortcuts=False`` co-simulates all jobs in one component (the reference the isolation is tested
against). Link time per tier: the sum, over a job's flows in its counted steps, of each flow's time
from request to last byte, by the outermost tier it crosses (intra-node, NIC, spine); alone against
together, it says at which tier the sharing costs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from enum import Enum

import simpy

from simulator.cluster.placement import PlacedCluster, check_nodes, placed
from simulator.cluster.spec import Cluster, LeafUplinks
from simulator.cluster.topology import leaf_of
from simulator.compile import compile_step
from simulator.engine.network import FlowNetwork
from simulator.engine.rank import rank_step
from simulator.engine.step import _Ctx, _pipes_for_step, simulate
from simulator.engine.streams import CountingEnv
from simulator.errors import SpecError
from simulator.strategy import Strategy
from simulator.strategy.sync import ParamServerSync
from simulator.work import StepWork


class LinkTier(Enum):
    """The outermost level of the network a flow crosses."""

    INTRA_NODE = "intra_node"
    """Inside a node: NVLink / NVSwitch ports, PCIe."""
    NIC = "nic"
    """Between nodes under one leaf: the NICs (and their host staging)."""
    SPINE = "spine"
    """Between leaves: a leaf's uplinks to the spine."""


RESOURCE_TIER = {"port_tx": LinkTier.INTRA_NODE, "port_rx": LinkTier.INTRA_NODE, "nvlink": LinkTier.INTRA_NODE,
                 "switch_up": LinkTier.INTRA_NODE, "switch_down": LinkTier.INTRA_NODE, "socket": LinkTier.INTRA_NODE,
                 "host_stage": LinkTier.NIC, "nic_tx": LinkTier.NIC, "nic_rx": LinkTier.NIC,
                 "leaf_up": LinkTier.SPINE, "leaf_down": LinkTier.SPINE}
"""Tier of each link resource kind of :mod:`simulator.cluster.topology`."""
_ORDER = list(LinkTier)


@dataclass(frozen=True)
class Job:
    """One training job on the shared cluster."""

    name: str
    workload: object
    """A :class:`~simulator.workload.Workload` (a transformer or a layer list)."""
    strategy: Strategy
    nodes: tuple[int, ...]
    """Cluster nodes it runs on, all their GPUs (its ranks fill them in this order)."""


@dataclass(frozen=True)
class TierTime:
    """A job's link time at one tier, alone and together."""

    tier: LinkTier
    alone_s: float
    together_s: float

    @property
    def slowdown(self) -> float:
        return self.together_s / self.alone_s if self.alone_s > 0 else 1.0


@dataclass(frozen=True)
class JobResult:
    """One job's step alone and with the others."""

    name: str
    nodes: tuple[int, ...]
    gpus: int
    alone_step_s: float
    together_step_s: float
    shares_with: tuple[str, ...]
    """Jobs it was co-simulated with (its component); empty: isolated, together = alone exactly."""
    tiers: tuple[TierTime, ...] = ()
    """Link time per tier (co-simulated jobs only)."""

    @property
    def slowdown(self) -> float:
        """Together over alone step time."""
        return self.together_step_s / self.alone_step_s

    def to_dict(self) -> dict:
        return {"name": self.name, "nodes": list(self.nodes), "gpus": self.gpus, "alone_step_s": self.alone_step_s,
                "together_step_s": self.together_step_s, "slowdown": self.slowdown,
                "shares_with": list(self.shares_with),
                "link_time_by_tier": {t.tier.value: {"alone_s": t.alone_s, "together_s": t.together_s,
                                                     "slowdown": t.slowdown} for t in self.tiers}}


@dataclass(frozen=True)
class JobsResult:
    jobs: tuple[JobResult, ...]
    steps: int
    wall_s: float
    """Wall-clock seconds of the whole estimate (compile and simulation)."""

    def to_dict(self) -> dict:
        return {"steps": self.steps, "wall_s": self.wall_s, "jobs": [j.to_dict() for j in self.jobs]}


def simulate_jobs(cluster: Cluster, jobs: list[Job], *, steps: int = 1, seed: int = 0,
                  shortcuts: bool = True) -> JobsResult:
    """Each job's step time alone and together on ``cluster`` (see the module docstring)."""
    wall0 = time.perf_counter()
    if not jobs:
        raise SpecError("jobs", "give at least one job")
    _check(cluster, jobs)
    members = []
    for i, job in enumerate(jobs):
        view = placed(cluster, job.nodes)
        try:
            work = compile_step(view, job.workload, job.strategy, memory=False)
        except SpecError as err:
            raise SpecError(f"jobs[{i}].{err.field}", err.problem) from None
        members.append((job, view, work))
    components = _components(cluster, jobs) if shortcuts else [list(range(len(jobs)))]
    results: dict[int, JobResult] = {}
    for comp in components:
        if len(comp) == 1 and shortcuts:
            job, view, work = members[comp[0]]
            t = simulate(work, view, seed=seed, steps=steps, trace=False).step_time_s
            results[comp[0]] = JobResult(job.name, job.nodes, work.world_size, t, t, ())
            continue
        together = _cosimulate([members[i][1:] for i in comp], steps, seed)
        for i, (t_s, flows) in zip(comp, together):
            job, view, work = members[i]
            alone_s, alone_flows = _cosimulate([(view, work)], steps, seed)[0]
            tiers = tuple(TierTime(t, alone_flows.get(t, 0.0), flows.get(t, 0.0)) for t in _ORDER
                          if t in alone_flows or t in flows)
            others = tuple(jobs[j].name for j in comp if j != i)
            results[i] = JobResult(job.name, job.nodes, work.world_size, alone_s, t_s, others, tiers)
    return JobsResult(tuple(results[i] for i in range(len(jobs))), steps, time.perf_counter() - wall0)


def _check(cluster: Cluster, jobs: list[Job]) -> None:
    if isinstance(cluster, PlacedCluster):
        raise SpecError("cluster", "give the shared cluster, not one job's view of it")
    seen: dict[int, str] = {}
    names = set()
    for i, job in enumerate(jobs):
        if not isinstance(job, Job):
            raise SpecError(f"jobs[{i}]", f"must be a Job, got {type(job).__name__}")
        if job.name in names:
            raise SpecError(f"jobs[{i}].name", f"{job.name!r} names two jobs; give each job its own name")
        names.add(job.name)
        check_nodes(f"jobs[{i}].nodes", job.nodes, cluster.nodes)
        for n in job.nodes:
            if n in seen:
                raise SpecError(f"jobs[{i}].nodes", f"node {n} is also job {seen[n]!r}'s; jobs hold whole nodes")
            seen[n] = job.name
        if isinstance(job.strategy.dp_sync, ParamServerSync):
            raise SpecError(f"jobs[{i}].dp_sync", "several jobs are modelled with all-reduce gradient sync; "
                            "parameter servers are not supported here")
        if job.strategy.failures is not None:
            raise SpecError(f"jobs[{i}].mtbf_gpu_hours", "the failure model is per job: simulate the job alone")


def spine_footprint(cluster: Cluster, nodes: tuple[int, ...]) -> frozenset:
    """Leaves whose shared uplinks a job on ``nodes`` may cross: those of its own nodes' NICs, when it
    can leave a leaf at all (several leaf groups, or rails with their own leaves); empty without shared
    uplinks (every other link it uses belongs to one of its nodes)."""
    net = cluster.network
    if net is None or net.leaf_uplinks is not LeafUplinks.SHARED or len(nodes) < 2:
        return frozenset()
    leaves = {leaf_of(cluster, n, nic) for n in nodes for nic in range(cluster.node.nics_per_node)}
    if not net.rail_optimized and len({leaf[0] for leaf in leaves}) < 2:
        return frozenset()
    return frozenset(leaves)


def _components(cluster: Cluster, jobs: list[Job]) -> list[list[int]]:
    """Jobs joined when their spine footprints meet, transitively (union-find), in job order."""
    parent = list(range(len(jobs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict = {}
    for i, job in enumerate(jobs):
        for leaf in spine_footprint(cluster, job.nodes):
            if leaf in owner:
                parent[root(i)] = root(owner[leaf])
            else:
                owner[leaf] = i
    comps: dict[int, list[int]] = {}
    for i in range(len(jobs)):
        comps.setdefault(root(i), []).append(i)
    return list(comps.values())


class _Recording:
    """A job's window on the shared network: starts its transfers there and keeps its flows."""

    def __init__(self, net: FlowNetwork):
        self.net, self.flows = net, []

    def transfer_all(self, items) -> simpy.Event:
        return self._kept(self.net.transfer_all(items))

    def transfer_step(self, step) -> simpy.Event:
        return self._kept(self.net.transfer_step(step))

    def _kept(self, event: simpy.Event) -> simpy.Event:
        event.callbacks.append(lambda ev: self.flows.extend(ev.value))
        return event


def _cosimulate(members: list[tuple[PlacedCluster, StepWork]], steps: int,
                seed: int) -> list[tuple[float, dict[LinkTier, float]]]:
    """Unrolled jobs on one network, each stepping until all did ``steps``: per job, its mean step time
    over its first ``steps`` and its link time per tier in them."""
    env = CountingEnv()
    net = FlowNetwork(env)
    runs = []
    for view, work in members:
        window = _Recording(net)
        ctx = _Ctx(work, view, False, False, env=env, net=window, unrolled=True)
        model = replace(work.strategy.stragglers, seed=work.strategy.stragglers.seed + seed)
        done, times = simpy.Event(env), []
        env.process(_stepping(ctx, model, steps, times, done))
        runs.append((window, times, done))
    env.run(until=simpy.AllOf(env, [done for _, _, done in runs]))
    out = []
    for window, times, done in runs:
        by_tier: dict[LinkTier, float] = {}
        for f in window.flows:
            if f.start_s < done.value:
                tier = max((RESOURCE_TIER[h.resource[0]] for h in f.path.hops), key=_ORDER.index)
                by_tier[tier] = by_tier.get(tier, 0.0) + f.finish_s - f.start_s
        out.append((sum(times) / steps, by_tier))
    return out


def _stepping(ctx: _Ctx, model, steps: int, times: list, done: simpy.Event):
    """Steps back to back, for ever; ``done`` fires (value: the time) when ``steps`` are done."""
    env, k = ctx.env, 0
    while True:
        pipes = _pipes_for_step(ctx.work, model, k, unrolled=True)
        ctx.parties_of[k] = len(pipes)
        t0 = env.now
        yield simpy.AllOf(env, [env.process(rank_step(ctx, p, r, k)) for p in pipes for r in range(ctx.layout.pp)])
        if env.now <= t0:
            raise SpecError("jobs", "a job's step takes no time; nothing to share")
        k += 1
        if k <= steps:
            times.append(env.now - t0)
        if k == steps:
            done.succeed(env.now)
