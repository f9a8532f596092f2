"""The transformer workload: what the user gives (shapes, options) and the parameter counts it implies.

A decoder-only transformer of ``layers`` identical blocks. Each block: norm → attention (Q, K, V
projections, scores, softmax, scores × V, output projection) → residual add → norm → MLP → residual
add. Around the blocks: a token embedding (plus a learned position embedding for GPT-2/3 style
models), a final norm and the output (logits) projection, tied to the token embedding or not.

Parameter count per block (``h`` hidden, ``q = heads·head_dim``, ``kv = kv_heads·head_dim``,
``f`` FFN size)::

    attention   h·q + 2·h·kv + q·h            (+ q + 2·kv + h biases)
    MLP         GELU: 2·h·f    SwiGLU: 3·h·f  (+ f + h biases, GELU with biases)
    norms       LayerNorm 2·2h, RMSNorm 2·h

For GPT (MHA, f = 4h, biases, LayerNorm) a block is 12h² + 13h, and with the embeddings
``V·h + s·h`` this is Narayanan et al. SC'21 eq. 2, ``P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h))``;
we also count the final norm (2h), which eq. 2 leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.checks import positive_int
from simulator.errors import SpecError
from simulator.hashed_key import kept_hash, state_without_kept_hash
from simulator.workload import summary
from simulator.workload.chunks import transformer_chunk_load
from simulator.workload.flops import Recompute, model_flops_per_token, train_flops_per_token
from simulator.workload.kinds import ActivationKind, BiasKind, DtypePolicy, NormKind, PositionKind
from simulator.workload.mla import MLASpec
from simulator.workload.moe import MoESpec
from simulator.workload.protocol import ChunkLoad, ChunkSlice, ComputeOptions, divisors, no_experts, one_of

__all__ = ["ActivationKind", "BiasKind", "DtypePolicy", "NormKind", "PositionKind", "TransformerSpec"]


@dataclass(frozen=True, kw_only=True)
class TransformerSpec:
    """A decoder-only transformer, as a user (or a preset, or a config.json) describes it."""

    __hash__ = kept_hash  # hashed as a memo key thousands of times a search (simulator.hashed_key)
    __getstate__ = state_without_kept_hash

    name: str
    layers: int
    """Number of transformer blocks, ``l``."""
    hidden: int
    """Model (residual stream) width, ``h``."""
    heads: int
    """Attention (query) heads, ``a``."""
    vocab: int
    """Vocabulary size, ``V`` (as stored: padded sizes count)."""
    seq_len: int
    """Default training sequence length, ``s`` (tokens per sample); ``with_seq`` changes it."""
    ffn: int | None = None
    """MLP inner size ``f``; None means 4h (the GPT convention)."""
    kv_heads: int | None = None
    """Key/value heads: None or ``heads`` is MHA, 1 is MQA, between is GQA (Ainslie et al. 2023)."""
    head_dim: int | None = None
    """Width of one head; None means ``hidden // heads``."""
    activation: ActivationKind = ActivationKind.GELU
    norm: NormKind = NormKind.LAYERNORM
    position: PositionKind = PositionKind.LEARNED
    bias: BiasKind = BiasKind.ALL
    max_positions: int | None = None
    """Rows of a learned position table; None means ``seq_len``. Unused with rotary positions."""
    tied_embeddings: bool = True
    """The logits projection reuses the token-embedding matrix (no extra V·h parameters)."""
    dtype: DtypePolicy = DtypePolicy.BF16_MIXED
    dropout: float = 0.0
    """Dropout probability of the residual (attention-output, MLP-output), attention-probability and
    embedding dropouts; 0 means no dropout layers (and no masks kept for backward)."""
    source: str = ""
    """Where the shapes come from (paper table, released config)."""
    moe: MoESpec | None = None
    """Mixture-of-experts layers (:mod:`simulator.workload.moe`); None: every MLP is dense."""
    mla: MLASpec | None = None
    """Multi-head Latent Attention (:mod:`simulator.workload.mla`) in place of the Q/K/V and output
    projections; None: ordinary (MHA/GQA/MQA) attention."""

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("model.name", "must be a non-empty string")
        for field_name in ("layers", "hidden", "heads", "vocab", "seq_len"):
            positive_int(f"model.{field_name}", getattr(self, field_name))
        for field_name in ("ffn", "kv_heads", "head_dim", "max_positions"):
            if getattr(self, field_name) is not None:
                positive_int(f"model.{field_name}", getattr(self, field_name))
        if self.head_dim is None and self.hidden % self.heads:
            raise SpecError("model.heads", f"hidden {self.hidden} is not divisible by {self.heads} heads; "
                            "give head_dim explicitly")
        if self.heads % self.n_kv_heads:
            raise SpecError("model.kv_heads", f"{self.heads} query heads are not a multiple of "
                            f"{self.n_kv_heads} key/value heads")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) \
                or not 0 <= self.dropout < 1:
            raise SpecError("model.dropout", f"must be a probability in [0, 1), got {self.dropout!r}")
        if self.mla is not None and (not isinstance(self.mla, MLASpec) or self.bias is not BiasKind.NONE):
            raise SpecError("model.mla", f"must be an MLASpec on a model without biases, got {self.mla!r}")
        if self.moe is not None:
            if not isinstance(self.moe, MoESpec):
                raise SpecError("model.moe", f"must be a MoESpec, got {self.moe!r}")
            if any(i >= self.layers for i in self.moe.dense_layers):
                raise SpecError("model.moe.dense_layers", f"{self.moe.dense_layers} names a layer past the "
                                f"model's {self.layers}; use indices 0..{self.layers - 1}")
        for field_name, kind in (("activation", ActivationKind), ("norm", NormKind),
                                 ("position", PositionKind), ("bias", BiasKind), ("dtype", DtypePolicy)):
            if not isinstance(getattr(self, field_name), kind):
                raise SpecError(f"model.{field_name}", f"must be a {kind.__name__}, got "
                                f"{getattr(self, field_name)!r}")

    # --- derived shapes -------------------------------------------------------------------------
    @property
    def ffn_size(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        """Width of Q (and of the attention output): ``heads · head_dim``."""
        return self.heads * self.d_head

    @property
    def kv_dim(self) -> int:
        """Width of K and of V each: ``kv_heads · head_dim``."""
        return self.n_kv_heads * self.d_head

    @property
    def positions(self) -> int:
        return self.max_positions if self.max_positions is not None else self.seq_len

    def with_seq(self, seq_len: int) -> "TransformerSpec":
        """The same model trained at another sequence length (learned position table unchanged)."""
        positive_int("seq", seq_len)
        return replace(self, seq_len=seq_len, max_positions=self.positions)

    # --- parameters -----------------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Q, K, V and output projections of one block, with their biases (MLA: its projections and
        latent norms, :meth:`MLASpec.params`)."""
        if self.mla is not None:
            return self.mla.params(self.hidden, self.heads)
        h, q, kv = self.hidden, self.q_dim, self.kv_dim
        weights = h * q + 2 * h * kv + q * h
        biases = {BiasKind.NONE: 0, BiasKind.QKV: q + 2 * kv, BiasKind.ALL: q + 2 * kv + h}[self.bias]
        return weights + biases

    @property
    def mlp_params(self) -> int:
        h, f = self.hidden, self.ffn_size
        mats = 3 if self.activation is ActivationKind.SWIGLU else 2
        biases = (mats - 1) * f + h if self.bias is BiasKind.ALL else 0
        return mats * h * f + biases

    @property
    def norm_params(self) -> int:
        """Parameters of one norm layer: 2h for LayerNorm, h for RMSNorm."""
        return (2 if self.norm is NormKind.LAYERNORM else 1) * self.hidden

    @property
    def mlp_mats(self) -> int:
        """Weight matrices of one MLP (or expert): 3 for SwiGLU, 2 for GELU."""
        return 3 if self.activation is ActivationKind.SWIGLU else 2

    def is_moe_layer(self, layer: int) -> bool:
        """Whether block ``layer`` has routed experts instead of a dense MLP."""
        return self.moe is not None and self.moe.is_moe(layer)

    def block_params(self, layer: int, *, active: bool = False) -> int:
        """Block ``layer``: attention + MLP (dense, or MoE: :meth:`MoESpec.mlp_params`) + two norms;
        with ``active``, the parameters one token uses (top-k experts only)."""
        if not self.is_moe_layer(layer):
            return self.layer_params
        return (self.attention_params + self.moe.mlp_params(self.hidden, self.mlp_mats, active=active)
                + 2 * self.norm_params)

    @property
    def blocks_params(self) -> int:
        """All blocks: ``Σ_i block_params(i)`` (``l · layer_params`` without experts)."""
        if self.moe is None:
            return self.layers * self.layer_params
        return sum(self.block_params(i) for i in range(self.layers))

    @property
    def expert_params(self) -> int:
        """Routed-expert parameters of the whole model (what expert parallelism shards); 0 when dense."""
        if self.moe is None:
            return 0
        return self.moe.moe_layers(self.layers) * self.moe.experts * self.moe.expert_params(self.hidden,
                                                                                             self.mlp_mats)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: every block with only its top-k experts, embeddings and head
        (all parameters for a dense model)."""
        blocks = sum(self.block_params(i, active=True) for i in range(self.layers))
        return blocks + self.embedding_params + self.head_params

    @property
    def layer_params(self) -> int:
        """One dense transformer block: attention + MLP + its two norms (MoE blocks: :meth:`block_params`)."""
        return self.attention_params + self.mlp_params + 2 * self.norm_params

    @property
    def embedding_params(self) -> int:
        """Token embedding plus the learned position table (if any)."""
        pos = self.positions * self.hidden if self.position is PositionKind.LEARNED else 0
        return self.vocab * self.hidden + pos

    @property
    def head_params(self) -> int:
        """Final norm plus an untied output projection (V·h; 0 when tied)."""
        return self.norm_params + (0 if self.tied_embeddings else self.vocab * self.hidden)

    @property
    def params(self) -> int:
        """Total parameters: ``Σ blocks + embeddings + head`` (``l · layer + …`` for a dense model)."""
        return self.blocks_params + self.embedding_params + self.head_params

    @property
    def non_embedding_params(self) -> int:
        """Parameters outside the embedding and output matrices (Kaplan et al. 2020's N)."""
        return self.blocks_params + self.norm_params

    # --- the workload protocol (simulator.workload.protocol) -----------------------------------
    @property
    def layer_count(self) -> int:
        """Blocks a pipeline splits: ``layers``."""
        return self.layers

    @property
    def has_compute(self) -> bool:
        return True

    @property
    def has_activation_shapes(self) -> bool:
        return True

    def check_tp(self, tp: int) -> None:
        """Tensor parallelism splits whole heads: ``tp`` must divide the query and the key/value heads."""
        if tp == 1:
            return
        if self.heads % tp:
            raise SpecError("tp", f"{tp} does not divide {self.heads} attention heads; use {one_of(divisors(self.heads))}")
        if self.n_kv_heads % tp:
            raise SpecError("tp", f"{tp} does not divide {self.n_kv_heads} key/value heads; use "
                            f"{one_of(divisors(self.n_kv_heads))}")

    def check_ep(self, ep: int) -> None:
        """Expert parallelism splits whole experts: ``ep`` divides the routed experts (Megatron-Core
        asserts ``num_moe_experts % expert_model_parallel_size == 0`` [src: megatron-core]); 1 without experts."""
        if self.moe is None:
            no_experts(ep)
        elif self.moe.experts % ep:
            raise SpecError("ep", f"{ep} does not divide the {self.moe.experts} experts of {self.name}; use "
                            f"{one_of(divisors(self.moe.experts))}")

    def chunk_load(self, chunk: ChunkSlice, options: ComputeOptions) -> ChunkLoad:
        return transformer_chunk_load(self, chunk, options)

    def step_flops(self, tokens: int, recompute: Recompute, *, flash_attention: bool) -> tuple[float, float]:
        """(model, hardware) FLOPs of ``tokens`` tokens: ``model_flops_per_token × tokens`` (6N +
        attention, Chowdhery et al. 2022 App. B) and ``train_flops_per_token(recompute) × tokens``;
        selective recomputation with flash attention recomputes nothing
        (:func:`simulator.workload.chunks.recomputed`), so it counts as none."""
        if recompute is Recompute.SELECTIVE and flash_attention:
            recompute = Recompute.NONE
        return (model_flops_per_token(self, self.seq_len) * tokens,
                train_flops_per_token(self, recompute, self.seq_len) * tokens)

    def summary(self) -> dict:
        return summary.transformer_summary(self)

    def describe(self) -> str:
        return summary.describe_transformer(self)
