"""Model-state bytes torch really holds (gloo, 2 and 4 ranks, fp32) against hand formulas and the simulator.

Two launches (module fixture, ~5 s and ~12 s on 2 cores): 2 ranks with DDP's default
``gradient_as_bucket_view=False``, 4 ranks with ``True``; each runs all four modes. The tiny GPT has
vocab 126, so with 4 ranks the embedding (126 rows) is an uneven FSDP2 shard (ceil(126/4) = 32 rows,
rank 3 holds 30) and the padding shows.

Oracles here are written from torch's documented/observed behaviour (docs/memory_measured.md):
- FSDP2 ``fully_shard``: params and grads are stored as ceil(d0/N)·rest elements on every rank (padded);
  Adam's exp_avg/exp_avg_sq are ``zeros_like`` of the *unpadded* local shard (rank r holds
  clamp(d0 − r·ceil(d0/N), 0, ceil(d0/N)) rows).
- ``ZeroRedundancyOptimizer._partition_parameters``: parameters sorted by numel, largest first (stable),
  each to the rank with the fewest elements so far (lowest rank on ties).
- Adam ``step`` counters: one 0-d fp32 tensor (4 bytes) per parameter tensor with state.
The simulator comparison is exact per rank and field (the 1 % bound of the issue is checked too), and
the simulator's per-block activation bytes are compared with saved-tensor bytes of a GPT and a Llama block.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from executor.memory_measure import MODES, measure_model_states, measure_modes
from executor.model import build_gpt
from simulator.errors import SpecError
from simulator.workload import (ActivationKind, BiasKind, DtypePolicy, NormKind, PositionKind,
                                TransformerSpec)

pytestmark = pytest.mark.multiproc

SPEC = TransformerSpec(name="gpt-tiny-v126", layers=2, hidden=64, heads=4, vocab=126, seq_len=16)
SHAPES = [tuple(p.shape) for p in build_gpt(SPEC).parameters()]
P = SPEC.params
T = len(SHAPES)
F32 = 4
BUCKET_VIEW = {2: False, 4: True}
"""DDP gradient_as_bucket_view per world size: both settings are covered by the two launches."""


class _Launches(dict):
    """{world size: {mode: per-rank rows}}, launched on first use so no single test waits for both."""

    def __missing__(self, n: int) -> dict[str, list[dict]]:
        self[n] = measure_modes(SPEC, nproc=n, gradient_as_bucket_view=BUCKET_VIEW[n])
        return self[n]


@pytest.fixture(scope="module")
def measured() -> _Launches:
    return _Launches()


def _rest(shape) -> int:
    return math.prod(shape[1:])


def _padded_shard_numel(n: int) -> int:
    return sum(math.ceil(s[0] / n) * _rest(s) for s in SHAPES)


def _real_shard_numel(n: int, rank: int) -> int:
    total = 0
    for s in SHAPES:
        rows = math.ceil(s[0] / n)
        total += min(rows, max(0, s[0] - rank * rows)) * _rest(s)
    return total


def _greedy_whole_tensor(n: int) -> list[list[int]]:
    """Numels per rank, as ZeroRedundancyOptimizer assigns them."""
    sizes, owned = [0] * n, [[] for _ in range(n)]
    for numel in sorted((math.prod(s) for s in SHAPES), reverse=True):
        r = sizes.index(min(sizes))
        owned[r].append(numel)
        sizes[r] += numel
    return owned


@pytest.mark.parametrize("n", [2, 4])
def test_ddp_every_rank_holds_everything(measured, n):
    for row in measured[n]["ddp"]:
        assert (row["params_bytes"], row["grads_bytes"], row["optimizer_bytes"]) == (4 * P, 4 * P, 8 * P)
        assert row["optimizer_step_bytes"] == 4 * T
        # gradient_as_bucket_view=False: the buckets are a second full copy of the grads; True: grads are views.
        assert row["grad_buckets_bytes"] == (0 if BUCKET_VIEW[n] else 4 * P)


@pytest.mark.parametrize("n", [2, 4])
def test_zero1_optimizer_state_follows_greedy_whole_tensors(measured, n):
    owned = _greedy_whole_tensor(n)
    rows = measured[n]["zero1"]
    for rank, row in enumerate(rows):
        assert row["params_bytes"] == 4 * P and row["grads_bytes"] == 4 * P
        assert row["optimizer_bytes"] == 8 * sum(owned[rank])
        assert row["optimizer_state_tensors"] == len(owned[rank])
        assert row["optimizer_step_bytes"] == 4 * len(owned[rank])
        assert row["grad_buckets_bytes"] == (0 if BUCKET_VIEW[n] else 4 * P)
    assert sum(r["optimizer_state_tensors"] for r in rows) == T


@pytest.mark.parametrize("mode", ["fsdp2-noreshard", "fsdp2-reshard"])
@pytest.mark.parametrize("n", [2, 4])
def test_fsdp2_after_step_params_grads_padded_adam_state_not(measured, n, mode):
    for rank, row in enumerate(measured[n][mode]):
        assert row["params_bytes"] == F32 * _padded_shard_numel(n)
        assert row["grads_bytes"] == F32 * _padded_shard_numel(n)
        assert row["optimizer_bytes"] == 2 * F32 * _real_shard_numel(n, rank)
        assert row["optimizer_step_bytes"] == 4 * T
        assert row["grad_buckets_bytes"] == 0


def test_uneven_shard_shows_padding_on_last_rank(measured):
    # 126 rows over 4 ranks: rank 3 holds 30 real rows of 32 → its Adam state is 2·64·8 bytes smaller.
    rows = measured[4]["fsdp2-reshard"]
    assert rows[0]["optimizer_bytes"] - rows[3]["optimizer_bytes"] == 2 * 64 * 8
    assert rows[3]["params_bytes"] == rows[0]["params_bytes"]


@pytest.mark.parametrize("n", [2, 4])
def test_fsdp2_after_forward_noreshard_keeps_full_unsharded_copy(measured, n):
    for row in measured[n]["fsdp2-noreshard"]:
        # the persistent padded shard plus the all-gathered (N × padded shard) unsharded storage
        assert row["params_bytes_after_forward"] == F32 * (1 + n) * _padded_shard_numel(n)
    for row in measured[n]["fsdp2-reshard"]:
        assert row["params_bytes_after_forward"] == F32 * _padded_shard_numel(n)


def test_bad_mode_is_a_spec_error():
    with pytest.raises(SpecError, match="known: ddp, zero1"):
        measure_model_states(SPEC, nproc=2, mode="zero2")
    with pytest.raises(SpecError, match="seq"):
        measure_model_states(SPEC, nproc=2, mode="ddp", seq=SPEC.positions + 1)


# --- against the simulator: exact, per rank ------------------------------------------------------------

def _framework(mode: str):
    from simulator.memory import Framework, ZeroStage
    return {"ddp": (ZeroStage.ZERO0, Framework.TORCH_DDP), "zero1": (ZeroStage.ZERO1, Framework.TORCH_DDP),
            "fsdp2-noreshard": (ZeroStage.ZERO2, Framework.FSDP2),
            "fsdp2-reshard": (ZeroStage.ZERO3, Framework.FSDP2)}[mode]


def _simulator_rows(n: int, mode: str):
    from simulator.memory import model_state_bytes, transformer_param_shapes
    zero, framework = _framework(mode)
    shapes = transformer_param_shapes(SPEC)
    return [model_state_bytes(shapes, dp=n, zero=zero, dtype=DtypePolicy.FP32, framework=framework, rank=r)
            for r in range(n)]


def _measured_fields(row: dict) -> dict:
    """The measurement in ModelStateBytes' terms: peak params are those alive between forward and
    backward (FSDP2 ZeRO-2: shard + unsharded copy), params after the step are what is left."""
    return {"params": row["params_bytes_after_forward"], "params_after_step": row["params_bytes"],
            "grads": row["grads_bytes"], "optimizer": row["optimizer_bytes"], "step": row["optimizer_step_bytes"]}


def _model_fields(m) -> dict:
    return {"params": m.params_bytes, "params_after_step": m.params_at_rest_bytes, "grads": m.grads_bytes,
            "optimizer": m.optimizer_bytes, "step": m.optimizer_step_bytes}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 4])
def test_simulator_model_states_exact(measured, n, mode):
    """Every field, every rank, byte for byte: FSDP2's padded params/grads and unpadded Adam state,
    its ZeRO-2 peak (padded unsharded copy + shard), ZeroRedundancyOptimizer's greedy split, and
    torch Adam's 4-byte step tensors."""
    for rank, (row, model) in enumerate(zip(measured[n][mode], _simulator_rows(n, mode))):
        assert _measured_fields(row) == _model_fields(model), (n, mode, rank)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 4])
