"""Collective operations and their point-to-point schedules: the data both the simulator and the executor use.

A :class:`Schedule` is the list of point-to-point transfers an algorithm performs, grouped into
steps. The simulator times it on the topology; the executor replays it with ``isend``/``irecv``
and checks the result against ``dist.all_reduce`` and friends. Both read the semantics below, so
they cannot disagree on what an algorithm does.

Buffer semantics (per rank, ``nbytes`` as nccl-tests' size column):
- all-reduce: one buffer of ``nbytes``; every rank ends with the element-wise sum.
- reduce-scatter: an input of ``nbytes`` split in ``p`` equal slices (:func:`split`); rank ``i``
  (its index in the group) ends with the sum of slice ``i`` in that slice of its buffer.
- all-gather: an output of ``nbytes``; rank ``i`` starts with slice ``i`` filled, ends with all.
- broadcast / reduce: one buffer of ``nbytes``; ``root`` (a group index) sends / receives the sum.
- all-to-all: a send and a receive buffer of ``nbytes`` each; slice ``j`` of rank ``i``'s send
  buffer ends in slice ``i`` of rank ``j``'s receive buffer (``dst_offset`` says where).
- send/recv: ``nbytes`` from group index 0 to group index 1.

Step semantics: steps run in order. Within a step every transfer reads the sender's buffer as it
stood at the end of the previous step, then the receiver adds (``reduce=True``) or writes its bytes
at ``dst_offset``. Transfers in one step run concurrently; a step ends when its last transfer does.
``src`` and ``dst`` are *group indices* (0..p-1), not global ranks; :attr:`Schedule.ranks` maps them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.checks import enum_member
from simulator.enum_kind import Kind
from simulator.errors import SpecError

ELEMENT_BYTES = 4
"""Slice boundaries fall on multiples of this many bytes, so float32 buffers split cleanly."""


class Op(Kind):
    """Collective operations, named as nccl-tests names them."""

    ALL_REDUCE = "all-reduce"
    """Every rank ends with the sum of all ranks' buffers."""
    REDUCE_SCATTER = "reduce-scatter"
    """Every rank ends with the sum of one slice."""
    ALL_GATHER = "all-gather"
    """Every rank ends with every rank's slice."""
    BROADCAST = "broadcast"
    """Every rank ends with the root's buffer."""
    REDUCE = "reduce"
    """The root ends with the sum of all buffers."""
    ALL_TO_ALL = "all-to-all"
    """Rank i's slice j goes to rank j's slice i."""
    SEND_RECV = "send-recv"
    """One rank sends its buffer to another."""

    def busbw_factor(self, p: int) -> float:
        """nccl-tests ``doc/PERFORMANCE.md``: busbw = algbw × factor (2(p−1)/p for all-reduce, ...)."""
        if self is Op.ALL_REDUCE:
            return 2 * (p - 1) / p
        if self in (Op.REDUCE_SCATTER, Op.ALL_GATHER, Op.ALL_TO_ALL):
            return (p - 1) / p
        return 1.0

    @classmethod
    def parse(cls, text: str) -> "Op":
        return enum_member(cls, text, "op", "operation", lambda t: t.lower().replace("_", "-"))


def split(nbytes: int, parts: int) -> list[tuple[int, int]]:
    """Split ``nbytes`` into ``parts`` contiguous (offset, length) slices on ELEMENT_BYTES boundaries.

    Lengths differ by at most one element; trailing slices may be empty when ``nbytes`` is small.
    """
    if parts < 1:
        raise SpecError("ranks", f"cannot split a buffer into {parts} parts")
    elements, rest = divmod(nbytes, ELEMENT_BYTES)
    base, extra = divmod(elements, parts)
    slices, offset = [], 0
    for i in range(parts):
        length = (base + (1 if i < extra else 0)) * ELEMENT_BYTES
        if i == parts - 1:
            length += rest
        slices.append((offset, length))
        offset += length
    return slices


@dataclass(frozen=True)
class Transfer:
    """One point-to-point message of a schedule (see the module docstring for its semantics)."""

    step: int
    src: int
    """Sender's group index."""
    dst: int
    """Receiver's group index."""
    offset: int
    """Byte offset in the sender's buffer."""
    nbytes: int
    reduce: bool = False
    """True: the receiver adds the bytes into its buffer; False: it overwrites."""
    dst_offset: int | None = None
    """Byte offset in the receiver's buffer; None means the same as ``offset``."""
    channel: int = 0
    """Parallel channel (NCCL ring/tree instance); channels may use different NICs."""
    nic: int | None = None
    """NIC a cross-node transfer uses (None: the sender GPU's own NIC)."""

    @property
    def recv_offset(self) -> int:
        return self.offset if self.dst_offset is None else self.dst_offset


@dataclass(frozen=True)
class Schedule:
    """An algorithm's transfers for one collective call on one group of ranks."""

    op: Op
    algorithm: str
    ranks: tuple[int, ...]
    """Global rank of each group index."""
    nbytes: int
    transfers: tuple[Transfer, ...]
    root: int = 0
    reduce_bytes_per_rank: float = field(default=0.0)
    """Bytes the busiest rank reduces (the γ term of Thakur et al.), for the reduction cost."""

    @property
    def num_steps(self) -> int:
        return 1 + max((t.step for t in self.transfers), default=-1)

    def steps(self) -> list[list[Transfer]]:
        """Transfers grouped by step, in step order."""
        grouped: list[list[Transfer]] = [[] for _ in range(self.num_steps)]
        for t in self.transfers:
            grouped[t.step].append(t)
        return grouped

    def bytes_sent(self) -> int:
        return sum(t.nbytes for t in self.transfers)


@dataclass(frozen=True)
class CollectiveEstimate:
    """The estimated cost of one collective call, in nccl-tests' terms."""

    op: Op
    algorithm: str
    protocol: str | None
    """NCCL protocol chosen (LL, LL128, Simple), or None for a library without protocols."""
    ranks: int
    nbytes: int
    time_s: float

    @property
    def algbw_GBps(self) -> float:
        """nccl-tests algorithm bandwidth: bytes / time, decimal GB/s."""
        return self.nbytes / self.time_s / 1e9

    @property
    def busbw_GBps(self) -> float:
        """nccl-tests bus bandwidth: algbw × the op's factor (comparable to the bottleneck link)."""
        return self.algbw_GBps * self.op.busbw_factor(self.ranks)

    def as_dict(self) -> dict:
        return {"op": self.op.value, "algorithm": self.algorithm, "protocol": self.protocol,
                "ranks": self.ranks, "bytes": self.nbytes, "time_s": self.time_s,
                "algbw_GBps": self.algbw_GBps, "busbw_GBps": self.busbw_GBps}
