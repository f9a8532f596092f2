"""Names → collective algorithms, and NCCL-tuner-like selection of the fastest (algorithm, protocol).

Public API (other packages code against exactly these):

- :func:`algorithm_names` — the registered names.
- :func:`estimate` — one algorithm's (or ``"auto"``: the fastest; on an NCCL cluster, among NCCL's own choices;
  on a gloo cluster, what gloo runs: its own algorithm where :data:`GLOO_NATIVE` names it, the whole all-reduce
  for a reduce-scatter, :mod:`simulator.collectives.gloo`) estimate for a call.
- :func:`estimate_all` — every algorithm that supports the call, each with its best protocol.
- :func:`estimate_protocols` — one algorithm under each protocol that can run it (what ``auto`` chose among).
- :func:`build_schedule` — an algorithm's point-to-point schedule.
- :func:`supports` — whether an algorithm implements an op on a group.
- :func:`supporting` — the algorithms that implement an op on a group.

Protocols: when ``cluster.comm.protocols`` is non-empty each (algorithm, protocol) pair whose
protocol lists a base latency for the algorithm's family is evaluated, and the fastest is kept
(NCCL ``src/graph/tuning.cc`` does the same over its algorithm × protocol table). Otherwise one
evaluation with the links' own latency and bandwidth and ``comm.call_latency_us`` per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from simulator.cluster.nccl import tuner_choices
from simulator.cluster.spec import Cluster, CommLibrary, Protocol
from simulator.collectives.algorithm import Algorithm
from simulator.collectives.base import CollectiveEstimate, Op, Schedule
from simulator.collectives.cost import Env, Group
from simulator.collectives.direct import Direct, Pairwise, a2a_blocks
from simulator.collectives.doubling import HalvingDoubling, RecursiveDoubling
from simulator.collectives.gloo import (ACTIVE_SHARE, GLOO_NATIVE, OUTPUT_COPY, WHOLE_ALL_REDUCE,
                                        active_share_time_s, output_copy_s, whole_all_reduce_copy_s)
from simulator.collectives.hierarchical import Hierarchical
from simulator.collectives.nvls import Nvls
from simulator.collectives.nvls_tree import NvlsTree
from simulator.collectives.ps import ParameterServer
from simulator.collectives.ring import Ring
from simulator.collectives.tree import DoubleBinaryTree
from simulator.errors import SpecError

_ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Ring(), DoubleBinaryTree(), RecursiveDoubling(), HalvingDoubling(), Direct(), Pairwise(),
    Hierarchical(), Nvls(), NvlsTree(), ParameterServer())}

__all__ = ["Algorithm", "algorithm_names", "get_algorithm", "estimate", "estimate_all", "estimate_protocols",
           "build_schedule", "supports", "supporting"]


def algorithm_names() -> list[str]:
    """Registered algorithm names, in registration order."""
    return list(_ALGORITHMS)


def get_algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name``; an unknown name lists the known ones."""
    if name not in _ALGORITHMS:
        raise SpecError("algorithm", f"unknown algorithm {name!r}; known: {', '.join(_ALGORITHMS)}")
    return _ALGORITHMS[name]


def _op(op: Op) -> Op:
    if not isinstance(op, Op):
        raise SpecError("op", f"expected an Op, got {op!r}; known: {', '.join(o.value for o in Op)}")
    return op


_GROUPS: dict[tuple[int, tuple[int, ...]], Group] = {}
"""Groups kept between calls, least recently asked first: a table of sizes, or a planner's search asking
the same few dozen groups interleaved, reuses one group's paths and schedule structures (:attr:`Group.paths`,
:attr:`Group.shapes`) instead of looking them up again at every size."""
_GROUPS_KEPT = 4
"""The most recently asked groups, kept whatever their size."""
_RANKS_KEPT = 4096
"""Older groups are kept while all kept groups hold at most this many ranks. A group's structures take
about 10-18 kB per rank (tracemalloc, dgx-a100 at 1,024 GPUs, 64-1,024-rank groups after ring, tree and
hierarchical all-reduce, reduce-scatter and all-gather at three sizes; 2026-11-25), so the cache holds at
most ~70 MB more than the :data:`_GROUPS_KEPT` newest. GPT-3 175B's search on 1,024 A100s asks 104 groups
of 2,544 ranks in all, interleaved (the last 4 alone: 438 group builds for 1,552 questions; all kept: 104)."""
_ranks_held = 0


