"""Second-phase axes: gradient synchronisation, offload and placement variants, ranked for the best bases.

The first phase (:mod:`planner.search`) ranks the *base* space: degrees, ZeRO, schedule, recompute,
sequence parallelism, micro-batch, with DDP's gradient sync (all-reduce, ``auto`` algorithm,
25 MiB buckets) and no offload. Crossing every base with every gradient-sync and offload choice
would multiply the space (and the structures to compile) by ~20, so these axes are ranked only
where they can matter:

- **all-reduce algorithm** (ring / tree / hierarchical / auto): a fixed algorithm that ``auto`` also
  chooses among for the sync's collective (all-reduce, or reduce-scatter under ZeRO ≥ 2) is
  dominated: ``auto`` takes the fastest per call (:func:`simulator.collectives.registry.estimate`),
  the closed form's sync exposure ``end_j = max(ready_j, end_{j−1}) + d_j`` is monotone in every
  call's duration d_j, and memory does not depend on the algorithm. Those are dropped unranked
  (provably no faster in the closed form); the others (``hierarchical`` on an NCCL cluster, whose
  tuner never picks it) are ranked for the best bases.
- **bucket size** (:data:`BUCKET_MIB`), **parameter server** (sync / async, :func:`ps_shards` shard
  counts, colocated with the workers), and **offload** (optimizer; parameters and NVMe under
  ZeRO-3, where the cluster gives the host figures to time them, :func:`offload_values`): ranked
  for the :data:`VARIANT_BASES` best bases of the first phase (ZeRO-0 bases for the parameter
  server, which replaces ZeRO), and offload also for the :data:`VARIANT_BASES` bases that did not
  fit in GPU memory by the smallest margin (offload is a memory rescue). The gradient-sync
  variants also for every further base within reach (:func:`sync_candidates`: a bound, so no
  sync variant of another base can beat the best); for offload this is a heuristic, not a proof:
  an offload variant of a base outside these sets is never ranked.

- **activation offload** (``offload_activations``: the full-recomputation checkpoints in host
  memory, their copies charged by :mod:`simulator.compile.act_offload_part`), alone and with each
  model-state offload, for the :data:`VARIANT_BASES` full-recomputation bases that missed GPU
  memory by the least. It only adds time to a base (its copies block the compute, the rest is
  unchanged) and only saves GPU memory, so for a base that fits it is dominated by the base itself
  (never faster): it is ranked as a memory rescue only.
- **placement orders** that put a tp group across nodes (:mod:`planner.placement`), for the
  :data:`VARIANT_BASES` best bases: what ``--explain`` reports when an order loses.

A pinned key (``--offload``, ``--dp-algorithm``, ``--bucket-mb``, ``--param-server``, ``--dp-sync``)
is searched in the first phase over every base instead, and not varied here.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simulator.cluster.comm import CommLibrary
from simulator.cluster.nccl import tuner_choices
from simulator.collectives.base import Op
from simulator.collectives.registry import GLOO_NATIVE
from simulator.errors import SpecError
from simulator.strategy import (AllReduceSync, Offload, ParamServerMode, ParamServerSync, Recompute, Strategy,
                                ZeroStage)
from simulator.strategy.sync import AllReduceAlgorithm, DpSyncKind
from simulator.units import MiB

from planner.placement import NodeShape, split_orders

VARIANT_BASES = 8
"""First-phase candidates whose gradient-sync and offload variants are ranked: a bound on the
search's cost, not a measured figure (module docstring)."""
ALGORITHMS = (AllReduceAlgorithm.AUTO, AllReduceAlgorithm.RING, AllReduceAlgorithm.TREE,
              AllReduceAlgorithm.HIERARCHICAL)
"""All-reduce algorithms of the search (issue 8 §1); the rest of the registry is reachable by a pin."""
BUCKET_MIB = (5, 25, 100)
"""Gradient bucket sizes tried, MiB: PyTorch DDP's default ``bucket_cap_mb=25`` [src: torch-ddp] and a
factor of 5 and 4 either side — a search grid, not a measured optimum."""
PS_KEYS = ("dp_sync", "ps_mode", "ps_shards", "ps_server_nodes", "staleness_steps")
"""Pins that decide the gradient sync's kind (no parameter-server variants then: the pins say)."""


def offload_values(cluster) -> tuple[Offload, ...]:
    """The offload targets the cluster gives the figures to time: optimizer and parameter offload
    need the host's PCIe bandwidth and CPU Adam throughput (:mod:`simulator.compile.offload_part`),
    NVMe also the drives' capacity and bandwidth."""
    host = cluster.node.host
    if host is None or host.cpu_adam_params_per_s <= 0 or host.h2d_bw_GBps <= 0:
        return ()
    nvme = host.nvme_bytes > 0 and host.nvme_read_GBps > 0 and host.nvme_write_GBps > 0
    return (Offload.OPTIMIZER, Offload.PARAMS) + ((Offload.NVME,) if nvme else ())


