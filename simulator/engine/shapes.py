"""A collective's schedule in group-local form, built once and shared by every group of the same key.

At scale the step DES meets the same collective on many groups: the dp all-reduce of every pipeline
stage and of every tp index, each a ring (``2(p−1)·p·C`` transfers) or a tree (``2C·2(p−1)·k`` for ``k``
chunks). Building and timing each of them is O(p²) per ring group, which made a 16k-GPU step quadratic in
the ranks, and a tree build per group was ~40 % of it. The
schedules of those groups are the same in *local* terms (group indices), so this module keeps one
:class:`LocalSchedule` per (algorithm, op, bytes, schedule key) and maps it onto a group in O(its distinct
transfers):

- **Shape and key**: what a schedule depends on is the algorithm's to say
  (:meth:`~simulator.collectives.algorithm.Algorithm.schedule_key`): the group's shape
  (:attr:`~simulator.collectives.cost.Group.shape`: size, partition into nodes in group indices, NICs
  owned per node) for the ring's reduce-scatter / all-gather / all-reduce, the shape and the chunk count
  for the double binary tree; None (built per group, as before) for the others. A transfer's NIC is kept
  as its index in the sender node's NIC set (:attr:`~simulator.collectives.cost.Group.nic_sets`), so a
  group whose GPUs sit on other NICs (a tp-shifted replica) maps it to its own.
- **Links alone** (:meth:`ScheduleCache.pairs`): which (src, dst, NIC index) pairs carry bytes is keyed
  by :meth:`~simulator.collectives.algorithm.Algorithm.links_key`, coarser for the tree (its chunk count
  does not change which edges carry bytes), so a replica's links need neither its schedule nor its
  chunk count. ``tests/test_engine_shortcuts.py`` checks shared schedules, links and latencies against
  fresh builds on groups of every kind the engine maps them to.
- **Built in local form** (:meth:`LocalSchedule.of_local`): an algorithm that offers
  :meth:`~simulator.collectives.algorithm.Algorithm.local_steps` (the tree; the ring's reduce-scatter, all-gather
  and all-reduce, des25) gives the steps in local terms without its ``Transfer`` objects (~10⁵ per key at 1,024
  nodes; a ring's ``2(p−1)·p·C``, 0.5 M at dp 512, becomes one content per distinct rotation, often one), and its chunk-pipeline latency comes from
  :meth:`~simulator.collectives.algorithm.Algorithm.chunk_pipeline_latency_s` on the group itself (no
  schedule, no rebuild per α vector); ``ScheduleCache.local_form = False`` localises every schedule
  instead (the reference; ``tests/test_tree_local_form.py``: the same values, ==).
- **Rotations** (des26): a ring step whose transfers all carry bytes is a
  :class:`~simulator.collectives.rotated.RotatedStep` (shared links, lengths read as ``lengths[c][(i − r) mod p]``):
  its pairs and chain shape are its links, :meth:`LocalSchedule.fused` and ``plan_bw.StepRows`` read its bytes per
  step, so an uneven split's ``p`` rotations cost O(p·C) objects, not ``p`` tuples of ``p·C``.
- **Distinct steps**: steps of equal content are one entry (a ring's steps carry equal slices when the
  bytes divide evenly), so a group's step flows are built once per distinct content and shared
  between steps, which the id-memos of :meth:`Env.steps_time_s` and :meth:`Env.chain_latency_s` use.
"""

from __future__ import annotations

import numpy as np

from simulator.cluster.spec import Cluster
from simulator.collectives.algorithm import LocalSteps
from simulator.collectives.base import Op, Schedule
from simulator.collectives.cost import Env, Flow, Group
from simulator.collectives.registry import get_algorithm
from simulator.collectives.rotated import RotatedStep


