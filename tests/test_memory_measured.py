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
The simulator comparison (1% tolerance per the task brief; exact where it models the same thing) runs
once ``simulator.memory`` (branch ``memory``) is merged.
"""

from __future__ import annotations

import math

import pytest

from executor.memory_measure import MODES, measure_model_states, measure_modes
from executor.model import build_gpt
from simulator.errors import SpecError
from simulator.workload import DtypePolicy, TransformerSpec

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


# --- against the simulator (needs branch `memory` merged) ----------------------------------------------

def _simulator_rows(n: int, mode: str):
    memory = pytest.importorskip("simulator.memory", reason="simulator.memory not merged yet (branch memory)")
    zs, part = memory.ZeroStage, memory.Partitioning
    stage, partitioning = {"ddp": (zs.ZERO0, part.FLAT), "zero1": (zs.ZERO1, part.WHOLE_TENSOR),
                           "fsdp2-noreshard": (zs.ZERO2, part.DIM0_PADDED),
                           "fsdp2-reshard": (zs.ZERO3, part.DIM0_PADDED)}[mode]
    shapes = memory.transformer_param_shapes(SPEC)
    return [memory.model_state_bytes(shapes, dp=n, zero=stage, dtype=DtypePolicy.FP32,
                                     partitioning=partitioning, rank=r) for r in range(n)]


def _close(measured_bytes: int, model_bytes: int, rel: float = 0.01) -> bool:
    return abs(measured_bytes - model_bytes) <= rel * max(measured_bytes, 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 4])
def test_simulator_model_states_within_1_percent(measured, n, mode):
    sim = _simulator_rows(n, mode)
    for rank, (row, model) in enumerate(zip(measured[n][mode], sim)):
        params = row["params_bytes"]
        if mode == "fsdp2-noreshard":
            # ZeRO-2's full working copy of the parameters is FSDP2's unsharded copy, alive from
            # forward to backward; after the step only the shard is left (it is ZeRO-3's footprint).
            params = row["params_bytes_after_forward"] - row["params_bytes"]
        assert _close(params, model.params_bytes), (rank, "params", params, model.params_bytes)
        assert _close(row["grads_bytes"], model.grads_bytes), (rank, "grads", row, model)
        assert _close(row["optimizer_bytes"], model.optimizer_bytes), (rank, "optimizer", row, model)


_EXACT_GAPS = {
    ("fsdp2-reshard", 4): "simulator pads Adam state on every rank; torch's exp_avg/exp_avg_sq are zeros_like the "
                          "unpadded local shard (rank 3 holds 30 of 32 embedding rows: 1024 B less)",
    ("fsdp2-noreshard", 4): "as fsdp2-reshard, and the unsharded copy is the padded all-gather output "
                            "(N·ceil(d0/N) rows: 128 not 126), which ZeRO-2's full params do not pad",
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 4])
def test_simulator_model_states_exact(measured, n, mode, request):
    """Exact per-rank equality; the known gaps are strict xfails so that fixing the simulator shows."""
    if (mode, n) in _EXACT_GAPS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=_EXACT_GAPS[(mode, n)]))
    sim = _simulator_rows(n, mode)
    for row, model in zip(measured[n][mode], sim):
        params = row["params_bytes"]
        if mode == "fsdp2-noreshard":
            params = row["params_bytes_after_forward"] - row["params_bytes"]
        assert (params, row["grads_bytes"], row["optimizer_bytes"]) == (
            model.params_bytes, model.grads_bytes, model.optimizer_bytes)


@pytest.mark.xfail(strict=True, reason="simulator's ZeRO-2 params omit the persistent fp32 shard FSDP2 keeps "
                                       "next to the unsharded copy (peak = (1 + 1/N)·4P, not 4P)")
def test_simulator_zero2_peak_params_include_the_persistent_shard(measured):
    sim = _simulator_rows(2, "fsdp2-noreshard")
    assert [r["params_bytes_after_forward"] for r in measured[2]["fsdp2-noreshard"]] == [m.params_bytes for m in sim]


@pytest.mark.parametrize("mode", ["ddp", "zero1"])
def test_simulator_ddp_bucket_copy_default(measured, mode):
    memory = pytest.importorskip("simulator.memory", reason="simulator.memory not merged yet (branch memory)")
    zero = memory.ZeroStage.ZERO0 if mode == "ddp" else memory.ZeroStage.ZERO1
    sim = memory.buffer_bytes(local_params=P, largest_block=SPEC.layer_params, zero=zero, dtype=DtypePolicy.FP32)
    # gradient_as_bucket_view=False (2-rank launch). For zero1 the simulator's DeepSpeed reduce bucket
    # min(5e8, P) elements equals P only because this model is small; torch's DDP under ZeRO-1 always holds P.
    assert all(r["grad_buckets_bytes"] == sim.grad_buckets_bytes for r in measured[2][mode])


@pytest.mark.xfail(strict=True, reason="simulator has no gradient_as_bucket_view=True option (buckets = grads, 0 extra)")
def test_simulator_ddp_bucket_view_has_no_copy(measured):
    memory = pytest.importorskip("simulator.memory")
    sim = memory.buffer_bytes(local_params=P, largest_block=SPEC.layer_params, zero=memory.ZeroStage.ZERO0,
                              dtype=DtypePolicy.FP32)
    assert all(r["grad_buckets_bytes"] == sim.grad_buckets_bytes for r in measured[4]["ddp"])


# --- activations of one block (single process) ------------------------------------------------------

@pytest.mark.parametrize("seq", [16, 64])
def test_block_saved_bytes_gelu_sdpa_fp32_formula(seq):
    from executor.memory_measure import block_saved_bytes
    b, h, a = 2, SPEC.hidden, SPEC.heads
    got = block_saved_bytes(SPEC, batch=b, seq=seq)["saved_bytes"]
    # fp32, no dropout, SDPA (no s×s scores): 16 sbh elements (block input, norm2 input, two norm outputs,
    # Q/K/V, attention output, GELU input 4h, GELU output 4h) + SDPA's logsumexp (a·s·b) + LayerNorm
    # mean and rstd (2·2·s·b), all 4 bytes. Korthikanti's 34sbh is the same 16 tensors at 2 bytes + 2 masks.
    assert got == 4 * seq * b * (16 * h + a + 4)