def _group(cluster: Cluster, ranks: Sequence[int]) -> Group:
    """The group of ``ranks`` on ``cluster``; the same object for recently asked (cluster, ranks)."""
    global _ranks_held
    if isinstance(ranks, (str, bytes, dict)) or not isinstance(ranks, (Sequence, range)):
        raise SpecError("ranks", f"must be a list of rank numbers, got {ranks!r}")
    ranks = tuple(ranks)
    if set(map(type, ranks)) != {int}:  # Group names the bad rank (or too few); True == 1 must not hit the cache
        return Group(cluster, ranks)
    key = (id(cluster), ranks)  # a kept group holds its cluster, so the id is not reused meanwhile
    kept = _GROUPS.pop(key, None)
    if kept is not None and kept.cluster is cluster:
        _GROUPS[key] = kept  # most recent last
        return kept
    if kept is not None:
        _ranks_held -= kept.p
    group = Group(cluster, ranks)
    _GROUPS[key] = group
    _ranks_held += group.p
    while len(_GROUPS) > _GROUPS_KEPT and _ranks_held > _RANKS_KEPT:
        _ranks_held -= _GROUPS.pop(next(iter(_GROUPS))).p
    return group


MAX_CALL_BYTES = 2**64 - 1
"""The largest message one call can carry: a communication library counts bytes in a 64-bit
``size_t``. Larger integers (``10**400``, found by the API fuzz) overflowed the float cost formulas."""


def _nbytes(nbytes: int) -> int:
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes <= 0:
        raise SpecError("bytes", f"must be a positive integer number of bytes, got {nbytes!r}")
    if nbytes > MAX_CALL_BYTES:
        raise SpecError("bytes", f"a {nbytes.bit_length()}-bit byte count is more than one call can carry "
                                 f"(a 64-bit size, at most 2**64 - 1 bytes): give a real message size")
    return nbytes


def _protocols(cluster: Cluster, algorithm: Algorithm) -> list[Protocol | None]:
    """Protocols an algorithm can run under: those with a base latency for its family, or [None]."""
    table = cluster.comm.protocols
    if not table:
        return [None]
    return [p for p in table if algorithm.family in p.base_latency_us]


def _supported(algorithm: Algorithm, group: Group, op: Op) -> bool:
    return (algorithm.supports(group, op) and bool(_protocols(group.cluster, algorithm))
            and (algorithm.rank_limit(op) is None or group.p <= algorithm.rank_limit(op)))


def _capped(group: Group, op: Op) -> str:
    """What an error adds when algorithms that implement ``op`` are left out for the group's size."""
    capped = [a for a in _ALGORITHMS.values() if a.supports(group, op) and a.rank_limit(op) is not None
              and group.p > a.rank_limit(op)]
    if not capped:
        return ""
    works = dict.fromkeys(a.bound_work for a in capped)
    return "".join(f"; {', '.join(a.name for a in capped if a.bound_work == w)} cost {w} and stop at "
                   f"{min(a.rank_limit(op) for a in capped if a.bound_work == w):,} ranks (bounded work)"
                   for w in works) + ": use fewer ranks"


def supports(algorithm: str, op: Op, cluster: Cluster, ranks: Sequence[int]) -> bool:
    """Whether ``algorithm`` implements ``op`` on this group (and some protocol can run it)."""
    return _supported(get_algorithm(algorithm), _group(cluster, ranks), _op(op))


def supporting(op: Op, cluster: Cluster, ranks: Sequence[int]) -> list[str]:
    """Names of the algorithms that implement ``op`` on this group (and some protocol can run), in
    registration order: what an error about an unsupported choice offers instead."""
    group, op = Group(cluster, tuple(ranks)), _op(op)
    return [a.name for a in _ALGORITHMS.values() if _supported(a, group, op)]


