"""One communication call on one group, as a timed plan of flows on the flow network.

A :class:`~simulator.work.CommCall` becomes a :class:`CallPlan` (a fixed delay, steps of flows,
then γ) that :mod:`simulator.engine.replay_work` starts on the network, with the replicas that
share its links:

- **Network replay.** The algorithm's schedule (:func:`~simulator.collectives.registry.build_schedule`)
  runs on the :class:`~simulator.engine.network.FlowNetwork` with the costs of
  :mod:`simulator.engine.collective` (per-call overhead and the schedule's latency chain as one
  delay, with the per-hop α of the protocol the registry picks; flows without latency, wire bytes
  ``b / bw_factor``; γ after the last step). A :attr:`~simulator.work.Transport.P2P` call (pipeline
  send/recv) is one flow. Host copies and fetches (``Transport.HOST*``), zero-byte calls and
  algorithms whose schedule is not their timing model (NVLS in-switch reduction) have no plan: they
  are timed delays of their ``time_s``.
- **Calibration to the cost model.** A call's uncontended time in the DES is exactly its
  ``time_s`` from the compiler: the difference between ``time_s`` and the schedule's analytical
  replay (:func:`~simulator.collectives.replay.schedule_time_s`), when positive, is added as a fixed
  delay before the first transfer. Contention can then only add to ``time_s``.
- **Step fusion (shortcut 1).** Consecutive steps whose transfers join the same (src, dst, NIC)
  pairs (a ring's 2(p−1) steps) become one step whose flows carry the summed bytes (latency is the
  chain delay, not the flows'). Alone, ``Σ_k b_k/bw``: the same time. Under contention that stays constant
  it is the same as long as one flow is the slowest of every step; it drops the per-step barrier,
  so it can only be optimistic. It turns a 16-rank ring from 30 settles into 1.

Schedules are kept in local form, shared by the groups of one shape (:mod:`simulator.engine.shapes`),
and :meth:`CallPlanner.resources` gives the links a call crosses from its pairs alone, without
timing it (docs/engine.md, shortcuts 4–7).
"""

from __future__ import annotations

from itertools import chain, repeat

from simulator.cluster.renaming_arrays import LinkRenaming, renaming_arrays
from simulator.cluster.spec import Cluster
from simulator.cluster.topology import renamed
from simulator.collectives.cost import Env, Group
from simulator.collectives.registry import build_schedule, estimate, get_algorithm
from simulator.compile.costs import CostCache
from simulator.engine.plan_bw import StepRows, steps_bw_sum
from simulator.engine.shapes import LocalSchedule, ScheduleCache, links_of
from simulator.work import CommCall, Transport


class CallPlan:
    """One group's fused replay: a fixed delay, steps of (path, wire bytes, latency), then γ."""

    __slots__ = ("pre_s", "steps", "gamma_s", "paths", "resources")

    def __init__(self, pre_s: float, steps: list, gamma_s: float, paths: tuple | None = None):
        self.pre_s, self.steps, self.gamma_s = pre_s, steps, gamma_s
        if paths is None:
            paths = tuple({id(p): p for step in steps for p, _, _ in step}.values())  # a tree's 82k flows: ~4k paths
        self.paths = paths
        """The distinct paths of the steps' flows, by first appearance (step order, flow order); ``paths`` given:
        the caller's, which must be those (:func:`distinct_paths`)."""
        self.resources = frozenset(h.resource for p in self.paths for h in p.hops)


def distinct_paths(rows: list, paths: dict) -> tuple | None:
    """:attr:`CallPlan.paths` of the steps ``[(paths[pair], b, 0.0) for pair, b in zip(pairs, nbytes)]`` of ``rows``
    (``(pairs, nbytes)`` each), from the pairs: the distinct paths of a sequence mapped from pairs are the
    distinct pairs' paths, deduplicated again, in the order of their first appearance (each path first appears
    where one of its pairs first does). A tree at 1,024 nodes: ~4k pairs over 82k flows, deduplicated in C. None
    where a row's pairs and bytes differ in length (``zip`` would cut them: the steps decide)."""
    if any(len(pairs) != len(nbytes) for pairs, nbytes in rows):
        return None
    pairs = dict.fromkeys(chain.from_iterable(pairs for pairs, _ in rows))
    return tuple({id(p): p for p in map(paths.__getitem__, pairs)}.values())


_UNPLANNED = object()
"""No plan built for a key yet (a built plan may be None: a plain delay)."""