class LocalSchedule:
    """A schedule in group indices: distinct step contents ``(src, dst, nbytes, nic index)`` and the
    step sequence as indices into them (empty steps kept, as :meth:`Schedule.steps` gives them)."""

    __slots__ = ("algorithm", "schedule", "group", "reduce_bytes_per_rank", "contents", "sequence", "pairs",
                 "_fused", "_chains", "_shape_of", "_shapes")

    def __init__(self, schedule: Schedule, group: Group):
        nic_index = [{nic: i for i, nic in enumerate(nics)} for nics in group.nic_sets]
        node = group.node_index
        steps = [tuple((t.src, t.dst, t.nbytes, None if t.nic is None else nic_index[node[t.src]][t.nic])
                       for t in step) for step in schedule.steps()]
        self._fill(schedule.algorithm, schedule, group, steps, schedule.reduce_bytes_per_rank)

    @classmethod
    def of_local(cls, algorithm: str, group: Group, local: LocalSteps) -> "LocalSchedule":
        """The local schedule from the algorithm's own local form (:meth:`Algorithm.local_steps`: the same
        steps as the schedule's, without building it)."""
        self = cls.__new__(cls)
        self._fill(algorithm, None, group, local.steps, local.reduce_bytes_per_rank)
        return self

    def _fill(self, algorithm: str, schedule: Schedule | None, group: Group, steps, reduce_bytes_per_rank: float):
        self.algorithm = algorithm
        self.schedule = schedule
        """The schedule on the group it was built for (``group``): what a chunk pipeline's latency is read
        from (:meth:`pipeline_s`); None when built by :meth:`of_local` (the algorithm times it directly)."""
        self.group = group
        self.reduce_bytes_per_rank = reduce_bytes_per_rank
        seen: dict[tuple, int] = {}
        same: dict[int, int] = {}  # id(content) → k: a step given as the same tuple again (a ring's) is not rehashed
        self.contents: list[tuple] = []
        self.sequence: list[int] = []
        for content in steps:
            k = same.get(id(content))
            if k is None and isinstance(content, RotatedStep):  # one object per distinct rotation: never rehashed
                k = len(self.contents)
                self.contents.append(content)
                same[id(content)] = k
            if k is None:
                k = seen.get(content)
                if k is None:
                    k = seen[content] = len(self.contents)
                    self.contents.append(content)  # kept alive here, so its id stays its own
                same[id(content)] = k
            self.sequence.append(k)
        self.pairs = tuple(dict.fromkeys(pair for c in _distinct_links(self.contents) for pair in _shape(c)))
        """Distinct (src, dst, nic index) that carry bytes: the links the schedule uses."""
        self._fused: dict[tuple, list] = {}
        self._chains: dict[tuple, float] = {}
        self._shape_of: list[int] | None = None  # per content, its shape's index in _shapes (chain_flow_steps)
        self._shapes: list[tuple] = []

    def chain_s(self, costs: Env, flow_steps, links: dict) -> float:
        """:meth:`Env.chain_latency_s` of ``flow_steps()`` (this schedule's steps of flows on one group, built
        only when needed; ``links`` its :attr:`pairs` → (src, dst, NIC)), computed once per distinct α of the
        pairs: the chain only reads each flow's α and uses ranks as labels, so groups whose pairs have equal
        α share it."""
        key = self._alphas(costs, links)
        if key not in self._chains:
            self._chains[key] = costs.chain_latency_s(flow_steps())
        return self._chains[key]

    def pipeline_s(self, costs: Env, group: Group, links: dict, latency_of, rebuild, direct=None) -> float:
        """A chunk pipeline's latency on ``group`` (``latency_of(schedule)``: :meth:`Algorithm.schedule_latency_s`
        under ``costs``), computed once per distinct α of the pairs and per-chunk latency share: it reads each
        transfer's α, the schedule's structure (local, shared) and the share. The first computation for an
        α vector runs as ``direct()`` where given (:meth:`Algorithm.chunk_pipeline_latency_s` on ``group``,
        without a schedule), else on the schedule as built when its own group has that α, else on
        ``rebuild()``, a fresh build for ``group``."""
        alphas = self._alphas(costs, links)
        key = ("pipeline", costs.chunk_latency_share, alphas)
        if key not in self._chains and direct is not None:
            value = direct()
            if value is not None:
                self._chains[key] = value
        if key not in self._chains:
            own = dict(zip(self.pairs, self.links(self.group)))
            same = self.schedule is not None and (group is self.group or self._alphas(costs, own) == alphas)
            self._chains[key] = latency_of(self.schedule if same else rebuild())
        return self._chains[key]

    def _alphas(self, costs: Env, links: dict) -> tuple:
        """Each pair's α and link class (network posts add per class: Env.edges)."""
        paths = [costs.path(*links[pair]) for pair in self.pairs]
        return tuple((costs.latency_s(p), p.link_class) for p in paths)

    def flow_steps(self, group: Group) -> list[list[Flow]]:
        """Each step's cost-model flows on ``group``'s ranks, one shared list per distinct content."""
        nic = _nic_of(group)
        ranks = group.ranks
        lists = [[Flow(ranks[s], ranks[d], b, nic(s, n)) for s, d, b, n in c] for c in self.contents]
        return [lists[k] for k in self.sequence]

    def chain_flow_steps(self, group: Group) -> list[list[Flow]]:
        """:meth:`flow_steps` for the latency chain only: one list per distinct step *shape* (its pairs with bytes,
        in order), each flow carrying 1 byte. :meth:`Env.edges` reads only which flows have bytes and their (src,
        dst, NIC), so :meth:`Env.chain_latency_s` is the same float, and steps that differ in bytes alone (a ring's
        rotations of uneven slices, up to ``p`` contents) are one list, read once (des25)."""
        if self._shape_of is None:
            shapes: dict[tuple, int] = {}
            by_links: dict[int, int] = {}  # id(RotatedStep.links) → shape index: a rotation's shape is its links
            self._shape_of = []
            for c in self.contents:
                k = by_links.get(id(c.links)) if isinstance(c, RotatedStep) else None
                if k is None:
                    k = shapes.setdefault(_shape(c), len(shapes))
                    if isinstance(c, RotatedStep):
                        by_links[id(c.links)] = k
                self._shape_of.append(k)
            self._shapes = list(shapes)
        nic, ranks = _nic_of(group), group.ranks
        lists = [[Flow(ranks[s], ranks[d], 1.0, nic(s, n)) for s, d, n in shape] for shape in self._shapes]
        return [lists[self._shape_of[k]] for k in self.sequence]

    def links(self, group: Group) -> list[tuple[int, int, int | None]]:
        """:attr:`pairs` on ``group``: (src rank, dst rank, NIC)."""
        return links_of(self.pairs, group)

    def fused(self, wire: float, fuse: bool) -> list[tuple[tuple, list[float]]]:
        """Plan steps as (local pairs, wire bytes per pair): consecutive steps with the same pairs are one
        step carrying the summed bytes when ``fuse`` (added in step order, as ``b + n·wire``)."""
        key = (wire, fuse)
        if key not in self._fused:
            out, last = [], None
            rows = [None if isinstance(c, RotatedStep) else _row(c, wire) for c in self.contents]  # once per content
            for k in self.sequence:
                content = self.contents[k]
                if isinstance(content, RotatedStep):  # built per step: p rows of p·C floats would be O(p²) memory
                    shape, nbytes = content.links, content.bytes_row() * wire
                elif rows[k] is None:
                    continue
                else:
                    shape, nbytes = rows[k]
                if fuse and (shape is last or shape == last):
                    out[-1] = (shape, out[-1][1] + nbytes)
                else:
                    out.append((shape, nbytes))
                    last = shape
            self._fused[key] = [(shape, b.tolist()) for shape, b in out]
        return self._fused[key]