def test_simulator_model_state_totals_within_1_percent(measured, n, mode):
    """The issue's acceptance bound: peak model-state totals within 1 % (they are exact, above)."""
    for row, model in zip(measured[n][mode], _simulator_rows(n, mode)):
        got = sum(_measured_fields(row)[k] for k in ("params", "grads", "optimizer", "step"))
        assert abs(got - model.total_bytes) <= 0.01 * got


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 4])
def test_simulator_grad_buckets_follow_the_framework(measured, n, mode):
    """DDP (and ZeroRedundancyOptimizer under DDP): a full gradient copy with gradient_as_bucket_view=False
    (2-rank launch), none with True (4-rank launch); FSDP2: none."""
    from simulator.memory import buffer_bytes
    zero, framework = _framework(mode)
    view = BUCKET_VIEW[n] and mode in ("ddp", "zero1")
    sim = buffer_bytes(local_params=P, largest_block=SPEC.layer_params, zero=zero, dtype=DtypePolicy.FP32,
                       framework=framework, gradient_as_bucket_view=view)
    assert [r["grad_buckets_bytes"] for r in measured[n][mode]] == [sim.grad_buckets_bytes] * n


# --- activations of one block (single process) ------------------------------------------------------

LLAMA = TransformerSpec(name="llama-tiny", layers=2, hidden=64, heads=4, kv_heads=2, ffn=172, vocab=126,
                        seq_len=16, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                        position=PositionKind.ROTARY, bias=BiasKind.NONE, tied_embeddings=False,
                        dtype=DtypePolicy.FP32)
