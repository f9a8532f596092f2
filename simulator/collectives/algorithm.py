"""The base class of every collective algorithm, and the helpers their schedules share.

An algorithm is one small subclass of :class:`Algorithm`. Override points (everything else is
inherited):

- ``name``: registry name (``ring``, ``tree``, ...).
- ``family``: key of ``Protocol.base_latency_us`` its library calls are charged (``ring``, ``tree``,
  ``nvls``). Algorithms built from point-to-point sends use ``ring``: the same kernel launch and
  proxy costs (an assumption; NCCL has no table entry for them).
- ``calls``: library calls one collective takes (hierarchical all-reduce is three).
- ``schedule_times_it``: True when replaying the schedule on links is the algorithm's timing model.
  False for in-switch reduction (NVLS), whose schedule is a data-equivalent exchange: engines then
  charge the closed form.
- ``pipelined``: True when a rank reduces one chunk while the next crosses the link (ring, tree,
  chain), so the reduction overlaps the transfer (:meth:`Env.gamma_s`); False when a step reduces
  a whole received block before the next step sends it (doubling, direct, parameter server).
- ``ops``: the :class:`Op` values it implements.
- ``supports_group(group, op)``: extra conditions on the group (power of two, one node, ...).
- ``comm_time_s(env, group, op, nbytes, root)``: the closed-form transfer time (sum of its steps).
- ``reduce_bytes(group, op, nbytes)``: bytes the busiest rank reduces (the γ term).
- ``transfers(group, op, nbytes, root)``: the schedule's :class:`Transfer` list (base.py semantics).
- optionally, for engines at scale: ``local_steps(group, op, nbytes)`` (the schedule's steps in group-local
  form without its transfers) and ``chunk_pipeline_latency_s(env, group, op, nbytes)`` (its chunk-pipeline
  latency without the schedule); each must give the values the schedule gives (the tree's: tests/test_tree_local_form.py; the ring's:
  tests/test_ring_local_form.py).

``time_s`` = calls × per-call overhead + ``comm_time_s`` + exposed γ of ``reduce_bytes``; ``schedule`` wraps the
transfers in a :class:`Schedule` whose ``reduce_bytes_per_rank`` is measured from the transfers.
"""

from __future__ import annotations

from typing import NamedTuple

from simulator.cluster.spec import Protocol
from simulator.collectives.base import Op, Schedule, Transfer, split
from simulator.collectives.cost import Env, Flow, Group


class LocalSteps(NamedTuple):
    """A schedule in group-local form: per step (in :meth:`Schedule.steps` order, empty steps kept) its
    transfers with bytes as ``(src, dst, nbytes, nic index)`` in transfer order, the NIC as its position in
    the sender node's :attr:`Group.nic_sets` (None: the sender GPU's own); and the schedule's
    ``reduce_bytes_per_rank``."""

    steps: list[tuple[tuple[int, int, int, int | None], ...]]
    reduce_bytes_per_rank: float


class Algorithm:
    """One collective algorithm: its closed-form time and its point-to-point schedule."""

    name: str = ""
    family: str = "ring"
    calls: int = 1
    schedule_times_it: bool = True
    pipelined: bool = False
    ops: frozenset[Op] = frozenset()
    max_ranks: int | None = None
    """The most ranks the registry costs this algorithm for (None: any): a bound on work for the
    algorithms whose cost enumerates every pair of ranks (registry ``_supported``)."""
    bound_work: str = "every pair of ranks"
    """What the cost enumerates past :meth:`rank_limit` (the refusal's words)."""

    def rank_limit(self, op: Op) -> int | None:
        """The most ranks ``op`` is costed for (None: any); :attr:`max_ranks` unless an op costs more."""
        return self.max_ranks

    def supports(self, group: Group, op: Op) -> bool:
        return op in self.ops and self.supports_group(group, op)

    def supports_group(self, group: Group, op: Op) -> bool:
        return True

    def time_s(self, group: Group, op: Op, nbytes: int, protocol: Protocol | None, root: int = 0) -> float:
        """Closed form: ``calls·overhead + Σ steps + γ·reduce_bytes`` (see cost.py)."""
        env = Env(group.cluster, protocol, group.paths, family=self.family, group=group)
        return (env.overhead_s(self.family, self.calls, op) + self.comm_time_s(env, group, op, nbytes, root)
                + self.gamma_s(env, self.reduce_bytes(group, op, nbytes)))

    def gamma_s(self, env: Env, reduce_bytes: float) -> float:
        """The exposed reduction time of ``reduce_bytes`` (:meth:`Env.gamma_s` with :attr:`pipelined`)."""
        return env.gamma_s(reduce_bytes, self.pipelined)

    def schedule(self, group: Group, op: Op, nbytes: int, root: int = 0) -> Schedule:
        transfers = tuple(t for t in self.transfers(group, op, nbytes, root) if t.nbytes > 0)
        return Schedule(op=op, algorithm=self.name, ranks=group.ranks, nbytes=nbytes, transfers=transfers,
                        root=root, reduce_bytes_per_rank=max_reduce_bytes(transfers))

    def schedule_key(self, group: Group, op: Op, nbytes: int, root: int = 0) -> tuple | None:
        """What the schedule of ``op`` on ``group`` depends on besides ``op`` and ``nbytes``; None: the ranks
        themselves (not shareable).

        Two groups with equal keys get the same schedule in group-local terms: the same transfers between
        the same group indices, a cross-node transfer's NIC being the same index in its sender node's NIC
        set (:attr:`Group.nic_sets`). An engine may then build it once and relabel it (engine/shapes.py).
        An algorithm that picks anything from its paths' costs (a chunk count) must put it in the key."""
        return None

    def links_key(self, group: Group, op: Op, nbytes: int, root: int = 0) -> tuple | None:
        """As :meth:`schedule_key`, for which (src, dst, NIC index) pairs carry bytes only: coarser where
        the schedule's other inputs (a chunk count) do not change them."""
        return self.schedule_key(group, op, nbytes, root)

    def chunk_pipelined(self, op: Op) -> bool:
        """True when ``op``'s schedule is a chunk pipeline (:meth:`Env.best_pipeline`): its latency is
        one chunk's chain plus ``α_max`` per further chunk (:meth:`schedule_latency_s`)."""
        return False

    def schedule_latency_s(self, env: Env, schedule: Schedule) -> float:
        """The latency part of replaying ``schedule``: the rank-level chain (chain.py), or for a chunk
        pipeline the chunk-level chain plus the per-chunk overhead (:func:`pipeline_latency_s`)."""
        if self.chunk_pipelined(schedule.op):
            return pipeline_latency_s(env, schedule)
        return env.chain_latency_s(flows_by_step(schedule))

    def local_steps(self, group: Group, op: Op, nbytes: int) -> LocalSteps | None:
        """:meth:`schedule`'s steps in group-local form, built without its :class:`Transfer` objects (a tree at
        1,024 nodes has ~10⁵ of them); None where the algorithm does not offer it (the engine then localises
        :meth:`schedule`, engine/shapes.py). Offered only where :meth:`schedule_key` is not None."""
        return None

    def chunk_pipeline_latency_s(self, env: Env, group: Group, op: Op, nbytes: int) -> float | None:
        """:meth:`schedule_latency_s` of ``schedule(group, op, nbytes)`` under ``env``, the same float, without
        building the schedule; None where the algorithm does not offer it."""
        return None

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        raise NotImplementedError

    def reduce_bytes(self, group: Group, op: Op, nbytes: int) -> float:
        return 0.0

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        raise NotImplementedError