def refusal(algorithm: str, op: Op, cluster: Cluster, ranks: Sequence[int]) -> SpecError:
    """The error for ``algorithm`` not running ``op`` on this group (``"all"``: for none running it), with
    the reason (the op, the group, or the size bound of the pair-costing algorithms)."""
    group, op = Group(cluster, tuple(ranks)), _op(op)
    able = supporting(op, cluster, ranks)
    if algorithm == "all":
        return SpecError("algorithm", f"no algorithm supports {op.value} on this group of {group.p} ranks"
                         + _capped(group, op))
    return _unsupported(algorithm, op, group, able)


def _unsupported(algorithm: str, op: Op, group: Group, able: list[str]) -> SpecError:
    chosen = _ALGORITHMS.get(algorithm)
    limit = None if chosen is None else chosen.rank_limit(op)
    if limit is not None and group.p > limit and chosen.supports(group, op):
        return SpecError("algorithm", f"{algorithm} costs {chosen.bound_work} and stops at {limit:,} ranks "
                         f"(bounded work), this group has {group.p:,}; algorithms that do: {', '.join(able) or 'none'}")
    return SpecError("algorithm", f"{algorithm} does not implement {op.value} on this group of {group.p} ranks; "
                     f"algorithms that do: {', '.join(able) or 'none'}")


def _each_protocol(algorithm: Algorithm, group: Group, op: Op, nbytes: int) -> list[CollectiveEstimate]:
    """The algorithm under every protocol that can run it, in the cluster's protocol order."""
    return [CollectiveEstimate(op=op, algorithm=algorithm.name, protocol=None if protocol is None else protocol.name,
                               ranks=group.p, nbytes=nbytes, time_s=algorithm.time_s(group, op, nbytes, protocol))
            for protocol in _protocols(group.cluster, algorithm)]


def _best(algorithm: Algorithm, group: Group, op: Op, nbytes: int) -> CollectiveEstimate:
    """The algorithm under its fastest protocol (ties: the protocol listed first)."""
    return min(_each_protocol(algorithm, group, op, nbytes), key=lambda e: e.time_s)


def estimate_all(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int) -> list[CollectiveEstimate]:
    """Every registered algorithm that supports ``op`` on this group, each under its best protocol."""
    group, op, nbytes = _group(cluster, ranks), _op(op), _nbytes(nbytes)
    return [_best(a, group, op, nbytes) for a in _ALGORITHMS.values() if _supported(a, group, op)]


def estimate_protocols(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int,
                       algorithm: str) -> list[CollectiveEstimate]:
    """``algorithm`` under each protocol that can run it (one estimate with ``protocol=None`` on a
    cluster without protocols): the candidates :func:`estimate` keeps the fastest of."""
    group, op, nbytes = _group(cluster, ranks), _op(op), _nbytes(nbytes)
    chosen = get_algorithm(algorithm)
    if not _supported(chosen, group, op):
        raise _unsupported(algorithm, op, group, supporting(op, cluster, ranks))
    return _each_protocol(chosen, group, op, nbytes)


