"""A step's communication calls started on the flow network, with the replicas that share its links.

A :class:`~simulator.work.CommCall` names the representative group; ``concurrent_groups`` says how
many identical groups run it at the same moment. :class:`CommRunner` turns a call into SimPy work:
the call's plan on each group (network replay, calibration to the cost model and step fusion,
shortcut 1) is built by :mod:`simulator.engine.call_plan`; this module chooses which replica groups
go on the network with it, finds the classes of calls that can be timed alone, and starts the plans.

- **Replicas that matter (shortcut 2).** Replica groups (the same call on other dp / tp indices,
  found by shifting the group's coordinates along the dimensions it does not span) go on the
  network only if their links meet a link the representative ranks use somewhere in the step;
  a replica on disjoint links is a mirror image of the representative and cannot change its time.
- **Isolated classes (shortcut 3).** Calls are grouped in classes (stage × stream: tp, pp, dp,
  zero); the calls of one class never overlap each other (one stream, lockstep replicas). A class
  whose links (replicas included) meet no other class's links sees no contention but its own
  replicas', so each of its calls is a delay equal to its time alone with those replicas, measured
  once per distinct call in a scratch network. This is exact, and it is what keeps a 1024-GPU step's
  tens of thousands of NVLink all-reduces off the flow network.
- **At scale** (docs/engine.md, shortcuts 4–7; each tested equal to what it replaces): schedules in
  local form shared by groups of one shape (:mod:`simulator.engine.shapes`), each distinct step timed
  once, replica checks on links only, and a call's single-step replicas started as one batch.
"""

from __future__ import annotations

import itertools

import simpy

from simulator.cluster.spec import Cluster
from simulator.engine.call_plan import CallPlan, CallPlanner, call_key
from simulator.engine.network import FlowNetwork
from simulator.engine.replica_shifts import whole_shifts
from simulator.engine.unrolled import tp_copies
from simulator.errors import SpecError
from simulator.strategy import ParallelLayout
from simulator.work import CommCall


def replica_groups(layout: ParallelLayout, group: tuple[int, ...], count: int,
                   shift_arrays: bool = True) -> list[tuple[int, ...]]:
    """Up to ``count − 1`` copies of ``group`` shifted along the dp/tp dimensions it does not span, and,
    for a group spanning part of dp (an expert-parallel, expert-data-parallel or context-parallel group), along dp by
    the offsets that give groups disjoint from those already taken. ``shift_arrays``: a group spanning none or all
    of dp, on arrays (:func:`~simulator.engine.replica_shifts.whole_shifts`); False: the loop (the reference)."""
    if count <= 1 or any(not 0 <= r < layout.world_size for r in group):
        return []
    coords = [layout.coords(r) for r in group]
    spanned = {d for d in ("dp", "tp") if len({getattr(c, d) for c in coords}) > 1}
    free = [d for d in ("dp", "tp") if d not in spanned]
    n_dp = layout.dims["dp"]  # dp coordinates: dp·cp (a cp group spans part of them too)
    partial_dp = "dp" in spanned and len({c.dp for c in coords}) < n_dp
    offsets = range(n_dp) if partial_dp else (0,)
    # rank_of is mixed-radix, so linear in the coordinates: rank = dp·s_dp + pp·s_pp + tp·s_tp, the strides
    # read from rank_of itself (a copy costs one multiply-add per rank, not a rank_of call)
    s_dp, s_pp, s_tp = (layout.rank_of(dp=int(d == "dp"), pp=int(d == "pp"), tp=int(d == "tp")) if layout.dims[d] > 1
                        else 0 for d in ("dp", "pp", "tp"))
    if not partial_dp and shift_arrays:  # every copy disjoint from the others: the loop's answer without its checks
        copies = whole_shifts(group, coords, free, layout.dims, {"dp": s_dp, "pp": s_pp, "tp": s_tp}, count)
        if copies is not None:
            return copies
    out, used = [], set(group)
    for combo in itertools.product(*(range(layout.dims[d]) for d in free)):
        shift = dict(zip(free, combo))
        for k in offsets:
            g = tuple(((shift.get("dp", c.dp) + k) % n_dp) * s_dp + c.pp * s_pp + shift.get("tp", c.tp) * s_tp
                      for c in coords)
            if used.isdisjoint(g):
                out.append(g)
                used.update(g)
            if len(out) == count - 1:
                return out
    return out