def flows_by_step(schedule: Schedule) -> list[list[Flow]]:
    """The schedule's transfers as cost-model flows (global ranks), step by step."""
    ranks = schedule.ranks
    return [[Flow(ranks[t.src], ranks[t.dst], t.nbytes, t.nic) for t in step] for step in schedule.steps()]


def pipeline_latency_s(env: Env, schedule: Schedule) -> float:
    """A chunk pipeline's latency, as :meth:`Env.best_pipeline` charges it: ``L + (k − 1)·α_max``.

    ``L``: chunk-level dataflow (a transfer of the bytes at offset ``o`` waits for the sender's own
    arrival of offset ``o``, not for everything it has received; chain.py's recurrence keyed by
    ``(rank, offset)``); ``k``: the most transfers on one (src, dst, channel) edge, the chunks per
    channel; ``α_max``: the slowest hop's latency (× ``1/fifo_steps`` under a protocol, cost.py).
    """
    ranks = schedule.ranks
    arrival: dict[tuple[int, int], float] = {}
    per_edge: dict[tuple[int, int, int], int] = {}
    alphas: dict[tuple, float] = {}
    alpha_max = 0.0
    for step in schedule.steps():
        new: dict[tuple[int, int], float] = {}  # this step's arrivals; read from the previous steps' only
        for t in step:
            if t.nbytes <= 0:
                continue
            link = (t.src, t.dst, t.nic)
            alpha = alphas.get(link)
            if alpha is None:
                alpha = alphas[link] = env.latency_s(env.path(ranks[t.src], ranks[t.dst], t.nic))
            alpha_max = max(alpha_max, alpha)
            edge = (t.src, t.dst, t.channel)
            per_edge[edge] = per_edge.get(edge, 0) + 1
            v = arrival.get((t.src, t.offset), 0.0) + alpha
            key = (t.dst, t.recv_offset)
            if v > new.get(key, arrival.get(key, 0.0)):
                new[key] = v
        arrival.update(new)
    chunks = max(per_edge.values(), default=1)
    return max(arrival.values(), default=0.0) + (chunks - 1) * alpha_max * env.chunk_latency_share


def max_reduce_bytes(transfers: tuple[Transfer, ...]) -> float:
    """Bytes the busiest receiver adds into its buffer over the whole schedule."""
    per_rank: dict[int, int] = {}
    for t in transfers:
        if t.reduce:
            per_rank[t.dst] = per_rank.get(t.dst, 0) + t.nbytes
    return float(max(per_rank.values(), default=0))


def sub_slices(nbytes: int, p: int, channels: int) -> list[list[tuple[int, int]]]:
    """``[slice][channel] -> (offset, length)``: split(nbytes, p) slices, each split over channels.

    Keeps base.py's slice ``i`` for group index ``i`` while each channel moves its own part of it.
    """
    return [[(off + o, n) for o, n in split(length, channels)] for off, length in split(nbytes, p)]


def chunked(offset: int, length: int, chunks: int) -> list[tuple[int, int]]:
    """Split a byte range into ``chunks`` pipeline chunks on element boundaries."""
    return [(offset + o, n) for o, n in split(length, chunks)]


def is_power_of_two(p: int) -> bool:
    return p >= 1 and p & (p - 1) == 0