def path_signature(paths) -> tuple:
    """The paths with their resources renamed by first appearance: each path's (resource number, link
    bandwidth) per hop, latency and link class.

    :meth:`Env.step_bw_s` reads a step's flows only through these: it adds each flow's bytes into the
    resources it crosses (renaming them is a bijection, so every load is the same sum in the same order)
    and divides by each hop's bandwidth. A schedule in local form on two groups whose pairs' paths have
    equal signatures thus gets the same bits from every step (the dp groups of the pipeline stages)."""
    number: dict = {}
    return tuple((tuple((number.setdefault(h.resource, len(number)), h.link.bw_Bps) for h in p.hops),
                  p.latency_s, p.link_class) for p in paths)


def call_key(call: CommCall, group: tuple[int, ...]) -> tuple:
    """What a plan depends on: the same call on the same group has the same plan."""
    return (call.op, call.transport, call.algorithm, call.nbytes, group, call.time_s)


class CallPlanner:
    """Builds and memoises the :class:`CallPlan` of a call on a group, and the links it crosses."""

    translate = True
    """A group's links are another group's renamed where :func:`~simulator.cluster.topology.renaming` says they
    are (:meth:`resources`: a replica of the same local pairs, a pipeline send's replica); False: every path
    asked of the topology (the reference the renaming is tested against)."""

    def __init__(self, cluster: Cluster, *, fuse: bool = True):
        self.cluster, self.fuse = cluster, fuse
        self._plans: dict[tuple, CallPlan | None] = {}
        self._envs: dict[str | None, Env] = {}
        self._paths: dict = {}
        self._resources: dict[tuple, frozenset] = {}
        self._link_renaming: LinkRenaming | None = None
        """:func:`~simulator.cluster.topology.renaming` of one link (a pipeline send's replicas), built at first use."""
        self._link_bases: dict = {}
        """id(local pairs), and (id, the group's nodes) → (pairs, links, resources) of the first group (on those
        nodes) whose links were read from the topology."""
        self._schedules = ScheduleCache(cluster)
        self._groups: dict[tuple[int, ...], Group] = {}
        self._step_bw_sums: dict[tuple, float] = {}
        """Σ step_bw_s of a schedule's steps by (local schedule, bandwidth ratio, :func:`path_signature`)."""
        self._pair_path_memo: dict[tuple, tuple[dict, dict, tuple]] = {}
        """(local pairs, group ranks) → :meth:`_pair_paths`."""
        self._step_rows: dict[int, StepRows] = {}
        """id(local schedule) → its steps as pair rows (:mod:`simulator.engine.plan_bw`)."""
        self._moves = CostCache(cluster)
        self._protocols: dict[tuple, str | None] = {}
        """The protocol the registry picks for (op, bytes, algorithm, moved group): :meth:`_protocol`."""

    def plan(self, call: CommCall, group: tuple[int, ...] | None = None) -> CallPlan | None:
        """The fused replay of ``call`` on ``group`` (default its own); None: a plain delay."""
        group = call.group if group is None else group
        key = call_key(call, group)
        plan = self._plans.get(key, _UNPLANNED)
        if plan is _UNPLANNED:
            plan = self._plans[key] = self._build(call, group)
        return plan

    def _build(self, call: CommCall, group: tuple[int, ...]) -> CallPlan | None:
        if call.nbytes <= 0 or self.cluster.world_size < 2:
            return None
        if call.transport is Transport.COLLECTIVE:
            if not get_algorithm(call.algorithm.value).schedule_times_it:
                return None  # in-switch reduction: its closed form, as a delay
            return self._collective_plan(call, group)
        if call.transport is Transport.P2P and len(group) == 2:
            costs = self._env(None)
            path = costs.path(group[0], group[1])
            alone = path.latency_s + call.nbytes / path.bottleneck_Bps
            return CallPlan(max(0.0, call.time_s - alone), [[(path, float(call.nbytes), path.latency_s)]], 0.0)
        return None

    def _env(self, protocol, family: str | None = None, group: Group | None = None) -> Env:
        """Costs under ``protocol`` for an algorithm ``family`` (its hop latencies and bandwidth ratio)
        on ``group`` (a protocol with a bus-bandwidth cap depends on it), the same :class:`Env` the
        closed forms and :func:`~simulator.collectives.replay.schedule_time_s` use."""
        capped = protocol is not None and protocol.bus_bw_cap is not None
        key = (None if protocol is None else protocol.name, family, group.ranks if capped and group else None)
        if key not in self._envs:
            self._envs[key] = Env(self.cluster, protocol, self._paths, family=family, group=group if capped else None)
        return self._envs[key]

    def _collective_plan(self, call: CommCall, group: tuple[int, ...]) -> CallPlan:
        cluster = self.cluster
        chosen = self._protocol(call, group)
        protocol = next((p for p in cluster.comm.protocols if p.name == chosen), None)
        local, shaped = self._local(call, group)
        algorithm = get_algorithm(local.algorithm)
        costs = self._env(protocol, algorithm.family, shaped)
        links, paths, signature = self._pair_paths(local, shaped)
        fused = local.fused(1.0 / costs.bw_ratio, self.fuse)
        steps = [list(zip(map(paths.__getitem__, pairs), nbytes, repeat(0.0)))
                 for pairs, nbytes in fused]  # (path, bytes, 0.0) per flow
        # schedule_time_s's terms on the same flows: overhead + Σ step_bw_s (each distinct step once) +
        # the algorithm's schedule latency + its exposed γ; the latency is also the plan's fixed delay.
        gamma_s = algorithm.gamma_s(costs, local.reduce_bytes_per_rank)  # a pipelined reduction overlaps
        bw_key = (local, costs.bw_ratio, signature)
        if bw_key not in self._step_bw_sums:  # Env.step_bw_s of each distinct step, summed in step order
            rows = self._step_rows.get(id(local))
            if rows is None or rows.local is not local:
                rows = self._step_rows[id(local)] = StepRows(local)  # keeps local alive: its id stays its own
            self._step_bw_sums[bw_key] = steps_bw_sum(rows, costs, [paths[pair] for pair in local.pairs])
        if algorithm.chunk_pipelined(call.op):  # chunk-level chain + per-chunk overhead
            chain_s = local.pipeline_s(costs, shaped, links, lambda s: algorithm.schedule_latency_s(costs, s),
                                       lambda: self._build_schedule(call, group),
                                       lambda: algorithm.chunk_pipeline_latency_s(costs, shaped, call.op, call.nbytes))
        else:
            chain_s = local.chain_s(costs, lambda: local.chain_flow_steps(shaped), links)
        overhead_s = costs.overhead_s(algorithm.family, algorithm.calls, call.op, len(group))
        replay_s = overhead_s + self._step_bw_sums[bw_key] + chain_s + gamma_s  # in schedule_time_s's order
        # a call priced below its replay takes the difference off its wait for a core, at most that wait (a DTensor
        # call's measured wait in place of the sweep's, simulator.cluster.dtensor_wait); none under a protocol
        wait_s = algorithm.calls * costs.blocking_wait_s(call.op, len(group))
        pre_s = overhead_s + max(0.0, call.time_s - replay_s) - min(wait_s, max(0.0, replay_s - call.time_s)) + chain_s
        return CallPlan(pre_s, steps, gamma_s, distinct_paths(fused, paths))

    def _pair_paths(self, local: LocalSchedule, shaped: Group) -> tuple[dict, dict, tuple]:
        """``local``'s pairs on ``shaped``: pair → (src, dst, NIC), pair → path, and :func:`path_signature` of the
        pairs' paths in pair order, kept per (pairs, group): a dp group's tree plans of two bucket sizes have the
        same pairs (the tree's links do not depend on its chunk count), so at dp 1,024 its 4,088 links, paths and
        signature are read once, not once per size (des28). Paths do not depend on the protocol: every
        :class:`Env` of this planner reads one cache (:meth:`_env`)."""
        key = (local.pairs, shaped.ranks)
        found = self._pair_path_memo.get(key)
        if found is None:
            links = dict(zip(local.pairs, local.links(shaped)))
            path_of = self._env(None).path
            paths = {pair: path_of(*link) for pair, link in links.items()}  # once per pair, not per flow and step
            found = self._pair_path_memo[key] = (links, paths, path_signature(paths.values()))
        return found

    def _protocol(self, call: CommCall, group: tuple[int, ...]) -> str | None:
        """The protocol :func:`~simulator.collectives.registry.estimate` picks for the call on ``group``, asked
        once per moved group (:meth:`~simulator.compile.costs.CostCache.moved`: every cost answer on a group is
        the answer on its moved group, so the fastest protocol and its ties are too): the tp groups of every
        node and the dp groups of every stage share one estimate (GPT-3 175B's refinement on 1,024 A100s:
        1,888 estimates on large groups before)."""
        moved = self._moves.moved(group)
        key = (call.op, call.nbytes, call.algorithm, moved)
        if key not in self._protocols:
            self._protocols[key] = estimate(self.cluster, moved, call.op, call.nbytes, call.algorithm.value).protocol
        return self._protocols[key]

    def _local(self, call: CommCall, group: tuple[int, ...]) -> tuple[LocalSchedule, Group]:
        """The call's schedule in local form (shared between groups of one shape) and the group's layout."""
        shaped = self._group(group)
        local = self._schedules.get(shaped, call.op, call.nbytes, call.algorithm.value,
                                    lambda: self._build_schedule(call, group))
        return local, shaped

    def _group(self, group: tuple[int, ...]) -> Group:
        shaped = self._groups.get(group)
        if shaped is None:
            shaped = self._groups[group] = Group(self.cluster, group).share_paths(self._paths)  # one path cache
        return shaped

    def _build_schedule(self, call: CommCall, group: tuple[int, ...]):
        return build_schedule(self.cluster, group, call.op, call.nbytes, call.algorithm.value)

    def resources(self, call: CommCall, group: tuple[int, ...]) -> frozenset:
        """Link resources the call's flows on ``group`` cross (those of :meth:`plan`, without timing it)."""
        key = call_key(call, group)  # hashed once per look-up below: a tuple of three enums (~114k sends' replicas)
        plan = self._plans.get(key, _UNPLANNED)
        if plan is not _UNPLANNED:
            return frozenset() if plan is None else plan.resources
        found = self._resources.get(key)
        if found is None:
            if self._needs_timing(call, group):
                found = self._paths_of(call, group)
            else:
                found = self._moved_send(call, group)
                if found is None:
                    plan = self.plan(call, group)
                    found = frozenset() if plan is None else plan.resources
            self._resources[key] = found
        return found

    def _needs_timing(self, call: CommCall, group: tuple[int, ...]) -> bool:
        """A collective replayed on links: its plan needs the schedule's timing, its resources only the pairs."""
        return (call.transport is Transport.COLLECTIVE and call.nbytes > 0 and self.cluster.world_size >= 2
                and get_algorithm(call.algorithm.value).schedule_times_it)

    def _paths_of(self, call: CommCall, group: tuple[int, ...]) -> frozenset:
        """The resources of the pairs' paths on ``group``: those of the first group of the same local pairs,
        renamed, where :func:`~simulator.cluster.topology.renaming` carries its links onto these."""
        shaped = self._group(group)
        pairs = self._schedules.pairs(shaped, call.op, call.nbytes, call.algorithm.value,
                                      lambda: self._build_schedule(call, group))
        links = links_of(pairs, shaped)
        gpn = self.cluster.node.gpus_per_node
        on_nodes = (id(pairs), frozenset(r // gpn for r in group))
        bases = [self._link_bases.get(on_nodes), self._link_bases.get(id(pairs))]
        bases = [b for b in bases if b is not None and b[0] is pairs]  # not another tuple under a reused id
        if self.translate:  # a group on the same nodes first (a tp replica: no leaf crossing changes)
            for base in bases:
                moves = renaming_arrays(self.cluster, base[1], links)  # the loop's answer, on arrays when long
                if moves is not None:
                    return frozenset(renamed(base[2], moves))
        costs = self._env(None)
        res = frozenset(h.resource for src, dst, nic in links for h in costs.path(src, dst, nic).hops)
        self._link_bases.setdefault(id(pairs), (pairs, links, res))  # the pairs kept: their id stays theirs
        self._link_bases.setdefault(on_nodes, (pairs, links, res))
        return res

    def _moved_send(self, call: CommCall, group: tuple[int, ...]) -> frozenset | None:
        """A pipeline send's resources on ``group`` as its representative's renamed (:func:`~simulator.cluster.topology.renaming`), or None."""
        if not (self.translate and call.transport is Transport.P2P and len(group) == len(call.group) == 2
                and group != call.group):
            return None
        base = self.plan(call)
        if self._link_renaming is None:
            self._link_renaming = LinkRenaming(self.cluster)
        moves = None if base is None else self._link_renaming((*call.group, None), (*group, None))
        return None if moves is None else frozenset(renamed(base.resources, moves))