def _shape(content) -> tuple:
    """A step content's pairs with bytes, in order: a rotation's links (all carry bytes)."""
    if isinstance(content, RotatedStep):
        return content.links
    return tuple((s, d, n) for s, d, b, n in content if b > 0)


def _distinct_links(contents: list):
    """``contents`` with every rotation of one links object after the first left out (same pairs)."""
    seen: set[int] = set()
    for c in contents:
        if isinstance(c, RotatedStep):
            if id(c.links) in seen:
                continue
            seen.add(id(c.links))
        yield c


def _row(content: tuple, wire: float):
    """A step content's (pairs with bytes, their wire bytes as an array); None when no transfer has bytes."""
    content = [t for t in content if t[2] > 0]
    if not content:
        return None
    return tuple((s, d, n) for s, d, _, n in content), np.array([float(b) for _, _, b, _ in content]) * wire


def _nic_of(group: Group):
    """(group index, NIC index or None) → the NIC in that GPU's node's set."""
    sets, node = group.nic_sets, group.node_index
    return lambda i, n: None if n is None else sets[node[i]][n]


class ScheduleCache:
    """Local schedules of one cluster by (algorithm, op, bytes, :meth:`Algorithm.schedule_key`), and their
    links by :meth:`Algorithm.links_key`; per group where the key is None."""

    local_form = True
    """Build from :meth:`Algorithm.local_steps` where the algorithm offers them; False: localise every
    :meth:`Algorithm.schedule` (the reference the local form is tested against)."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self._shared: dict[tuple, LocalSchedule] = {}
        self._pairs: dict[tuple, tuple] = {}

    def get(self, group: Group, op: Op, nbytes: int, algorithm: str, build) -> LocalSchedule:
        """The local schedule of ``algorithm`` on ``group``; ``build()`` makes the :class:`Schedule`."""
        algo = get_algorithm(algorithm)
        key = algo.schedule_key(group, op, nbytes)
        if key is None:
            return LocalSchedule(build(), group)
        key = (algorithm, op, nbytes, key)
        if key not in self._shared:
            local = algo.local_steps(group, op, nbytes) if self.local_form else None
            self._shared[key] = (LocalSchedule(build(), group) if local is None
                                 else LocalSchedule.of_local(algo.name, group, local))
        return self._shared[key]

    def pairs(self, group: Group, op: Op, nbytes: int, algorithm: str, build) -> tuple:
        """:attr:`LocalSchedule.pairs` of ``algorithm`` on ``group``, shared by groups of one links key."""
        key = get_algorithm(algorithm).links_key(group, op, nbytes)
        if key is None:
            return self.get(group, op, nbytes, algorithm, build).pairs
        key = (algorithm, op, nbytes, key)
        if key not in self._pairs:
            self._pairs[key] = self.get(group, op, nbytes, algorithm, build).pairs
        return self._pairs[key]


def links_of(pairs: tuple, group: Group) -> list[tuple[int, int, int | None]]:
    """Local ``pairs`` (src, dst, NIC index) on ``group``: (src rank, dst rank, NIC)."""
    nic, ranks = _nic_of(group), group.ranks
    return [(ranks[s], ranks[d], nic(s, n)) for s, d, n in pairs]