def offload_missing(cluster, offload: Offload) -> str | None:
    """Why ``cluster`` cannot time ``offload`` (None: it can)."""
    if offload is Offload.NONE or offload in offload_values(cluster):
        return None
    host = cluster.node.host
    if host is None or host.cpu_adam_params_per_s <= 0:
        return (f"cluster {cluster.name!r} gives no CPU Adam throughput (host.cpu_adam_params_per_s) to time the "
                "optimizer on the host; add it to the cluster file")
    return f"cluster {cluster.name!r} gives no NVMe capacity and bandwidth (host.nvme_*); add them to the cluster file"


def check_offload_pin(cluster, values) -> None:
    """A pinned offload the cluster cannot time is an error naming the missing figure."""
    for value in values:
        why = offload_missing(cluster, value)
        if why:
            raise SpecError("offload", f"{value.value}: {why}, or leave --offload out")


def dominated_algorithms(cluster, zero: ZeroStage) -> frozenset[AllReduceAlgorithm]:
    """Fixed algorithms ``auto`` chooses among for the dp sync's collective on this cluster, hence
    never faster than ``auto`` in the closed form (module docstring). The pool is the registry's
    ``auto`` rule: NCCL's tuner choices on an NCCL cluster, gloo's own algorithm on a gloo cluster where the
    registry names it (``registry.GLOO_NATIVE``), every algorithm otherwise."""
    op = "all-reduce" if zero < ZeroStage.ZERO2 else "reduce-scatter"
    if cluster.comm.library is CommLibrary.GLOO and Op(op) in GLOO_NATIVE:  # auto is gloo's own algorithm
        return frozenset(a for a in ALGORITHMS if a.value == GLOO_NATIVE[Op(op)])
    if cluster.comm.library is CommLibrary.NCCL:
        pool = set(tuner_choices(op))
        return frozenset(a for a in ALGORITHMS if a.value in pool)
    return frozenset(a for a in ALGORITHMS if a is not AllReduceAlgorithm.AUTO)


def notes(cluster, pins: dict) -> list[str]:
    """What the second phase left out and why, for ``--explain``."""
    out = []
    if "offload" not in pins and not offload_values(cluster):
        out.append(f"No offload plan searched: {offload_missing(cluster, Offload.OPTIMIZER)} to search it.")
    if "allreduce_algorithm" not in pins and pins.get("dp_sync") != (DpSyncKind.PARAM_SERVER,):
        gone = sorted({a.value for z in ZeroStage for a in dominated_algorithms(cluster, z)})
        out.append(f"All-reduce {', '.join(gone)} not ranked: auto picks the fastest of them per call "
                   "(never slower in the closed form).")
    return out


def ps_shards(cluster) -> tuple[int, ...]:
    """Parameter-server shard counts tried: one server (TensorFlow's default of one PS task), one per
    node, one per GPU (BytePS-style, every machine serves a slice)."""
    return tuple(sorted({1, cluster.nodes, cluster.world_size}))


def _sync_changes(s: Strategy, cluster, pins: dict) -> list:
    """Changes of ``s``'s all-reduce: the undominated algorithms, then the bucket sizes."""
    if s.dp == 1 or not isinstance(s.dp_sync, AllReduceSync):
        return []
    out = []
    if "allreduce_algorithm" not in pins:
        skip = dominated_algorithms(cluster, s.zero) | {s.dp_sync.algorithm}
        out += [lambda s, a=a: replace(s, dp_sync=replace(s.dp_sync, algorithm=a)) for a in ALGORITHMS if a not in skip]
    if "bucket_bytes" not in pins and "bucket_params" not in pins:
        out += [lambda s, b=mib * MiB: replace(s, dp_sync=replace(s.dp_sync, bucket_bytes=b, bucket_params=None))
                for mib in BUCKET_MIB if s.dp_sync.resolved_bucket_bytes(1) != mib * MiB]
    return out


def _ps_changes(s: Strategy, cluster) -> list:
    """A colocated parameter server in place of the all-reduce of a ZeRO-0 base."""
    if s.dp == 1 or s.zero is not ZeroStage.ZERO0 or not isinstance(s.dp_sync, AllReduceSync):
        return []
    return [lambda s, mode=mode, k=k: replace(s, dp_sync=ParamServerSync(mode=mode, shards=k),
                                              gradient_as_bucket_view=False)
            for mode in ParamServerMode for k in ps_shards(cluster) if k <= s.dp]


def _offload_changes(s: Strategy, cluster) -> list:
    """Each offload target the ZeRO stage allows (optimizer: ZeRO ≥ 1; parameters, NVMe: ZeRO-3)."""
    if s.offload is not Offload.NONE or s.zero is ZeroStage.ZERO0:
        return []
    targets = offload_values(cluster) if s.zero is ZeroStage.ZERO3 else (Offload.OPTIMIZER,)
    return [lambda s, o=o: replace(s, offload=o) for o in targets if o in offload_values(cluster)]


def activation_offload_possible(cluster) -> bool:
    """Whether the cluster gives a host to hold checkpoints and a host link to time their copies."""
    host = cluster.node.host
    return host is not None and host.cpu_memory_bytes > 0 and host.h2d_bw_GBps > 0