GPT = replace(SPEC, dtype=DtypePolicy.FP32)


def _model_block_bytes(spec: TransformerSpec, seq: int, b: int = 2) -> float:
    from simulator.memory import layer_activation
    return layer_activation(spec, seq=seq, mbs=b, flash_attention=True).full_bytes


def _cpu_only_extras(spec: TransformerSpec, seq: int, b: int = 2) -> int:
    """What torch 2.13 on CPU saves beyond the GPU-kernel count of simulator.memory (4-byte fp32):
    - RMSNorm: off CUDA/MPS/XPU ``_fused_rms_norm`` is composite (native_functions.yaml), which also
      saves the normalised x·rstd: h per token per norm (CUDA's fused kernel saves input and rstd);
    - SDPA on CPU writes its output in q's layout; rotary makes q contiguous (b, a, s, d), so the
      output projection's reshape copies it: q per token (CUDA flash writes (b, s, a, d): a view);
    - the rotary cos/sin tables, s·d/2 each: O(s·d), not modelled (most codes share them across blocks).
    """
    if spec.norm is not NormKind.RMSNORM:
        return 0
    return 4 * (seq * b * (2 * spec.hidden + spec.q_dim) + seq * spec.d_head)


@pytest.mark.parametrize("seq", [16, 64])
def test_block_saved_bytes_gelu_sdpa_fp32_formula(seq):
    from executor.memory_measure import block_saved_bytes
    b, h, a = 2, SPEC.hidden, SPEC.heads
    got = block_saved_bytes(SPEC, batch=b, seq=seq)["saved_bytes"]
    # fp32, no dropout, SDPA (no s×s scores): 16 sbh elements (block input, norm2 input, two norm outputs,
    # Q/K/V, attention output, GELU input 4h, GELU output 4h) + SDPA's logsumexp (a·s·b) + LayerNorm
    # mean and rstd (2·2·s·b), all 4 bytes. Korthikanti's 34sbh is the same 16 tensors at 2 bytes + 2 masks.
    assert got == 4 * seq * b * (16 * h + a + 4)


@pytest.mark.parametrize("seq", [16, 64])
def test_simulator_block_activations_gpt_exact(seq):
    """GPT block (GELU, LayerNorm, learned positions, no dropout), flash: the model equals the measurement."""
    from executor.memory_measure import block_saved_bytes
    assert _model_block_bytes(GPT, seq) == block_saved_bytes(GPT, batch=2, seq=seq)["saved_bytes"]


@pytest.mark.parametrize("seq", [16, 64])
def test_simulator_block_activations_llama(seq):
    """Llama block (SwiGLU 4f, rotary q + kv, RMSNorm, GQA), flash: measured = model + the named CPU-only
    extras, exactly; the model alone is 13.9 % under the CPU measurement (tolerance stated: 15 %)."""
    from executor.memory_measure import block_saved_bytes
    got = block_saved_bytes(LLAMA, batch=2, seq=seq)["saved_bytes"]
    model = _model_block_bytes(LLAMA, seq)
    assert got == model + _cpu_only_extras(LLAMA, seq)
    assert abs(got - model) / got < 0.15
