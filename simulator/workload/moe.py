"""Mixture-of-experts blocks: which layers route their tokens to experts, and what those layers hold.

A MoE layer replaces the dense MLP of a transformer block with ``E`` routed experts (each an MLP of
inner size ``f_e``, the block's activation kind), a router (a linear map h → E, no bias), and
optionally shared experts that every token passes through (inner size ``f_s`` each; Qwen-MoE adds a
sigmoid gate h → 1 on their output). Each token goes to its ``k`` highest-scoring experts (top-k;
Shazeer et al. 2017 [src: shazeer-2017], Fedus et al. 2022 [src: fedus-2022]). Parameters of one MoE
layer's MLP part (``mats`` = 3 for SwiGLU, 2 for GELU; no biases in the supported families)::

    routed experts   E · mats · h · f_e
    shared experts   mats · h · (n_s · f_s)      (+ h for Qwen's shared-expert gate)
    router           h · E

and the *active* parameters a token touches replace ``E`` by ``k``. Which layers are MoE: every
layer but those listed in ``dense_layers`` (DeepSeek's ``first_k_dense_replace`` keeps the first
k dense; Qwen's ``mlp_only_layers``); a dense layer has the spec's ordinary MLP (``ffn``).

Capacity factor (Fedus et al. 2022 §2.1 [src: fedus-2022]): an expert takes at most
``cf · tokens · k / E`` tokens, the rest are dropped; None is dropless (MegaBlocks, Megatron-Core's
default ``--moe-expert-capacity-factor None``). Compute uses it as a cap on the tokens the slowest
expert runs (:func:`expert_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.checks import positive_int, positive_number
from simulator.errors import SpecError

__all__ = ["MoESpec", "expert_tokens"]


@dataclass(frozen=True, kw_only=True)
class MoESpec:
    """The mixture-of-experts part of a transformer (see the module docstring)."""

    experts: int
    """Routed experts per MoE layer, ``E`` (Mixtral ``num_local_experts``, DeepSeek ``n_routed_experts``)."""
    top_k: int
    """Experts each token is routed to, ``k`` (``num_experts_per_tok``)."""
    expert_ffn: int
    """Inner size of one routed expert's MLP, ``f_e`` (``moe_intermediate_size``; Mixtral: ``intermediate_size``)."""
    shared_experts: int = 0
    """Shared experts every token passes through, ``n_s`` (DeepSeek ``n_shared_experts``; Qwen-MoE 1)."""
    shared_ffn: int | None = None
    """Inner size of one shared expert, ``f_s``; None: ``expert_ffn``."""
    shared_gate: bool = False
    """A sigmoid gate h → 1 scales the shared experts' output (Qwen2-MoE ``shared_expert_gate``)."""
    dense_layers: tuple[int, ...] = ()
    """Indices of the layers that keep a dense MLP (DeepSeek's first ``first_k_dense_replace``)."""
    capacity_factor: float | None = None
    """Tokens an expert accepts, as a multiple of its balanced share ``tokens·k/E``; None: dropless."""
    expert_groups: int = 1
    """Groups of ``E/G`` consecutive experts for group-limited routing, ``G`` (DeepSeek ``n_group``)."""
    groups_per_token: int | None = None
    """Groups a token's experts may come from, ``m`` (DeepSeek ``topk_group``); None: all ``G``
    (:mod:`simulator.workload.moe_routing`)."""

    def __post_init__(self) -> None:
        for name in ("experts", "top_k", "expert_ffn"):
            positive_int(f"model.moe.{name}", getattr(self, name))
        if not isinstance(self.shared_experts, int) or isinstance(self.shared_experts, bool) \
                or self.shared_experts < 0:
            raise SpecError("model.moe.shared_experts", f"must be a non-negative integer, got {self.shared_experts!r}")
        if self.shared_ffn is not None:
            positive_int("model.moe.shared_ffn", self.shared_ffn)
        if self.top_k > self.experts:
            raise SpecError("model.moe.top_k", f"{self.top_k} experts per token exceeds the {self.experts} experts; "
                            f"use at most {self.experts}")
        if not isinstance(self.dense_layers, tuple) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in self.dense_layers):
            raise SpecError("model.moe.dense_layers", f"must be a tuple of layer indices, got {self.dense_layers!r}")
        if self.capacity_factor is not None:
            positive_number("model.moe.capacity_factor", self.capacity_factor)
        self._check_groups()

    def _check_groups(self) -> None:
        positive_int("model.moe.expert_groups", self.expert_groups)
        if self.experts % self.expert_groups:
            raise SpecError("model.moe.expert_groups", f"{self.expert_groups} groups do not divide the "
                            f"{self.experts} experts; use a divisor")
        if self.groups_per_token is not None:
            positive_int("model.moe.groups_per_token", self.groups_per_token)
            if self.groups_per_token > self.expert_groups or \
                    self.groups_per_token * (self.experts // self.expert_groups) < self.top_k:
                raise SpecError("model.moe.groups_per_token", f"{self.groups_per_token} of {self.expert_groups} "
                                f"groups must exist and hold at least the {self.top_k} experts of a token")

    @property
    def shared_width(self) -> int:
        """Inner width of all shared experts together, ``n_s · f_s`` (they run as one MLP)."""
        return self.shared_experts * (self.expert_ffn if self.shared_ffn is None else self.shared_ffn)

    def is_moe(self, layer: int) -> bool:
        """Whether block ``layer`` routes to experts."""
        return layer not in self.dense_layers

    def moe_layers(self, layers: int) -> int:
        """How many of ``layers`` blocks are MoE layers."""
        return sum(1 for i in range(layers) if self.is_moe(i))

    def expert_params(self, hidden: int, mats: int) -> int:
        """Parameters of one routed expert: ``mats · h · f_e``."""
        return mats * hidden * self.expert_ffn

    def mlp_params(self, hidden: int, mats: int, *, active: bool = False) -> int:
        """Parameters of one MoE layer's MLP part (experts, shared experts, gate, router); with
        ``active``, only the ``k`` experts one token uses (router and shared experts included)."""
        routed = (self.top_k if active else self.experts) * self.expert_params(hidden, mats)
        shared = mats * hidden * self.shared_width + (hidden if self.shared_gate else 0)
        return routed + shared + hidden * self.experts

    def summary(self) -> dict:
        return {"experts": self.experts, "top_k": self.top_k, "expert_ffn": self.expert_ffn,
                "shared_experts": self.shared_experts, "shared_ffn": self.shared_width // max(self.shared_experts, 1),
                "shared_gate": self.shared_gate, "dense_layers": list(self.dense_layers),
                "capacity_factor": self.capacity_factor, "expert_groups": self.expert_groups,
                "groups_per_token": self.groups_per_token}


def expert_tokens(moe: MoESpec, tokens: float, skew: float, ep: int) -> float:
    """Tokens the busiest expert-parallel rank's experts process in one MoE layer (per micro-batch of
    ``tokens`` tokens on each of the ``ep`` ranks that exchange them).

    Balanced routing gives every expert ``tokens · ep · k / E`` tokens from the ep group, and a rank
    holds ``E/ep`` experts, so a rank processes ``tokens · k`` token-expert pairs. ``skew`` ≥ 1 scales
    the busiest rank's load (1: balanced; the slowest rank sets the time of the layer, since the
    combine all-to-all waits for it), at most to ``ep`` times its share (all the group's tokens): with
    ep = 1 every copy is processed locally whatever the routing. A capacity factor caps the load at
    ``cf · tokens · k``."""
    load = tokens * moe.top_k * min(skew, ep)
    if moe.capacity_factor is not None:
        load = min(load, tokens * moe.top_k * moe.capacity_factor)
    return load
