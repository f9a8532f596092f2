"""Multi-head Latent Attention (DeepSeek-V2/V3): its parameters, FLOPs per token and kernels.

MLA (DeepSeek-AI 2024, DeepSeek-V2 §2.1 [src: deepseek-v2]) compresses keys and values through a
latent of ``d_c`` (``kv_lora_rank``) and, optionally, queries through one of ``d_q`` (``q_lora_rank``);
each head's query and key are a non-rotary part of ``d_nope`` and a rotary part of ``d_rope``, the
rotary key shared by all heads; values have ``d_v`` per head. With ``n`` heads, hidden ``h``, and
``d_qk = d_nope + d_rope`` (the training form, as transformers' ``DeepseekV2Attention`` and
Megatron-Core's ``MLASelfAttention`` run it: the up-projections are applied, not absorbed)::

    q        h × n·d_qk                          (no q latent: DeepSeek-V2-Lite)
             h × d_q, RMSNorm d_q, d_q × n·d_qk    (q latent: V2, V3)
    kv down  h × (d_c + d_rope), RMSNorm d_c
    kv up    d_c × n·(d_nope + d_v)
    out      n·d_v × h

No biases. FLOPs per token: twice those weights (norms excluded), and the attention core
``2·s·n·d_qk`` (scores) ``+ 2·s·n·d_v`` (weighted values), full s×s as the rest of the simulator counts.
Tensor parallelism splits the heads (the q and kv up-projections by columns, the output by rows); the
down-projections and their norms are replicated on every tp rank (Megatron-Core's MLA keeps
``linear_q_down_proj`` / ``linear_kv_down_proj`` duplicated [src: megatron-core]).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.checks import positive_int

__all__ = ["MLASpec"]


@dataclass(frozen=True, kw_only=True)
class MLASpec:
    """The latent-attention shapes (config.json keys in brackets)."""

    kv_lora_rank: int
    """``d_c``, the key/value latent (``kv_lora_rank``)."""
    qk_nope_head_dim: int
    """``d_nope``, the non-rotary part of a query/key head (``qk_nope_head_dim``)."""
    qk_rope_head_dim: int
    """``d_rope``, the rotary part, one key shared by the heads (``qk_rope_head_dim``)."""
    v_head_dim: int
    """``d_v``, a value head (``v_head_dim``)."""
    q_lora_rank: int | None = None
    """``d_q``, the query latent (``q_lora_rank``); None: queries projected directly."""

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            positive_int(f"model.mla.{name}", getattr(self, name))
        if self.q_lora_rank is not None:
            positive_int("model.mla.q_lora_rank", self.q_lora_rank)

    @property
    def qk_head_dim(self) -> int:
        """``d_qk = d_nope + d_rope``."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def projections(self, hidden: int, heads: int) -> dict[str, tuple[int, int]]:
        """The weight matrices as (input, output) sizes, in execution order (module docstring)."""
        q = heads * self.qk_head_dim
        out = {}
        if self.q_lora_rank is None:
            out["q"] = (hidden, q)
        else:
            out["q_down"], out["q_up"] = (hidden, self.q_lora_rank), (self.q_lora_rank, q)
        out["kv_down"] = (hidden, self.kv_lora_rank + self.qk_rope_head_dim)
        out["kv_up"] = (self.kv_lora_rank, heads * (self.qk_nope_head_dim + self.v_head_dim))
        out["out"] = (heads * self.v_head_dim, hidden)
        return out

    def norm_params(self) -> int:
        """The latents' RMSNorm weights: ``d_c`` (+ ``d_q``)."""
        return self.kv_lora_rank + (self.q_lora_rank or 0)

    def params(self, hidden: int, heads: int) -> int:
        """All attention parameters of one block: the projections and the latent norms."""
        return sum(i * o for i, o in self.projections(hidden, heads).values()) + self.norm_params()

    def saved_elements(self, heads_per_rank: float) -> float:
        """Activation elements per token one block's attention keeps for backward on a rank of
        ``heads_per_rank`` heads (the dense count's Q, K, V, O and rotated parts, with MLA's widths):
        Q and K ``n_t·d_qk`` each, V and O ``n_t·d_v`` each, the rotated query and key parts
        ``(n_t + 1)·d_rope``, and each latent before and after its RMSNorm (``2·d_c``, ``2·d_q``)."""
        n = heads_per_rank
        return (n * (2 * self.qk_head_dim + 2 * self.v_head_dim) + (n + 1) * self.qk_rope_head_dim
                + 2 * self.norm_params())

    def fwd_flops_per_token(self, hidden: int, heads: int, seq: int) -> dict[str, float]:
        """Forward matmul FLOPs per token: ``qkv`` (every projection but the output one), the attention
        core, ``out_proj`` (keys as :func:`simulator.workload.flops.layer_fwd_flops_per_token`)."""
        mats = self.projections(hidden, heads)
        qkv = sum(2.0 * i * o for name, (i, o) in mats.items() if name != "out")
        return {"qkv": qkv, "attention": 2.0 * seq * heads * (self.qk_head_dim + self.v_head_dim),
                "out_proj": 2.0 * mats["out"][0] * mats["out"][1]}