def estimate(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int,
             algorithm: str = "auto") -> CollectiveEstimate:
    """Estimated time of one collective call; ``"auto"`` picks the fastest (algorithm, protocol)."""
    group, op, nbytes = _group(cluster, ranks), _op(op), _nbytes(nbytes)
    if op is Op.ALL_TO_ALL and a2a_blocks(nbytes, group.p)[0][1] == 0:  # nothing moves: no time, no bandwidth
        raise SpecError("bytes", f"an all-to-all over {group.p} ranks sends whole 4-byte elements to each peer: "
                        f"give at least {4 * group.p} bytes, got {nbytes}")
    if algorithm == "auto" and op in WHOLE_ALL_REDUCE and group.cluster.comm.library is CommLibrary.GLOO:
        return _whole_all_reduce(group, op, nbytes)
    if algorithm == "auto" and op in ACTIVE_SHARE and group.cluster.comm.library is CommLibrary.GLOO:
        return _active_share(group, op, nbytes)
    if algorithm == "auto":
        candidates = [_best(a, group, op, nbytes) for a in _auto_pool(group, op) if _supported(a, group, op)]
        if not candidates:
            raise SpecError("op", f"no registered algorithm implements {op.value} on this group of {group.p} ranks"
                            + _capped(group, op))
        best = min(candidates, key=lambda e: e.time_s)
        if group.cluster.comm.library is CommLibrary.GLOO and op in OUTPUT_COPY:  # gloo's copy out of its buffer
            return replace(best, time_s=best.time_s + output_copy_s(Env(group.cluster, None), op, nbytes))
        return best
    chosen = get_algorithm(algorithm)
    if not _supported(chosen, group, op):
        raise _unsupported(algorithm, op, group, supporting(op, cluster, ranks))
    return _best(chosen, group, op, nbytes)


def _whole_all_reduce(group: Group, op: Op, nbytes: int) -> CollectiveEstimate:
    """``op`` as ProcessGroupGloo runs it: gloo's all-reduce of the whole ``nbytes`` plus the copies in and out
    (:func:`simulator.collectives.gloo.whole_all_reduce_copy_s`), reported under that all-reduce's algorithm."""
    whole = _best(_ALGORITHMS[GLOO_NATIVE[Op.ALL_REDUCE]], group, Op.ALL_REDUCE, nbytes)
    copy_s = whole_all_reduce_copy_s(Env(group.cluster, None), nbytes, group.p)
    return CollectiveEstimate(op=op, algorithm=whole.algorithm, protocol=whole.protocol, ranks=group.p,
                              nbytes=nbytes, time_s=whole.time_s + copy_s)


def _active_share(group: Group, op: Op, nbytes: int) -> CollectiveEstimate:
    """``op`` as gloo runs it (:data:`GLOO_NATIVE`), each step at the share of its active processes
    (:func:`simulator.collectives.gloo.active_share_time_s`)."""
    algorithm = _ALGORITHMS[GLOO_NATIVE[op]]
    schedule = algorithm.schedule(group, op, nbytes, 0)
    return CollectiveEstimate(op=op, algorithm=algorithm.name, protocol=None, ranks=group.p, nbytes=nbytes,
                              time_s=active_share_time_s(group.cluster, schedule, algorithm))


def _auto_pool(group: Group, op: Op) -> list[Algorithm]:
    """Algorithms ``auto`` chooses among: the library's own tuner's choices on an NCCL cluster (so
    ``auto`` answers "what would NCCL run"), gloo's own algorithm on a gloo cluster for the ops of
    :data:`GLOO_NATIVE` (unless the group is past that algorithm's bounded-work size), every registered
    algorithm otherwise."""
    library = group.cluster.comm.library
    if library is CommLibrary.NCCL:
        return [_ALGORITHMS[name] for name in tuner_choices(op.value) if name in _ALGORITHMS]
    if library is CommLibrary.GLOO and op in GLOO_NATIVE and _supported(_ALGORITHMS[GLOO_NATIVE[op]], group, op):
        return [_ALGORITHMS[GLOO_NATIVE[op]]]
    return list(_ALGORITHMS.values())


def build_schedule(cluster: Cluster, ranks: Sequence[int], op: Op, nbytes: int, algorithm: str,
                   root: int = 0) -> Schedule:
    """The point-to-point schedule of ``algorithm`` for this call (base.py semantics)."""
    group, op, nbytes = _group(cluster, ranks), _op(op), _nbytes(nbytes)
    chosen = get_algorithm(algorithm)
    if not chosen.supports(group, op):  # a schedule needs no protocol: any algorithm that implements op
        raise _unsupported(algorithm, op, group, [a.name for a in _ALGORITHMS.values() if a.supports(group, op)])
    if not isinstance(root, int) or not 0 <= root < group.p:
        raise SpecError("root", f"root is a group index in 0..{group.p - 1}, got {root!r}")
    return chosen.schedule(group, op, nbytes, root)
