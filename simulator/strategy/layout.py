"""The parallel layout: a strategy checked against a cluster and a workload, with everything derived.

``build_layout(strategy, cluster, workload)`` is the one place the cross-input rules live:

- world size = dp·tp·pp·cp equals the worker GPUs (all GPUs, less dedicated parameter-server nodes);
- a model without experts keeps the MoE routing fields at their defaults
  (:func:`simulator.strategy.rules.moe_fields_problem`);
- the workload accepts the context split (:func:`simulator.strategy.rules.context_problem`);
- the workload accepts the tp degree (``Workload.check_tp``: a transformer's tp divides its
  attention heads and key/value heads, as Megatron-Core's ``divide`` requires);
- pp·v ≤ layers (every virtual stage holds at least one layer); an explicit split sums to layers;
- the global batch splits into dp replicas × micro-batches: m = B ÷ (dp·b), and gradient
  accumulation runs the same m micro-batches per optimizer step;
- interleaved schedules need m a multiple of pp (Megatron-LM's original rule);
- per-rank speed factors, parameter-server nodes and storage bandwidth fit the cluster.

The degree and batch rules are :data:`simulator.strategy.rules.RULES` (shared with the planner's
vector check); :func:`simulator.strategy.rule_errors.check_rules` words the first one broken.

Rank numbering: ``placement`` lists the dimensions innermost first; rank = Σ coord·stride with
stride 1 for the innermost. Stage s of a pipeline (s < pp·v) lives on pp rank ``s mod pp``.

Context parallelism: the cp ranks of one data-parallel replica hold the same weights, so they join
the replicas in the gradient reduction and in ZeRO's partitioning — Megatron-Core reduces
gradients and shards the distributed optimizer over the data-parallel group *with* context
parallelism (``get_data_parallel_group(with_context_parallel=True)`` [src: megatron-cp]). The grid's
``dp`` dimension therefore has ``dp·cp`` coordinates (:attr:`ParallelLayout.dp_cp`), cp innermost in
it: coordinate ``g`` is replica ``g // cp``, context rank ``g mod cp``. With the placement
``tp-dp-pp`` that is Megatron-LM's order tp-cp-dp-pp [src: megatron-core].
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from simulator.cluster.spec import Cluster
from simulator.errors import SpecError
from simulator.schedules import PipelineSchedule, make_schedule
from simulator.strategy.combinations import check_schedules_per_step
from simulator.strategy.framework import Framework, Partitioning
from simulator.strategy.kinds import AttentionKind
from simulator.strategy.layer_split import split_layers
from simulator.strategy.rule_errors import check_rules
from simulator.strategy.rules import MOE_ONLY_FIELDS, context_problem, moe_fields_problem
from simulator.strategy.spec import DataSource, Strategy
from simulator.strategy.sync import ParamServerSync
from simulator.strategy.formats import grad_reduce_dtype
from simulator.strategy.precision import check_fp8
from simulator.workload.flops import Recompute
from simulator.workload.op_sac import op_sac_problem
from simulator.workload.protocol import Workload


@dataclass(frozen=True)
class RankCoord:
    """Where one rank sits in the (dp, pp, tp) grid."""

    dp: int
    pp: int
    tp: int


@dataclass(frozen=True, kw_only=True)
class ParallelLayout:
    """Derived, checked values of (strategy, cluster, workload); built by :func:`build_layout`."""

    strategy: Strategy
    world_size: int
    """Worker GPUs: dp·tp·pp·cp."""
    dp: int
    tp: int
    pp: int
    v: int
    """Virtual stages (model chunks) per pipeline rank."""
    micro_batches: int
    """Micro-batches per optimizer step on each pipeline, m = global_batch ÷ (dp·micro_batch)."""
    grad_accum_steps: int
    """Forward/backward passes whose gradients one optimizer step sums (= micro_batches)."""
    layers_per_stage: tuple[int, ...]
    """Layers of each global (virtual) stage, pp·v entries in model order."""
    sequence_parallel: bool
    """Sequence parallelism in effect (requested and tp > 1)."""
    bucket_bytes: int | None
    """Gradient bucket capacity in bytes; None: one bucket of all gradients, or a parameter server."""
    ps_shard_nodes: tuple[int, ...] = ()
    """Node holding each parameter-server shard (empty under all-reduce)."""
    framework: Framework = Framework.TORCH_DDP
    """Who implements the ZeRO stage (given, or implied: :func:`resolve_framework`)."""
    partitioning: Partitioning = Partitioning.FLAT
    """How partitioned states are split over the dp ranks (given, or the framework's)."""
    ep: int = 1
    """Expert-parallel degree: ep consecutive dp indices (at one context-parallel coordinate) share one MoE
    layer's experts (Megatron-Core's rank order tp-cp-ep-dp-pp puts ep inside dp, cp inside ep
    [src: megatron-core]); ep divides dp."""
    cp: int = 1
    """Context-parallel degree (ranks splitting each sample's sequence)."""

    @property
    def dp_cp(self) -> int:
        """Ranks holding the same weights, dp·cp: the gradient-reduction and ZeRO group (module docstring)."""
        return self.dp * self.cp

    def cp_group(self, dp: int, pp: int, tp: int) -> tuple[int, ...]:
        """The context-parallel ranks of replica ``dp`` at (pp, tp), in ring order."""
        return tuple(self.rank_of(dp * self.cp + c, pp, tp) for c in range(self.cp))

    @cached_property
    def schedule(self) -> PipelineSchedule:
        """The per-rank action lists every pipeline runs, built on first use (a memory query or a
        planner's feasibility check never needs them; a GPipe list grows with the micro-batches)."""
        return make_schedule(self.strategy.schedule, self.pp, self.micro_batches, self.v,
                             self.strategy.schedules_per_step)

    @property
    def dims(self) -> dict[str, int]:
        """Coordinates per grid dimension; ``dp`` counts dp·cp (module docstring)."""
        return {"dp": self.dp_cp, "pp": self.pp, "tp": self.tp}

    def coords(self, rank: int) -> RankCoord:
        """(dp, pp, tp) coordinates of ``rank`` under the placement order (dp: the dp·cp coordinate)."""
        if not 0 <= rank < self.world_size:
            raise SpecError("rank", f"{rank} is outside the {self.world_size} worker ranks")
        out, dims = {}, self.dims
        for name in self.strategy.placement.dims:
            rank, out[name] = divmod(rank, dims[name])
        return RankCoord(**out)

    def rank_of(self, dp: int, pp: int, tp: int) -> int:
        """Inverse of :meth:`coords`."""
        coord, dims, rank, stride = {"dp": dp, "pp": pp, "tp": tp}, self.dims, 0, 1
        for name in self.strategy.placement.dims:
            size = dims[name]
            if not 0 <= coord[name] < size:
                raise SpecError(name, f"coordinate {coord[name]} is outside 0..{size - 1}")
            rank += coord[name] * stride
            stride *= size
        return rank

    def _groups(self, dim: str) -> tuple[tuple[int, ...], ...]:
        others = [d for d in ("dp", "pp", "tp") if d != dim]
        groups = []
        for a in range(self.dims[others[0]]):
            for b in range(self.dims[others[1]]):
                fixed = {others[0]: a, others[1]: b}
                groups.append(tuple(self.rank_of(**fixed, **{dim: i}) for i in range(self.dims[dim])))
        return tuple(sorted(groups))

    @property
    def tp_groups(self) -> tuple[tuple[int, ...], ...]:
        """Ranks that split each layer's tensors together, one tuple per group, in tp-rank order."""
        return self._groups("tp")

    @property
    def pp_groups(self) -> tuple[tuple[int, ...], ...]:
        """Ranks of each pipeline, in stage order."""
        return self._groups("pp")

    @property
    def dp_groups(self) -> tuple[tuple[int, ...], ...]:
        """Replicas of the same shard that reduce gradients together (dp·cp ranks each)."""
        return self._groups("dp")

    def ep_group(self, pp: int, tp: int = 0, dp: int = 0) -> tuple[int, ...]:
        """Ranks that exchange tokens by all-to-all with the rank at (dp, pp, tp) (``dp``: its dp·cp coordinate,
        replica ``dp // cp`` at context rank ``dp % cp``): the ep consecutive replicas of its block, same cp
        rank, pp and tp — each cp rank routes its own s/cp tokens."""
        replica, c = divmod(dp, self.cp)
        first = replica - replica % self.ep
        return tuple(self.rank_of((first + i) * self.cp + c, pp, tp) for i in range(self.ep))

    def expert_dp_group(self, pp: int, tp: int = 0, dp: int = 0) -> tuple[int, ...]:
        """Ranks holding the same experts as the rank at (dp, pp, tp) (``dp``: its dp·cp coordinate): the
        replicas ≡ its own mod ep, at every context rank — (dp/ep)·cp ranks, which reduce the experts'
        gradients and shard their ZeRO states (Megatron-Core's expert-data-parallel group with context
        parallelism [src: megatron-moe-cp])."""
        line, cp = self.dp_line(pp, tp), self.cp
        return tuple(line[d * cp + c] for d in range((dp // cp) % self.ep, self.dp, self.ep) for c in range(cp))

    def dp_line(self, pp: int, tp: int) -> tuple[int, ...]:
        """``rank_of(d, pp, tp)`` for d = 0 … dp·cp − 1, as the arithmetic run it is (linear in each coordinate)."""
        first = self.rank_of(0, pp, tp)
        stride = self.rank_of(1, pp, tp) - first if self.dp_cp > 1 else 1
        return tuple(range(first, first + self.dp_cp * stride, stride))

    @property
    def layers_per_rank(self) -> tuple[int, ...]:
        """Layers each pp rank holds (summed over its v chunks)."""
        return tuple(sum(self.layers_per_stage[r::self.pp]) for r in range(self.pp))

    def layer_indices(self, rank: int) -> tuple[int, ...]:
        """Model layer indices pp rank ``rank`` holds: its chunks ``rank, rank + pp, ...`` in order."""
        starts = [sum(self.layers_per_stage[:i]) for i in range(len(self.layers_per_stage))]
        return tuple(i for c in range(rank, len(starts), self.pp)
                     for i in range(starts[c], starts[c] + self.layers_per_stage[c]))

    @property
    def embedding_ranks(self) -> tuple[int, ...]:
        """Ranks holding the token embedding: pp rank 0 (stage 0) of every pipeline."""
        return tuple(r for r in range(self.world_size) if self.coords(r).pp == 0)

    @property
    def head_ranks(self) -> tuple[int, ...]:
        """Ranks holding the output head (logits): the pp rank of the last stage, pp − 1."""
        return tuple(r for r in range(self.world_size) if self.coords(r).pp == self.pp - 1)


def worker_gpus(s: Strategy, cluster: Cluster, gpus: int | None) -> tuple[int, tuple[int, ...]]:
    sync = s.dp_sync
    if not isinstance(sync, ParamServerSync):
        if gpus is None:
            return cluster.world_size, ()
        if not isinstance(gpus, int) or isinstance(gpus, bool) or not 1 <= gpus <= cluster.world_size:
            raise SpecError("gpus", f"must be 1..{cluster.world_size} (the cluster's GPUs), got {gpus!r}; "
                            "give more nodes")
        return gpus, ()
    if gpus is not None:
        raise SpecError("gpus", "a parameter-server layout uses every worker node; size the cluster instead")
    if sync.server_nodes >= cluster.nodes:
        raise SpecError("ps_server_nodes", f"{sync.server_nodes} server nodes leave no workers in "
                        f"{cluster.nodes} nodes; use at most {cluster.nodes - 1}")
    workers = cluster.nodes - sync.server_nodes
    if sync.colocated:
        shard_nodes = tuple(i % cluster.nodes for i in range(sync.shards))
    else:
        shard_nodes = tuple(workers + i % sync.server_nodes for i in range(sync.shards))
    return workers * cluster.node.gpus_per_node, shard_nodes


def derived_dp(s: Strategy, gpus: int) -> int:
    """dp as given, or derived as gpus ÷ (tp·pp·cp) (0 when that does not divide: the dp rule of RULES
    then fails and says so)."""
    if s.dp is not None:
        return s.dp
    model = s.tp * s.pp * s.cp
    return 0 if gpus % model else gpus // model


def _check_cluster_inputs(s: Strategy, cluster: Cluster, world: int) -> None:
    if s.stragglers.speed_factors and len(s.stragglers.speed_factors) != world:
        raise SpecError("speed_factors", f"has {len(s.stragglers.speed_factors)} entries; give one per rank "
                        f"({world})")
    pipe = s.input
    if pipe.bytes_per_sample and pipe.source is not DataSource.SYNTHETIC:
        host = cluster.node.host
        if host is None or host.storage_read_GBps <= 0:
            raise SpecError("bytes_per_sample", f"the cluster {cluster.name!r} gives no host.storage_read_GBps; "
                            "add it to the cluster file, or use data_source synthetic")


def build_layout(strategy: Strategy, cluster: Cluster, workload: Workload, gpus: int | None = None) -> ParallelLayout:
    """Check ``strategy`` against ``cluster`` and ``workload``; raise SpecError at the first violation.

    ``gpus``: worker GPUs the job uses, the first ones of the cluster (default: all of them, less
    dedicated parameter-server nodes); a job smaller than one node uses part of it.
    """
    if not isinstance(strategy, Strategy):
        raise SpecError("strategy", f"must be a Strategy, got {type(strategy).__name__}")
    workload.check_tp(strategy.tp)
    workload.check_ep(strategy.ep)
    moe_problem = moe_fields_problem(workload, {name: (getattr(strategy, name),) for name in MOE_ONLY_FIELDS})
    if moe_problem is not None:
        raise SpecError(*moe_problem)
    problem = context_problem(workload, strategy.context, strategy.tp)
    if problem is not None:
        raise SpecError("cp", problem)
    if strategy.recompute is Recompute.SELECTIVE_OP:
        problem = op_sac_problem(workload, strategy.attention is AttentionKind.FLASH)
        if problem is not None:
            raise SpecError("recompute", problem)
    gpus, shard_nodes = worker_gpus(strategy, cluster, gpus)
    dp = derived_dp(strategy, gpus)
    check_rules(strategy, dp, gpus, workload.layer_count)
    split = split_layers(strategy, workload.layer_count)
    m = strategy.global_batch // (dp * strategy.micro_batch)
    check_schedules_per_step(strategy, m)
    _check_cluster_inputs(strategy, cluster, gpus)
    check_fp8(strategy, cluster, workload)
    sync = strategy.dp_sync
    grad_bytes = grad_reduce_dtype(workload.dtype, strategy).grad_bytes  # a bucket of elements holds these
    bucket = None if isinstance(sync, ParamServerSync) else sync.resolved_bucket_bytes(grad_bytes)
    return ParallelLayout(
        strategy=strategy, world_size=gpus, dp=dp, tp=strategy.tp, pp=strategy.pp, v=strategy.virtual_stages,
        micro_batches=m, grad_accum_steps=m, layers_per_stage=split, ep=strategy.ep,
        sequence_parallel=strategy.sequence_parallel and strategy.tp > 1,
        bucket_bytes=bucket, ps_shard_nodes=shard_nodes, framework=strategy.resolved_framework,
        partitioning=strategy.resolved_partitioning, cp=strategy.cp)
