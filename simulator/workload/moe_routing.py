"""Where a MoE layer's tokens go: how many distinct ranks and nodes of an expert-parallel group one
token's ``k`` routed experts lie on, and how the framework's dispatcher ships the token there.

The experts of an ep group are laid out in order: unit ``u`` of ``U`` (a rank of the group, or a
node holding ``ep/N`` of its ranks) holds the ``E/U`` consecutive experts ``u·E/U … (u+1)·E/U − 1``
(Megatron-Core and DeepEP both place expert ``e`` on ep rank ``e // (E/ep)``). Expected distinct
units a token touches, for the two routings here:

- :attr:`Routing.LEARNED`: the model's own gate, each token's ``k`` experts uniform among the
  experts it may use (the balanced-routing assumption of the rest of the model). With group-limited
  routing (DeepSeek-V2/V3 ``n_group`` = G groups of ``E/G`` consecutive experts, ``topk_group`` = m
  of them per token; DeepSeek-V3's node-limited routing, at most 4 nodes per token, §2.1.2 of
  [src: deepseek-v3]) the token first picks m groups uniformly, then k experts among their
  ``A = m·E/G``. A unit overlaps ``t = max(1, G/U)`` groups with ``o = min(E/G, E/U)`` experts each;
  the number X of selected groups among them is hypergeometric (G, t, m), and::

      P(unit missed) = Σ_x P(X = x) · C(A − x·o, k) / C(A, k)
      E[units] = U · (1 − P(unit missed))

  No group limit is G = m = 1 (then ``P(missed) = C(E − E/U, k)/C(E, k)``). Where groups and units
  do not nest (neither size divides the other) the group limit is ignored (an upper bound).
- :attr:`Routing.ROUND_ROBIN`: NeMo AutoModel's ``FakeBalancedGate`` (``fake_balanced_gate:
  true``): token ``t`` goes to experts ``(t·k + j) mod E``, j < k (``nemo_automodel/components/moe/
  layers.py``, ``FakeBalancedGate.forward``) [src: automodel-perf]: k consecutive experts; the
  distinct units are counted exactly over the starts ``t·k mod E``.
"""

from __future__ import annotations

from math import comb, gcd

from simulator.enum_kind import Kind
from simulator.errors import SpecError

__all__ = ["Dispatcher", "Routing", "distinct_units"]


class Dispatcher(Kind):
    """How the framework moves a MoE layer's tokens to their experts (and back)."""

    PER_EXPERT = "per-expert"
    """One copy per routed expert, ``T·k`` per rank, in one all-to-all over the ep group:
    Megatron-Core's ``alltoall`` token dispatcher permutes the tokens by expert before the
    all-to-all (``megatron/core/transformer/moe/token_dispatcher.py``, ``MoEAlltoAllTokenDispatcher``)
    [src: megatron-core]; DeepSpeed-MoE likewise [src: deepspeed-moe]."""
    DEEPEP = "deepep"
    """DeepEP's normal (high-throughput) kernels: a token crosses the network once per destination
    node (RDMA to the GPU of the same local index there) and is forwarded over NVLink once per
    destination rank on that node (README, "intranode and internode ... with NVLink and RDMA
    forwarding") [src: deepep]; DeepSeek-V3 §3.2.2 [src: deepseek-v3]."""


class Routing(Kind):
    """Which experts a token's router picks (module docstring)."""

    LEARNED = "learned"
    """The model's gate, uniform over the experts it allows (group-limited where the model is)."""
    ROUND_ROBIN = "round-robin"
    """AutoModel's fake balanced gate: k consecutive experts, starting at ``t·k mod E``."""


def _group_limited_missed(experts: int, top_k: int, groups: int, per_token: int, units: int) -> float:
    """P(one unit holds none of a token's experts) under (group-limited) uniform routing."""
    per_group, per_unit = experts // groups, experts // units
    if per_group % per_unit and per_unit % per_group:
        groups = per_token = 1  # groups and units do not nest: ignore the limit (upper bound)
        per_group = experts
    touching, overlap = max(1, groups * per_unit // experts), min(per_group, per_unit)
    allowed = per_token * per_group
    total = comb(groups, per_token)
    missed = 0.0
    for x in range(0, min(touching, per_token) + 1):
        p_x = comb(touching, x) * comb(groups - touching, per_token - x) / total
        missed += p_x * comb(allowed - x * overlap, top_k) / comb(allowed, top_k)
    return missed


def distinct_units(moe, routing: Routing, units: int) -> float:
    """Expected distinct units (of ``units`` equal blocks of consecutive experts) one token's ``k``
    routed experts lie on (module docstring); ``units`` must divide the experts."""
    experts, k = moe.experts, moe.top_k
    if units < 1 or experts % units:
        raise SpecError("ep", f"the {experts} experts do not split evenly over {units} ranks or nodes; "
                        "choose an ep whose ranks and nodes divide the experts")
    if units == 1:
        return 1.0
    per_unit = experts // units
    if routing is Routing.ROUND_ROBIN:
        starts = range(0, experts, gcd(k, experts))
        return sum(len({((s + j) % experts) // per_unit for j in range(k)}) for s in starts) / len(starts)
    groups, per_token = moe.expert_groups, moe.groups_per_token or moe.expert_groups
    return units * (1.0 - _group_limited_missed(experts, k, groups, per_token, units))
