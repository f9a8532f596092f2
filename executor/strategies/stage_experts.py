"""Mixture-of-experts layers inside pipeline stages and tensor-parallel runs, with or without expert parallelism.

**Groups**: each stage's MoE layers exchange tokens over the ep group of its own pp rank — ep consecutive
dp indices with the same pp coordinate (``ParallelLayout.ep_group``) — and reduce the experts'
gradients over the stage's expert-data-parallel group (``ParallelLayout.expert_dp_group``), the
simulator's layout; :func:`executor.moe_parallel.make_ep_groups` creates them for every (pp, tp). This is the
placement Megatron-Core builds with pipelines (expert groups carved out of each pipeline stage's
data-parallel ranks [src: megatron-core]) and DeepSeek-V3 trains with (PP 16 × EP 64,
DeepSeek-AI 2024 §3.2 [src: deepseek-v3]).

**Order of the all-to-alls**: an ``all_to_all_single`` blocks until every rank of its group issued it,
so the ep peers must issue theirs in the same order. They hold the same stage of ep different
pipelines, and every pipeline runs the same per-rank action list (``ParallelLayout.schedule`` depends
on pp, m and v only, not on the replica): action j of pp rank p is the same (stage, micro-batch,
forward/backward) on every replica, and inside an action the MoE layers run in layer order (forward)
or in the autograd engine's reverse order (backward, one thread per device). The peers' receives wait
only on their own pipelines, which run the same list, so no cycle of waits forms. torch's runtime
metadata inference (the first ``step``: one forward and one input-gradient backward per stage on
empty tensors) runs the layers too, on every peer at the same point, before the first action.
With tp > 1 each tp coordinate has its own ep groups (``ParallelLayout.ep_group(pp, tp, dp)``) and every
rank issues the same sequence of collectives (the tp all-reduces of :mod:`executor.moe_tp` and the
all-to-alls, layer by layer), so a rank waiting in one finds its peers on the way to the same call.

**Gradients**: torch's schedule scales each stage's summed micro-batch gradients by 1/m; the dense
ones are then averaged over dp (``grad_sync.average_gradients``), the experts' summed over the
stage's expert-data-parallel group and divided by dp (:func:`executor.moe_parallel.reduce_expert_gradients`,
the rule in :mod:`executor.moe`'s docstring). Under ZeRO-2/3 each expert is an FSDP2 module over that
group (:func:`executor.moe_parallel.shard_experts`), the blocks over dp, one optimizer per mesh.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from executor.moe import apply_routing, moe_layers
from executor.moe_parallel import apply_expert_parallel, make_ep_groups, reduce_expert_gradients
from executor.moe_tp import reduce_replicated_grads, replicated_params


class StageExperts:
    """This rank's routed experts of a pipeline run: its ep groups (None at ep 1), their all-to-all clock and
    which of the stage parameters are experts (by identity, as the stages rename them)."""

    def __init__(self, ctx, full):
        layout, s, self.ctx = ctx.layout, ctx.layout.strategy, ctx
        self.routing = apply_routing(full, s.moe_routing, s.micro_batch * ctx.spec.seq_len)
        self.groups = self.clock = None
        if layout.ep > 1:
            self.groups = make_ep_groups(layout, ctx.rank)
            self.clock = apply_expert_parallel(full, self.groups)
        self._ids: set[int] = set()
        """The routed experts' parameters under ep > 1 (at ep 1 they are replicated like the rest)."""
        self.dp = layout.dp
        self.tp_group = ctx.mesh["tp"].get_group() if layout.tp > 1 else None
        self._replicated: list = []
        self._fsdp_mesh = None
        """Under tp > 1: the MoE layers' tp-replicated parameters with partial gradients (:meth:`reduce_tp`)."""

    @property
    def present(self) -> bool:
        return self.routing is not None

    def mark(self, modules) -> None:
        """Record the expert parameters (ep > 1) as the (possibly FSDP2-sharded) stage modules now hold them."""
        self._replicated = replicated_params(modules)
        if self.groups is not None:
            self._ids = {id(p) for m in modules for moe in moe_layers(m) for e in moe.experts for p in e.parameters()}

    def split(self, params) -> tuple[list, list]:
        """(dense, experts) of ``params``, order kept."""
        return [p for p in params if id(p) not in self._ids], [p for p in params if id(p) in self._ids]

    def reduce(self, params) -> None:
        """The experts' gradients summed over the stage's expert-data-parallel group, divided by dp."""
        if self.groups is not None:
            reduce_expert_gradients(self.split(params)[1], self.groups, self.dp)

    def fsdp_mesh(self):
        """Under tp > 1, the expert-data-parallel mesh FSDP2 shards the experts over, cut from the run's mesh (its
        dp dimension unflattened into (dp/ep, ep): ep consecutive dp indices form an ep group), so that it shares
        a root with the tp mesh of the experts' DTensor shards, as FSDP2 requires; None at tp 1 (``shard_experts``
        makes it from the group). Made once (every rank creates its groups alike)."""
        if self.tp_group is not None and self._fsdp_mesh is None:
            layout = self.ctx.layout
            self._fsdp_mesh = self.ctx.mesh["dp"]._unflatten(0, (layout.dp // layout.ep, layout.ep), ("edp", "ep"))["edp"]
        return self._fsdp_mesh

    def reduce_tp(self) -> float:
        """Under tp > 1, the MoE routers' (and shared gates') partial gradients summed over tp
        (:func:`executor.moe_tp.reduce_replicated_grads`); returns the seconds it took."""
        start = time.perf_counter()
        if self._replicated:
            reduce_replicated_grads(self._replicated, self.tp_group)
        return time.perf_counter() - start

    def grad_norm(self, modules, params, sharded: bool, dp_group) -> float:
        """The run's global gradient norm (:func:`grad_norm`), for the equivalence checks; ``params`` less the
        last stage's copy of a tied embedding."""
        copies = {id(m.tied_head) for m in modules if hasattr(m, "tied_head") and not m.first}
        dense, experts = self.split([p for p in params if id(p) not in copies])
        layout, mesh = self.ctx.layout, self.ctx.mesh
        return grad_norm(dense, experts, device=self.ctx.device, sharded=sharded, dp_group=dp_group,
                         ep_group=None if self.groups is None else self.groups.group,
                         tp_rank=layout.coords(self.ctx.rank).tp,
                         pp_group=mesh["pp"].get_group() if layout.pp > 1 else None,
                         tp_group=self.tp_group)

    def seconds(self) -> float:
        return 0.0 if self.clock is None else self.clock.seconds

    def components(self, spec, layout) -> dict[str, str]:
        out = {"moe routing": self.routing} if self.routing is not None else {}
        if self.routing is not None and layout.tp > 1:
            out["expert tensor parallel"] = (f"each expert split over tp={layout.tp} (DTensor shards, up by rows, down by "
                                             "columns), the router replicated; one tp all-reduce of the layer's output "
                                             "and of its input gradient, the routers' gradients summed over tp "
                                             "(executor/moe_tp.py)")
        if self.groups is not None:
            out["expert parallel"] = (
                f"ep={layout.ep} inside each pipeline stage: {spec.moe.experts // layout.ep} of {spec.moe.experts} "
                "experts per rank, dispatch and combine by dist.all_to_all_single over the stage's ep group "
                "(executor/moe.py, executor/strategies/stage_experts.py); expert gradients summed over the "
                f"stage's expert-data-parallel group of {len(self.groups.expert_dp_ranks)} rank(s) and divided "
                "by dp")
        return out


def tp_sharded(grad) -> bool:
    """Whether ``grad`` is split over tp (a DTensor with a ``Shard`` placement on its mesh's ``tp`` dimension)."""
    names = getattr(getattr(grad, "device_mesh", None), "mesh_dim_names", None) or ()
    return "tp" in names and grad.placements[names.index("tp")].is_shard()


def squares(params, replicated: bool = True) -> torch.Tensor:
    """Σ g² of the gradients of ``params`` (a DTensor's by its local shard), float32; those not split over tp
    only when ``replicated`` (one tp rank counts them)."""
    grads = [_reduced(p.grad) if hasattr(p.grad, "to_local") else p.grad for p in params if p.grad is not None]
    grads = [g.to_local() if hasattr(g, "to_local") else g for g in grads if replicated or tp_sharded(g)]
    return torch.stack([g.float().pow(2).sum() for g in grads]).sum() if grads else torch.zeros(())


def _reduced(grad):
    """A DTensor gradient with its pending (``Partial``) sums done, as the optimizer's ops would do them."""
    from torch.distributed.tensor import Replicate

    placements = [Replicate() if p.is_partial() else p for p in grad.placements]
    return grad if placements == list(grad.placements) else grad.redistribute(grad.device_mesh, placements)


def grad_norm(dense, experts, *, device, sharded: bool, dp_group, ep_group, pp_group, tp_group=None,
              tp_rank: int = 0) -> float:
    """Global L2 norm of a (dp, pp, tp) run's synchronised gradient, each element counted once: ``dense``
    (replicated over dp, or FSDP2 shards over it when ``sharded``) and ``experts`` (E/ep per rank of the
    ep group; FSDP2: shards over the expert-data-parallel group, so once over the dp ranks) summed
    over the stages (pp group); over tp, the shards split over it summed and the replicated tensors counted
    on tp rank 0. ``dense`` leaves out the last stage's copy of a tied embedding."""
    first = tp_rank == 0
    dense_sq, expert_sq = squares(dense, first).to(device), squares(experts, first).to(device)
    if sharded:
        total = dense_sq + expert_sq
        if dp_group is not None:
            dist.all_reduce(total, group=dp_group)
    else:
        if ep_group is not None:
            dist.all_reduce(expert_sq, group=ep_group)
        total = dense_sq + expert_sq
    if tp_group is not None:
        dist.all_reduce(total, group=tp_group)
    if pp_group is not None:
        dist.all_reduce(total, group=pp_group)
    return float(total.sqrt())