class CommRunner(CallPlanner):
    """Starts communication calls on one environment's network (see the module docstring); the plans
    of the calls and of their replicas come from :class:`~simulator.engine.call_plan.CallPlanner`."""

    merge_replicas = True
    """Start the single-step replicas of a call as one batch (:meth:`_start_replicas`); False: one
    process each (the reference the batching is tested against)."""

    def __init__(self, env: simpy.Environment, net: FlowNetwork, cluster: Cluster, layout: ParallelLayout,
                 *, replicas: bool = True, fuse: bool = True, plans: CallPlanner | None = None):
        super().__init__(cluster, fuse=fuse)
        if plans is not None:
            self._share(plans)
        self.env, self.net, self.layout = env, net, layout
        self.use_replicas = replicas
        self._replicas: dict[tuple, list[tuple[int, ...]]] = {}
        self._alone: dict[tuple, float] = {}
        self._launchers: dict[tuple, tuple] = {}
        self._unrolled: dict[tuple, tuple] = {}
        self.isolated: set = set()
        """Class keys found isolated by :meth:`prepare`."""
        self.callfolder = None
        """Plays calls whose links are idle as delays (:mod:`simulator.engine.callfold`); None: off."""

    def _share(self, plans: CallPlanner) -> None:
        """Use the memoised plans of ``plans`` (and add to them): a call's plan on a group is a function of the
        cluster, the fusion switch and the call (:func:`~simulator.engine.call_plan.call_key`), not of the
        simulation, so simulations on one cluster may share every memo of a :class:`CallPlanner`."""
        if plans.cluster is not self.cluster and plans.cluster != self.cluster:
            raise SpecError("plans", "the call plans belong to another cluster; share them on one cluster only")
        if plans.fuse != self.fuse:
            raise SpecError("plans", f"the call plans were built with fuse={plans.fuse}; this run has {self.fuse}")
        for name, memo in vars(plans).items():
            if name not in ("cluster", "fuse"):
                setattr(self, name, memo)

    # ---- replicas -------------------------------------------------------------------------------

    def replicas(self, call: CommCall) -> list[tuple[int, ...]]:
        """Replica groups of ``call`` kept on the network (all of them before :meth:`prepare`)."""
        if not self.use_replicas:
            return []
        key = (call.kind, call.op, call.algorithm, call.group, call.concurrent_groups)
        if key not in self._replicas:
            self._replicas[key] = replica_groups(self.layout, call.group, call.concurrent_groups)
        return self._replicas[key]

    def prepare(self, classes: dict, isolate: bool = True) -> None:
        """Drop replicas on links the representatives never use; find the isolated classes.

        ``classes`` maps a class key to its calls (see the module docstring, shortcuts 2 and 3); a call object
        listed several times (a chunk's calls repeat per layer) is looked at once: every step here is idempotent.
        """
        classes = {key: list({id(c): c for c in calls}.values()) for key, calls in classes.items()}
        rep: set = set()
        for calls in classes.values():
            for call in calls:
                plan = self.plan(call)
                if plan is not None:
                    rep |= plan.resources
        class_res = {}
        for key, calls in classes.items():
            res: set = set()
            for call in calls:
                plan = self.plan(call)
                if plan is None:
                    continue
                res |= plan.resources
                rkey = (call.kind, call.op, call.algorithm, call.group, call.concurrent_groups)
                kept = [g for g in self.replicas(call) if self.resources(call, g) & rep]
                self._replicas[rkey] = kept
                for g in kept:
                    res |= self.resources(call, g)
            class_res[key] = res
        for key, res in class_res.items() if isolate else ():
            others = set().union(*(r for k, r in class_res.items() if k != key))
            if not res & others:
                self.isolated.add(key)

    # ---- running --------------------------------------------------------------------------------

    def alone_s(self, call: CommCall) -> float:
        """Time of ``call`` with its kept replicas on an otherwise idle network (memoised)."""
        key = call_key(call, call.group) + (tuple(self.replicas(call)),)
        if key not in self._alone:
            plan = self.plan(call)
            if plan is None:
                self._alone[key] = call.time_s
            else:
                env = simpy.Environment()
                net = FlowNetwork(env)
                proc = env.process(_replay(env, net, plan))
                for g in self.replicas(call):
                    env.process(_replay(env, net, self.plan(call, g)))
                env.run()
                self._alone[key] = proc.value
        return self._alone[key]

    def start(self, call: CommCall, klass, *, network: bool = True) -> simpy.Event:
        """Start ``call`` now; the event fires when the representative group is done.

        ``network=False`` (a straggler pipeline's or an async worker's copy of the call) times it
        as it would run alone, so replicas are not counted twice.
        """
        delay_s, plans = self.launch(call, klass, network)
        if delay_s is not None:
            return self.env.timeout(delay_s)
        if self.callfolder is not None:  # plans[0] is memoised per call content, so its id names the shape
            done = self.callfolder.start((id(plans[0]), call.kind, call.concurrent_groups), plans)
            if done is not None:
                return done
            if self.callfolder.enabled:  # on the network, its rest folded once its links are its own again
                return self.callfolder.play(plans)
        done = _play(self.env, self.net, plans[0])
        for plan in plans[1:]:
            _play(self.env, self.net, plan)
        return done

    def launch(self, call: CommCall, klass, network: bool = True) -> tuple[float | None, list[CallPlan]]:
        """What :meth:`start` runs for ``call`` (memoised per call object): ``(delay_s, [])``, or
        ``(None, plans)``: the representative's plan first, then its replicas' (batched)."""
        key = (id(call), klass, network)
        entry = self._launchers.get(key)
        if entry is None or entry[0] is not call:  # the call object is kept, so its id is not reused
            entry = self._launchers[key] = (call, *self._launcher(call, klass, network))
        return entry[1], entry[2]

    def start_groups(self, call: CommCall, klass, group: tuple[int, ...]) -> simpy.Event:
        """Start ``call`` on ``group`` and on its copies at the other tp indices, all on the network;
        the event fires when every one is done (unrolled pipelines, :mod:`simulator.engine.unrolled`)."""
        key = (id(call), group)
        entry = self._unrolled.get(key)
        if entry is None or entry[0] is not call:
            plans = [self.plan(call, g) for g in (group, *tp_copies(self.layout, group))]
            entry = self._unrolled[key] = (call, [p for p in plans if p is not None])
        plans = entry[1]
        if not plans:
            return self.env.timeout(call.time_s)
        return simpy.AllOf(self.env, [self.env.process(_replay(self.env, self.net, p)) for p in plans])

    def _launcher(self, call: CommCall, klass, network: bool) -> tuple[float | None, list[CallPlan]]:
        """How :meth:`start` runs ``call``: a delay, or the representative's plan then its replicas'.

        Kept replicas of one step with the same fixed delay are one batch: nobody waits for a replica,
        so its flows need no process of their own; the batch starts the same flows at the same instants
        in the same order. Multi-step replicas keep a process each (a step waits for their previous one).
        """
        plan = self.plan(call)
        if plan is None:
            return call.time_s, []
        if not network or klass in self.isolated:
            return self.alone_s(call), []
        plans, batches = [plan], {}
        for g in self.replicas(call):
            rep = self.plan(call, g)
            if rep is None:
                continue
            if self.merge_replicas and len(rep.steps) <= 1:
                batches.setdefault(rep.pre_s, []).extend(rep.steps[0] if rep.steps else ())
            else:
                plans.append(rep)
        plans += [CallPlan(pre_s, [items], 0.0) for pre_s, items in batches.items()]
        return None, plans


def _replay(env: simpy.Environment, net: FlowNetwork, plan: CallPlan):
    start = env.now
    if plan.pre_s > 0:
        yield env.timeout(plan.pre_s)
    for items in plan.steps:
        yield net.transfer_all(items)
    if plan.gamma_s > 0:
        yield env.timeout(plan.gamma_s)
    return env.now - start


def _play(env: simpy.Environment, net: FlowNetwork, plan: CallPlan) -> simpy.Event:
    """:func:`_replay` without a process: the same delays and transfers started at the same instants, chained
    by callbacks; the event fires (value: the duration) when the plan is done."""
    done = simpy.Event(env)
    start, steps = env.now, plan.steps

    def run(i: int) -> None:
        if i < len(steps):
            net.transfer_step(steps[i]).callbacks.append(lambda _event: run(i + 1))
        elif plan.gamma_s > 0:
            env.timeout(plan.gamma_s).callbacks.append(lambda _event: done.succeed(env.now - start))
        else:
            done.succeed(env.now - start)

    if plan.pre_s > 0:
        env.timeout(plan.pre_s).callbacks.append(lambda _event: run(0))
    else:
        run(0)
    return done