def _activation_changes(s: Strategy, cluster, model_state: bool) -> list:
    """Activation offload of a full-recomputation base, alone and (``model_state``) with each
    model-state offload its ZeRO stage allows (a base may need both to fit)."""
    if s.recompute is not Recompute.FULL or s.offload_activations or not activation_offload_possible(cluster):
        return []
    on = [lambda s: replace(s, offload_activations=True)]
    if model_state:
        on += [lambda s, c=c: replace(c(s), offload_activations=True) for c in _offload_changes(s, cluster)]
    return on


def _placement_changes(s: Strategy, node: NodeShape, cross_node_tp: bool) -> list:
    """The orders the first phase left out for ``s``'s degrees: those putting tp across nodes
    (:func:`planner.placement.split_orders`), so that ``--explain`` can say what they cost."""
    later = split_orders(node, s.dp, s.tp, s.pp, s.cp, s.ep, cross_node_tp=cross_node_tp)[1]
    return [lambda s, o=o: replace(s, placement=o) for o in later]


def sync_candidates(frame) -> list[Strategy]:
    """Bases past the first :data:`VARIANT_BASES` (of ``frame``, the ranked first phase, fastest first)
    whose gradient-sync variants could still beat the best base in the closed form.

    A variant changes only the gradient sync, so on the base's slowest rank it can at most remove what
    the sync's calls expose (``dp``, ``zero``, ``ps``), the bubble too where ZeRO-2/3 reduce-scatters
    run inside each backward of a pipeline, and the GPU optimizer of a ZeRO-0 base (a parameter server
    takes the update over): the base's step less those is a lower bound on every variant's. A base
    whose bound is not below the best step has no variant that wins, so the best plan's sync is the
    closed form's best over every base, at the cost of the few bases within reach."""
    if len(frame) <= VARIANT_BASES:
        return []
    rest = frame.iloc[VARIANT_BASES:]
    strategies = list(rest["strategy"])
    col = lambda name: rest[name].to_numpy() if name in rest else 0.0  # noqa: E731
    zero = np.array([int(s.zero) for s in strategies])
    piped = np.array([s.pp > 1 for s in strategies])
    reachable = (col("dp") + col("zero") + col("ps") + np.where((zero >= 2) & piped, col("bubble"), 0.0)
                 + np.where(zero == 0, col("optimizer"), 0.0))
    within = rest["step_time_s"].to_numpy() - reachable < float(frame["step_time_s"].iloc[0])
    return [s for s, keep in zip(strategies, within) if keep]


def variants(ranked: list[Strategy], over_gpu: list[Strategy], cluster, pins: dict,
             allowed=lambda key: True, cross_node_tp: bool = False,
             within_reach: list[Strategy] = ()) -> tuple[list[Strategy], int]:
    """(variants to rank, variants the strategy's own checks refuse) of the best ``ranked`` bases
    (fastest first) and of the ``over_gpu`` bases (closest to fitting first); ``allowed(key)`` says
    whether the framework profile lets that dimension vary (``dp_sync``, ``allreduce_algorithm``,
    ``bucket_bytes``, ``offload``); ``cross_node_tp``: the first phase already searched the orders
    that put tp across nodes; ``within_reach``: further bases whose gradient-sync variants could win
    (:func:`sync_candidates`)."""
    fixed = dict(pins) | {k: () for k in ("allreduce_algorithm", "bucket_bytes") if not allowed(k)}
    sync_bases = ranked[:VARIANT_BASES] + list(within_reach)
    jobs = [(s, _sync_changes(s, cluster, fixed)) for s in sync_bases]
    if "offload_activations" not in pins and allowed("offload_activations"):
        full = [s for s in over_gpu if s.recompute is Recompute.FULL][:VARIANT_BASES]
        jobs += [(s, _activation_changes(s, cluster, "offload" not in pins and allowed("offload"))) for s in full]
    if "placement" not in pins:
        node = NodeShape.of(cluster)
        jobs += [(s, _placement_changes(s, node, cross_node_tp)) for s in ranked[:VARIANT_BASES]]
    if not any(k in pins for k in PS_KEYS) and allowed("dp_sync"):
        zero0 = [s for s in ranked if s.zero is ZeroStage.ZERO0 and s.dp > 1][:VARIANT_BASES]
        zero0 += [s for s in within_reach if s.zero is ZeroStage.ZERO0 and s.dp > 1 and s not in zero0]
        jobs += [(s, _ps_changes(s, cluster)) for s in zero0]
    if "offload" not in pins and allowed("offload"):
        jobs += [(s, _offload_changes(s, cluster)) for s in ranked[:VARIANT_BASES] + over_gpu[:VARIANT_BASES]]
    out: dict[Strategy, None] = {}
    refused = 0
    for s, changes in jobs:
        for change in changes:
            try:
                out.setdefault(change(s))
            except SpecError:
                refused += 1
    base = set(ranked) | set(over_gpu)
    return [v for v in out if v not in base], refused
