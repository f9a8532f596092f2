"""A collective's schedule in group-local form, built once and shared by every group of the same shape.

At scale the step DES meets the same collective on many groups: the dp all-reduce of every pipeline
stage and of every tp index, each a ring whose schedule holds ``2(p−1)·p·C`` transfers. Building and
timing each of them is O(p²) per group, which made a 16k-GPU step quadratic in the ranks. The
schedules of those groups are the same in *local* terms (group indices), so this module keeps one
:class:`LocalSchedule` per (algorithm, op, bytes, shape) and maps it onto a group in O(its distinct
transfers):

- **Shape** (:func:`shape_of`): the group's size, its partition into nodes (in group indices) and how
  many distinct NICs its GPUs own on each node. A transfer's NIC is kept as its index in the sender
  node's NIC set (:attr:`~simulator.collectives.cost.Group.nic_sets`), so a group whose GPUs sit on
  other NICs (a tp-shifted replica) maps it to its own.
- **Which schedules are shared** (:data:`SHAPE_ONLY`): those of the ring's reduce-scatter, all-gather
  and all-reduce, which :func:`simulator.collectives.ring.ring_transfers` builds from the group's node
  order, channel count and each channel's NIC by index, nothing else. Every other (algorithm, op) is
  built per group, as before (a pipelined broadcast picks its chunk count from the paths' costs).
  ``tests/test_engine_shortcuts.py`` checks a shared schedule against a fresh build on groups of every
  kind the engine maps it to.
- **Distinct steps**: steps of equal content are one entry (a ring's steps carry equal slices when the
  bytes divide evenly), so a group's step flows are built once per distinct content and shared
  between steps, which the id-memos of :meth:`Env.steps_time_s` and :meth:`Env.chain_latency_s` use.
"""

from __future__ import annotations

import numpy as np

from simulator.cluster.spec import Cluster
from simulator.collectives.base import Op, Schedule
from simulator.collectives.cost import Env, Flow, Group

SHAPE_ONLY = frozenset({("ring", Op.ALL_REDUCE), ("ring", Op.REDUCE_SCATTER), ("ring", Op.ALL_GATHER)})
"""(algorithm name, op) whose schedule depends on the group only through :func:`shape_of`."""


def shape_of(group: Group) -> tuple:
    """Size, node partition (group indices) and NICs owned per node: what a shared schedule may use."""
    return group.p, group.nodes, tuple(len(s) for s in group.nic_sets)


class LocalSchedule:
    """A schedule in group indices: distinct step contents ``(src, dst, nbytes, nic index)`` and the
    step sequence as indices into them (empty steps kept, as :meth:`Schedule.steps` gives them)."""

    __slots__ = ("algorithm", "schedule", "reduce_bytes_per_rank", "contents", "sequence", "pairs", "_fused",
                 "_chains")

    def __init__(self, schedule: Schedule, group: Group):
        self.algorithm = schedule.algorithm
        self.schedule = schedule
        """The schedule on the group it was built for: what a chunk pipeline's latency is read from
        (:meth:`Algorithm.schedule_latency_s`); those are built per group, never shared (SHAPE_ONLY)."""
        self.reduce_bytes_per_rank = schedule.reduce_bytes_per_rank
        nic_index = [{nic: i for i, nic in enumerate(nics)} for nics in group.nic_sets]
        node = group.node_index
        seen: dict[tuple, int] = {}
        self.contents: list[tuple] = []
        self.sequence: list[int] = []
        for step in schedule.steps():
            content = tuple((t.src, t.dst, t.nbytes, None if t.nic is None else nic_index[node[t.src]][t.nic])
                            for t in step)
            k = seen.get(content)
            if k is None:
                k = seen[content] = len(self.contents)
                self.contents.append(content)
            self.sequence.append(k)
        self.pairs = tuple(dict.fromkeys((s, d, n) for c in self.contents for s, d, b, n in c if b > 0))
        """Distinct (src, dst, nic index) that carry bytes: the links the schedule uses."""
        self._fused: dict[tuple, list] = {}
        self._chains: dict[tuple, float] = {}

    def chain_s(self, costs: Env, flow_steps: list[list[Flow]], links: dict) -> float:
        """:meth:`Env.chain_latency_s` of ``flow_steps`` (this schedule on one group, ``links`` its
        :attr:`pairs` → (src, dst, NIC)), computed once per distinct α of the pairs: the chain only
        reads each flow's α and uses ranks as labels, so groups whose pairs have equal α share it."""
        paths = [costs.path(*links[pair]) for pair in self.pairs]  # α and class: network posts add (Env.edges)
        key = tuple((costs.latency_s(p), p.link_class) for p in paths)
        if key not in self._chains:
            self._chains[key] = costs.chain_latency_s(flow_steps)
        return self._chains[key]

    def flow_steps(self, group: Group) -> list[list[Flow]]:
        """Each step's cost-model flows on ``group``'s ranks, one shared list per distinct content."""
        nic = _nic_of(group)
        ranks = group.ranks
        lists = [[Flow(ranks[s], ranks[d], b, nic(s, n)) for s, d, b, n in c] for c in self.contents]
        return [lists[k] for k in self.sequence]

    def links(self, group: Group) -> list[tuple[int, int, int | None]]:
        """:attr:`pairs` on ``group``: (src rank, dst rank, NIC)."""
        nic, ranks = _nic_of(group), group.ranks
        return [(ranks[s], ranks[d], nic(s, n)) for s, d, n in self.pairs]

    def fused(self, wire: float, fuse: bool) -> list[tuple[tuple, list[float]]]:
        """Plan steps as (local pairs, wire bytes per pair): consecutive steps with the same pairs are one
        step carrying the summed bytes when ``fuse`` (added in step order, as ``b + n·wire``)."""
        key = (wire, fuse)
        if key not in self._fused:
            out, last = [], None
            for k in self.sequence:
                content = [t for t in self.contents[k] if t[2] > 0]
                if not content:
                    continue
                shape = tuple((s, d, n) for s, d, _, n in content)
                nbytes = np.array([float(b) for _, _, b, _ in content])
                if fuse and shape == last:
                    out[-1] = (shape, out[-1][1] + nbytes * wire)
                else:
                    out.append((shape, nbytes * wire))
                    last = shape
            self._fused[key] = [(shape, b.tolist()) for shape, b in out]
        return self._fused[key]


def _nic_of(group: Group):
    """(group index, NIC index or None) → the NIC in that GPU's node's set."""
    sets, node = group.nic_sets, group.node_index
    return lambda i, n: None if n is None else sets[node[i]][n]


class ScheduleCache:
    """Local schedules of one cluster by (algorithm, op, bytes, shape); per group where not shape-only."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self._shared: dict[tuple, LocalSchedule] = {}

    def get(self, group: Group, op: Op, nbytes: int, algorithm: str, build) -> LocalSchedule:
        """The local schedule of ``algorithm`` on ``group``; ``build()`` makes the :class:`Schedule`."""
        if (algorithm, op) not in SHAPE_ONLY:
            return LocalSchedule(build(), group)
        key = (algorithm, op, nbytes, shape_of(group))
        if key not in self._shared:
            self._shared[key] = LocalSchedule(build(), group)
        return self._shared[key]
