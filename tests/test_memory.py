"""Formula tests of the memory model against published and hand-worked numbers (sources in each test)."""

import math
from dataclasses import replace

import pytest

from simulator.bucket_defaults import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.memory import (Offload, Partitioning, ScheduleKind, ZeroStage, in_flight, layer_activation,
                              model_state_bytes, partition_numels, stage_layers, stage_param_shapes,
                              transformer_param_shapes, whole_tensor_assignment)
from simulator.strategy import Strategy
from memory_layouts import layout_of, report_of
from simulator.memory.runtime import CUDA_CONTEXT_BYTES, NCCL_CHANNELS, NCCL_CONNECTION_BYTES
from simulator.memory.offload import HOST_BUFFER_FACTOR
from simulator.memory.shapes import numel
from simulator.workload import DtypePolicy, ParamCountModel, Recompute, get_preset, model_names

MIXED = DtypePolicy.BF16_MIXED
GB = 1e9


# --- model states: ZeRO paper ---------------------------------------------------------------------------
@pytest.mark.parametrize("zero, expected_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_7_5b_on_64_gpus(zero, expected_gb):
    """Rajbhandari et al. SC'20, Figure 1: Psi = 7.5B, Nd = 64, K = 12 -> 120 / 31.4 / 16.6 / 1.9 GB
    (the paper rounds to 0.1 GB; tolerance 0.05 GB)."""
    m = model_state_bytes([("w", (7_500_000_000,))], dp=64, zero=ZeroStage(zero), dtype=MIXED)
    assert m.total_bytes / GB == pytest.approx(expected_gb, abs=0.05)


def test_zero_partitioned_forms_exact():
    """2Psi + 2Psi + K Psi/Nd, 2Psi + (2 + K)Psi/Nd, (2 + 2 + K)Psi/Nd with Psi = 1e6, Nd = 4 (exact). (A
    tensor of fewer than 1e5 elements would stay whole under DeepSpeed's ZeRO-3: tests/test_ds_zero3.py.)"""
    shapes = [("w", (1000, 1000))]
    z1 = model_state_bytes(shapes, dp=4, zero=ZeroStage.ZERO1, dtype=MIXED)
    z2 = model_state_bytes(shapes, dp=4, zero=ZeroStage.ZERO2, dtype=MIXED)
    z3 = model_state_bytes(shapes, dp=4, zero=ZeroStage.ZERO3, dtype=MIXED)
    assert (z1.params_bytes, z1.grads_bytes, z1.optimizer_bytes) == (2_000_000, 2_000_000, 3_000_000)
    assert (z2.params_bytes, z2.grads_bytes, z2.optimizer_bytes) == (2_000_000, 500_000, 3_000_000)
    assert (z3.params_bytes, z3.grads_bytes, z3.optimizer_bytes) == (500_000, 500_000, 3_000_000)


def test_fp32_adam_is_4_4_8():
    """Pure fp32 Adam: 4 (weights, their own master) + 4 (grads) + 8 (m, v) bytes per parameter."""
    m = model_state_bytes([("w", (100,))], dp=1, zero=ZeroStage.ZERO0, dtype=DtypePolicy.FP32)
    assert (m.params_bytes, m.grads_bytes, m.optimizer_bytes) == (400, 400, 800)


# --- partitionings --------------------------------------------------------------------------------------
def test_whole_tensor_greedy_hand_worked():
    """torch ZeroRedundancyOptimizer: sort largest first, give each to the emptiest rank (lowest on ties).
    [10, 7, 5, 3, 3] on 2 ranks: 10->r0, 7->r1, 5->r1 (7<10), 3->r0 (10<12), 3->r1 (12<13): [13, 15]."""
    assert whole_tensor_assignment([10, 7, 5, 3, 3], 2) == [0, 1, 1, 0, 1]
    assert partition_numels([(10,), (7,), (5,), (3,), (3,)], 2, Partitioning.WHOLE_TENSOR) == [13, 15]
    m = model_state_bytes([("a", (10,)), ("b", (7,)), ("c", (5,)), ("d", (3,)), ("e", (3,))], dp=2,
                          zero=ZeroStage.ZERO1, dtype=DtypePolicy.FP32, partitioning=Partitioning.WHOLE_TENSOR)
    assert m.optimizer_bytes == 15 * 8  # most loaded rank
    r0 = model_state_bytes([("a", (10,)), ("b", (7,)), ("c", (5,)), ("d", (3,)), ("e", (3,))], dp=2,
                           zero=ZeroStage.ZERO1, dtype=DtypePolicy.FP32, partitioning=Partitioning.WHOLE_TENSOR,
                           rank=0)
    assert r0.optimizer_bytes == 13 * 8 and r0.params_bytes == 28 * 4


def test_whole_tensor_ties_keep_order():
    """Equal sizes keep their order (Python's sort is stable): [4, 4, 4] on 2 ranks -> r0, r1, r0."""
    assert whole_tensor_assignment([4, 4, 4], 2) == [0, 1, 0]


def test_dim0_padded_matches_torch_chunk():
    """FSDP2 shards dim 0 with torch.chunk and pads every shard to chunk 0's size."""
    torch = pytest.importorskip("torch")
    shapes = [(10, 4), (3,), (7, 2, 2), (1, 5)]
    for dp in (2, 3, 4):
        expected = sum(torch.chunk(torch.empty(s), dp, dim=0)[0].numel() for s in shapes)
        assert partition_numels(shapes, dp, Partitioning.DIM0_PADDED) == [expected] * dp


def test_flat_pads_to_multiple_of_dp():
    assert partition_numels([(10,), (3,)], 4, Partitioning.FLAT) == [4, 4, 4, 4]


def test_rank_out_of_range():
    with pytest.raises(SpecError, match="rank"):
        model_state_bytes([("w", (8,))], dp=2, zero=ZeroStage.ZERO1, dtype=MIXED, rank=2)


# --- shapes ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", model_names())
def test_param_shapes_sum_to_params(name):
    spec = get_preset(name)
    assert sum(numel(s) for _, s in transformer_param_shapes(spec)) == spec.params


def test_param_shape_names_and_order_gpt():
    spec = get_preset("gpt3-125m")
    names = [n for n, _ in transformer_param_shapes(spec)]
    assert names[:4] == ["embed.tok.weight", "embed.pos.weight", "layers.0.norm1.weight", "layers.0.norm1.bias"]
    assert names[4:12] == ["layers.0.attn.qkv.weight", "layers.0.attn.qkv.bias", "layers.0.attn.out.weight",
                           "layers.0.attn.out.bias", "layers.0.norm2.weight", "layers.0.norm2.bias",
                           "layers.0.mlp.up.weight", "layers.0.mlp.up.bias"]
    assert names[-3:] == ["layers.11.mlp.down.bias", "norm_f.weight", "norm_f.bias"]  # tied: no head


def test_param_shapes_llama_swiglu_gqa():
    spec = get_preset("llama2-70b")  # h 8192, 64 heads, 8 kv heads, ffn 28672, untied
    shapes = dict(transformer_param_shapes(spec))
    assert shapes["layers.0.attn.qkv.weight"] == (8192 + 2 * 1024, 8192)
    assert shapes["layers.0.mlp.up.weight"] == (2 * 28672, 8192)
    assert shapes["head.weight"] == (32000, 8192)
    assert "layers.0.attn.qkv.bias" not in shapes


def test_tp_shards_sum_to_layer():
    """Megatron splits: t shards of every split matrix add up to the whole; norms replicated."""
    spec = get_preset("llama2-7b")
    full = dict(transformer_param_shapes(spec))
    shard = dict(transformer_param_shapes(spec, tp=4))
    for name in ("layers.0.attn.qkv.weight", "layers.0.attn.out.weight", "layers.0.mlp.up.weight",
                 "layers.0.mlp.down.weight", "embed.tok.weight", "head.weight"):
        assert 4 * numel(shard[name]) == numel(full[name])
    assert shard["layers.0.norm1.weight"] == full["layers.0.norm1.weight"]


def test_tp_must_divide_heads():
    with pytest.raises(SpecError, match="tp"):
        transformer_param_shapes(get_preset("gpt3-125m"), tp=5)


def test_stage_layers_uneven_and_too_many():
    assert [len(r) for r in stage_layers(32, 3)] == [10, 11, 11]
    assert [len(r) for r in stage_layers(32, 4)] == [8, 8, 8, 8]
    with pytest.raises(SpecError, match="pp"):
        stage_layers(12, 13)


def test_stages_hold_embedding_and_head():
    spec = get_preset("gpt3-125m")  # tied: the last stage keeps its own copy of the embedding as head
    first = dict(stage_param_shapes(spec, pp=2, stage=0))
    last = dict(stage_param_shapes(spec, pp=2, stage=1))
    assert "embed.tok.weight" in first and "head.weight" not in first
    assert last["head.weight"] == (50257, 768) and "embed.tok.weight" not in last
    total = sum(numel(s) for s in first.values()) + sum(numel(s) for s in last.values())
    assert total == spec.params + spec.vocab * spec.hidden


# --- activations: Korthikanti et al. 2022, Table 2 ------------------------------------------------------
S, H, A = 2048, 12288, 96  # GPT-3 175B at s = 2048, b = 1
SBH = S * H


@pytest.mark.parametrize("tp, sp, recompute, per_sbh", [
    (1, False, Recompute.NONE, 34 + 5 * A * S / H),                  # sbh(34 + 5as/h) = 114 sbh
    (8, False, Recompute.NONE, 10 + 24 / 8 + 5 * A * S / (H * 8)),  # tensor parallel
    (8, True, Recompute.NONE, (34 + 5 * A * S / H) / 8),             # tensor + sequence parallel
    (8, False, Recompute.SELECTIVE, 10 + 24 / 8),                    # tp + selective
    (8, True, Recompute.SELECTIVE, 34 / 8),                          # tp + sp + selective
    (1, False, Recompute.FULL, 2),                                   # full recompute: the layer input
])
def test_korthikanti_table2(tp, sp, recompute, per_sbh):
    """Per-layer activation bytes of Korthikanti et al. 2022 Table 2, for GPT-3 175B shapes (dropout 0.1,
    eager attention), exact. Korthikanti counts O(sbh) and O(as²b) terms only: the fp32 LayerNorm
    mean/rstd (2 norms x 2 x 4 B per token, /t with sp) are left out here and checked on their own."""
    layer = layer_activation(get_preset("gpt3-175b"), seq=S, mbs=1, tp=tp, sp=sp, flash_attention=False)
    stats = 0 if recompute is Recompute.FULL else layer.stats_bytes
    assert layer.kept_bytes(recompute) - stats == pytest.approx(per_sbh * SBH, rel=1e-12)
    assert layer.stats_bytes == S * 16 / (tp if sp else 1)


def test_korthikanti_hand_worked_175b_layer():
    """114 sbh = 114 x 2048 x 12288 = 2,868,903,936 bytes (2.87 GB) per layer, per sequence (eager)."""
    layer = layer_activation(get_preset("gpt3-175b"), seq=S, mbs=1, flash_attention=False)
    assert layer.full_bytes - layer.stats_bytes == 2_868_903_936


def test_flash_attention_keeps_no_scores_but_a_logsumexp():
    """FlashAttention/SDPA saves q, k, v, output and an fp32 log-sum-exp per row and head
    (derivatives.yaml, _scaled_dot_product_flash_attention): GPT-3 175B (dropout on) keeps
    34 sbh + 4·a·s·b + 16·s·b bytes — the 5as/h term is gone (Korthikanti's selective count + stats)."""
    layer = layer_activation(get_preset("gpt3-175b"), seq=S, mbs=1)
    assert layer.scores_bytes == 0
    assert layer.full_bytes == 34 * SBH + 4 * A * S + 16 * S


def test_dropout_off_drops_the_masks():
    """Without dropout the two residual masks (2sbh bytes) go, and eager attention keeps only the
    softmax output (e·as²b, no mask, no dropout output): GPT-3 175B at 16 bit, 32 sbh + 2as²b."""
    spec = replace(get_preset("gpt3-175b"), dropout=0.0)
    layer = layer_activation(spec, seq=S, mbs=1, flash_attention=False)
    assert layer.full_bytes - layer.stats_bytes == 32 * SBH + 2 * A * S * S


def test_llama_block_swiglu_rotary_rmsnorm_by_hand():
    """llama2-7b (h = q = kv = 4096, f = 11008, 32 heads, bf16, no dropout), s = 4096, b = 1, flash:
    per token 4h (norm inputs and outputs) + (q + 2kv) + (q + kv) rotated + q (attention output) + 4f
    (SwiGLU) elements at 2 B, + fp32 stats: 2 RMSNorm rstd + 32 log-sum-exp."""
    spec = get_preset("llama2-7b")
    s, h, f = 4096, 4096, 11008
    layer = layer_activation(spec, seq=s, mbs=1)
    assert layer.full_bytes == s * ((4 * h + 3 * h + 2 * h + h + 4 * f) * 2 + (2 + 32) * 4)


def test_in_flight_per_schedule():
    """GPipe: m; 1F1B: min(p - k, m) (Narayanan et al. 2021); interleaved first stage:
    p(1 + (p - 1)/(p v)) (Korthikanti et al. 2022 section 4.2.3)."""
    spec, base = get_preset("gpt3-125m"), dict(pp=4, microbatches=8)
    assert in_flight(layout_of(spec, **base, schedule=ScheduleKind.GPIPE), 3)[0] == 8
    assert [in_flight(layout_of(spec, **base), k)[0] for k in range(4)] == [4, 3, 2, 1]
    assert in_flight(layout_of(spec, pp=4, microbatches=2), 0)[0] == 2
    inter = layout_of(spec, **base, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2)
    assert in_flight(inter, 0)[0] == pytest.approx(4 * (1 + 3 / (4 * 2)))
    # one chunk per rank is 1F1B (Megatron-LM runs the non-interleaved schedule then): p - k, not up to 2p
    one = layout_of(spec, **base, schedule=ScheduleKind.INTERLEAVED, virtual_stages=1)
    assert [in_flight(one, k)[0] for k in range(4)] == [4, 3, 2, 1]


# --- whole report ---------------------------------------------------------------------------------------
def _a100(nodes=1):
    return load_cluster("dgx-a100", nodes=nodes)


def test_report_llama2_7b_zero3():
    """llama2-7b (6,738,415,616 params) on 8 GPUs, ZeRO-3: each rank holds Psi/8 of 2 + 2 + 12 bytes, and
    DeepSpeed keeps its tensors under 1e5 elements whole (65 RMSNorm weights of 4096: 2 per block and the final)."""
    spec = get_preset("llama2-7b")
    r = report_of(spec, dp=8, zero=ZeroStage.ZERO3, seq=4096,
                                                    recompute=Recompute.SELECTIVE)
    part = math.ceil(spec.params / 8)
    w = r.worst
    assert (w.params_bytes, w.grads_bytes, w.optimizer_bytes) == (2 * part + 2 * 65 * 4096, 2 * part, 12 * part)
    # the strategy's bucket (25 MiB, no profile): DeepSpeed ZeRO-3 keeps one flat reduce buffer of it
    assert w.buffers.grad_buckets_bytes == 25 * 1024**2
    # one dp communicator (a ring predecessor) x NCCL_CHANNELS x the three protocols' buffers
    assert w.runtime.nccl_buffers_bytes == NCCL_CHANNELS * NCCL_CONNECTION_BYTES
    assert w.runtime.cuda_context_bytes == CUDA_CONTEXT_BYTES
    assert w.allocated_bytes < w.reserved_bytes < w.total_bytes
    assert r.fits and 30 * GB < w.total_bytes < 60 * GB


def test_report_eager_attention_adds_the_scores_and_says_so():
    """Eager attention without dropout keeps the softmax output, 2·a·s²·b bytes per block (bf16):
    32 blocks x 2 x 32 x 4096² = 34.4 GB more than flash, minus flash's fp32 log-sum-exp (4·a·s·b)."""
    flash = dict(dp=8, zero=ZeroStage.ZERO3, seq=4096)
    spec = get_preset("llama2-7b")
    r_flash = report_of(spec, **flash)
    r_eager = report_of(spec, **flash, flash_attention=False)
    extra = r_eager.worst.activations.blocks_bytes - r_flash.worst.activations.blocks_bytes
    assert extra == 32 * (2 * 32 * 4096**2 - 4 * 32 * 4096)
    assert any("attention scores" in n for n in r_eager.notes)
    r_big = report_of(spec, **flash, flash_attention=False, mbs=2)
    assert not r_big.fits and r_big.reasons[0].startswith("GPU")


def test_report_flash_without_recompute_fits():
    """With FlashAttention (the default) llama2-7b at s = 4096, mbs 1, ZeRO-3 on 8 A100-80GB fits
    without recomputation: 32 blocks x ~0.7 GB of saved activations."""
    r = report_of(get_preset("llama2-7b"), dp=8, zero=ZeroStage.ZERO3, seq=4096)
    assert r.fits and not r.notes and r.worst.activations.scores_bytes == 0


def test_pipeline_first_stage_most_loaded_under_1f1b():
    spec = get_preset("llama2-13b")
    r = report_of(spec, pp=4, microbatches=8, seq=4096, recompute=Recompute.SELECTIVE,
                                                    zero=ZeroStage.ZERO1, dp=2)
    acts = [st.activations.blocks_bytes for st in r.stages]
    assert acts == sorted(acts, reverse=True) and acts[0] == pytest.approx(4 * acts[3])
    assert r.worst.stage == 0


def test_optimizer_offload_zero2():
    """ZeRO-Offload with ZeRO-2: GPU keeps 2 Psi parameters; the host 12 + 4 (fp32 grads) bytes per
    partition element (Ren et al. ATC'21)."""
    psi = 8_000_000_000
    r = report_of(ParamCountModel(params=psi), dp=8, zero=ZeroStage.ZERO2, offload=Offload.OPTIMIZER)
    w = r.worst
    assert (w.params_bytes, w.grads_bytes, w.optimizer_bytes) == (2 * psi, 0, 0)
    assert w.host_bytes == 16 * psi / 8
    assert r.host_node_bytes == 8 * 16 * psi / 8 * HOST_BUFFER_FACTOR


def test_params_offload_is_18_bytes_per_partition_element():
    """ZeRO-3 offload of parameters and optimizer: 2 + 4 + 12 host bytes per element of the rank's
    partition (DeepSpeed estimate_zero3_model_states_mem_needs: 18 x params)."""
    psi = 8_000_000_000
    r = report_of(ParamCountModel(params=psi), dp=8, zero=ZeroStage.ZERO3, offload=Offload.PARAMS)
    assert r.worst.params_bytes == 0 and r.worst.host_bytes == 18 * psi / 8


def test_host_overflow_does_not_fit():
    """175B with ZeRO-3 parameter offload on one DGX A100: 18 x 175e9 x 1.5 = 4.7 TB > 2 TB of host RAM."""
    r = report_of(ParamCountModel(params=175_000_000_000), dp=8, zero=ZeroStage.ZERO3, offload=Offload.PARAMS)
    assert not r.fits and any(reason.startswith("host") for reason in r.reasons)


def test_nvme_offload_uses_nvme_and_checks_capacity():
    psi = 175_000_000_000
    cluster = _a100()
    s = dict(dp=8, zero=ZeroStage.ZERO3, offload=Offload.NVME)
    r = report_of(ParamCountModel(params=psi), cluster, **s)
    assert r.worst.nvme_bytes == 14 * psi / 8 and r.nvme_node_bytes == 14 * psi
    no_nvme = replace(cluster, node=replace(cluster.node, host=replace(cluster.node.host, nvme_bytes=0)))
    r2 = report_of(ParamCountModel(params=psi), no_nvme, **s)
    assert not r2.fits and any(reason.startswith("NVMe") for reason in r2.reasons)


def test_offload_without_host_section_names_host():
    base = load_cluster("localhost-cpu")  # every preset has a host section now: take it away
    cluster = replace(base, node=replace(base.node, host=None))
    with pytest.raises(SpecError) as err:
        report_of(ParamCountModel(params=10**9), cluster, dp=1, zero=ZeroStage.ZERO1, offload=Offload.OPTIMIZER)
    assert err.value.field == "host"


def test_activation_checkpoints_offloaded_to_host():
    spec = get_preset("gpt3-1.3b")
    on = report_of(spec, dp=8, recompute=Recompute.FULL, offload_activations=True)
    off = report_of(spec, dp=8, recompute=Recompute.FULL)
    moved = off.worst.activations.blocks_bytes
    assert moved == 4 * 2048 * 2048 * 24  # the block input per layer, 24 layers: fp32 under torch DDP autocast
    assert on.worst.host_bytes == moved and on.worst.activations.blocks_bytes == 0


@pytest.mark.parametrize("kwargs, field", [
    (dict(zero=ZeroStage.ZERO1, offload=Offload.PARAMS), "offload"),
    (dict(offload=Offload.OPTIMIZER), "offload"),
    (dict(offload_activations=True), "offload_activations"),
    (dict(virtual_stages=2), "virtual_stages"),
])
def test_strategy_rejects_inconsistent(kwargs, field):
    with pytest.raises(SpecError) as err:
        Strategy(global_batch=8, **kwargs)
    assert err.value.field == field


# --- frameworks: what torch / DeepSpeed allocate on purpose (hand-worked; measured in test_memory_measured) ---
from simulator.memory import Framework, buffer_bytes, dim0_real_numels, resolve_framework, step_tensors  # noqa: E402

F32 = DtypePolicy.FP32


def test_fsdp2_adam_state_is_the_unpadded_shard():
    """d0 = 10 rows of 3 on 4 ranks: c = ceil(10/4) = 3 rows; real rows min(3, max(0, 10 - 3r)) = 3, 3, 3, 1.
    Params and grads stay padded (9 elements on every rank); Adam m + v are 8 B x real elements."""
    assert dim0_real_numels([(10, 3)], 4) == [9, 9, 9, 3]
    assert dim0_real_numels([(2, 5), ()], 4) == [5 + 1, 5, 0, 0]  # fewer rows than ranks; 0-d on rank 0
    r3 = model_state_bytes([("w", (10, 3))], dp=4, zero=ZeroStage.ZERO3, dtype=F32, framework=Framework.FSDP2, rank=3)
    assert (r3.params_bytes, r3.grads_bytes, r3.optimizer_bytes, r3.optimizer_step_bytes) == (36, 36, 24, 4)
    worst = model_state_bytes([("w", (10, 3))], dp=4, zero=ZeroStage.ZERO3, dtype=F32, framework=Framework.FSDP2)
    assert worst.optimizer_bytes == 72  # rank 0 holds a full padded-size shard


def test_fsdp2_zero2_peak_is_unsharded_copy_plus_shard():
    """reshard_after_forward=False, fp32, d0 = 10 on 4 ranks: the all-gather output is 4·3 = 12 rows
    (padded), next to the persistent 3-row shard: peak 15 rows x 3 x 4 B = 180; after the step 36 (ZeRO-3).
    bf16 mixed: the persistent fp32 shard is the master (in K), so the peak is the bf16 copy, 12·3·2 = 72."""
    m = model_state_bytes([("w", (10, 3))], dp=4, zero=ZeroStage.ZERO2, dtype=F32, framework=Framework.FSDP2)
    assert (m.params_bytes, m.params_at_rest_bytes, m.grads_bytes) == (180, 36, 36)
    assert m.total_bytes - m.total_after_step_bytes == 144
    mixed = model_state_bytes([("w", (10, 3))], dp=4, zero=ZeroStage.ZERO2, dtype=MIXED, framework=Framework.FSDP2)
    assert (mixed.params_bytes, mixed.params_at_rest_bytes) == (72, 18)


def test_step_tensors_per_framework():
    """torch Adam: a 0-d fp32 step per parameter tensor with state; ZeRO-1 under torch: the rank's own
    tensors (greedy [10, 7, 5, 3, 3] on 2 ranks -> r0 holds 2, r1 holds 3); DeepSpeed: none."""
    shapes = [(10,), (7,), (5,), (3,), (3,)]
    assert step_tensors(shapes, 2, ZeroStage.ZERO0, Framework.TORCH_DDP) == [5, 5]
    assert step_tensors(shapes, 2, ZeroStage.ZERO1, Framework.TORCH_DDP) == [2, 3]
    assert step_tensors(shapes, 2, ZeroStage.ZERO3, Framework.FSDP2) == [5, 5]
    assert step_tensors(shapes, 2, ZeroStage.ZERO1, Framework.DEEPSPEED) == [0, 0]
    assert model_state_bytes(shapes, dp=2, zero=ZeroStage.ZERO0, dtype=F32).optimizer_step_bytes == 20


def test_framework_resolution():
    z0, z1, z2 = ZeroStage.ZERO0, ZeroStage.ZERO1, ZeroStage.ZERO2
    assert resolve_framework(z0) == (Partitioning.FLAT, Framework.TORCH_DDP)
    assert resolve_framework(z1) == (Partitioning.FLAT, Framework.DEEPSPEED)
    assert resolve_framework(z1, Partitioning.WHOLE_TENSOR) == (Partitioning.WHOLE_TENSOR, Framework.TORCH_DDP)
    assert resolve_framework(z2, None, Framework.FSDP2) == (Partitioning.DIM0_PADDED, Framework.FSDP2)
    with pytest.raises(SpecError, match="does not implement ZeRO-1"):
        resolve_framework(z1, None, Framework.FSDP2)
    with pytest.raises(SpecError) as err:
        resolve_framework(z2, Partitioning.FLAT, Framework.FSDP2)
    assert err.value.field == "partitioning"


@pytest.mark.parametrize("zero, framework, view, expected", [
    (ZeroStage.ZERO0, Framework.TORCH_DDP, False, 4000),    # DDP default: a full bucket copy of the grads
    (ZeroStage.ZERO0, Framework.TORCH_DDP, True, 0),        # grads are views into the buckets
    (ZeroStage.ZERO1, Framework.TORCH_DDP, False, 4000),    # ZeroRedundancyOptimizer runs under DDP
    (ZeroStage.ZERO0, Framework.DEEPSPEED, False, 4000),    # flattened per bucket: min(5e8, P) = P
    (ZeroStage.ZERO1, Framework.DEEPSPEED, False, 4 * DEEPSPEED_REDUCE_BUCKET_ELEMENTS),  # torch.empty(bucket)
    (ZeroStage.ZERO3, Framework.FSDP2, False, 0),
])
def test_grad_buckets_follow_the_framework(zero, framework, view, expected):
    b = buffer_bytes(local_params=1000, largest_block=100, zero=zero, dtype=F32, framework=framework,
                     gradient_as_bucket_view=view)
    assert b.grad_buckets_bytes == expected


@pytest.mark.parametrize("zero, overlap, buffers", [
    (ZeroStage.ZERO1, False, 1), (ZeroStage.ZERO2, False, 1),
    (ZeroStage.ZERO2, True, 2),   # overlap_comm: double buffering
    (ZeroStage.ZERO3, True, 1),   # stage3.py: one flat reduce buffer
])
def test_deepspeed_reduce_buffers_follow_the_strategy_bucket(zero, overlap, buffers):
    """DeepSpeed stage_1_and_2.py backward(): torch.empty(reduce_bucket_size) of the 16-bit dtype, a
    second with overlap_comm; the bucket is the strategy's (here 1e6 elements), not DeepSpeed's 5e8:
    1e6 x 2 B x buffers."""
    b = buffer_bytes(local_params=10**10, largest_block=1, zero=zero, dtype=MIXED, bucket_elements=10**6,
                     overlap_grad_reduce=overlap)
    assert b.grad_buckets_bytes == 2 * 10**6 * buffers
    whole = buffer_bytes(local_params=5000, largest_block=1, zero=zero, dtype=MIXED, bucket_elements=None)
    assert whole.grad_buckets_bytes == 2 * 5000  # no bucket size: one bucket of every local gradient


def test_parameter_server_has_no_buckets():
    """A parameter server pushes gradients as they are: no DDP bucket copy (it used to count one)."""
    b = buffer_bytes(local_params=1000, largest_block=1, zero=ZeroStage.ZERO0, dtype=MIXED, all_reduce=False)
    assert b.grad_buckets_bytes == 0


def test_bucket_view_only_under_ddp():
    with pytest.raises(SpecError):
        buffer_bytes(local_params=1, largest_block=1, zero=ZeroStage.ZERO1, dtype=MIXED, gradient_as_bucket_view=True)


def test_strategy_rejects_bucket_view_outside_ddp():
    with pytest.raises(SpecError) as err:
        Strategy(global_batch=2, dp=2, zero=ZeroStage.ZERO3, gradient_as_bucket_view=True)
    assert err.value.field == "gradient_as_bucket_view"
    assert Strategy(global_batch=2, dp=2, zero=ZeroStage.ZERO3, framework=Framework.FSDP2).resolved_partitioning \
        is Partitioning.DIM0_PADDED


def test_dropout_presets_and_validation():
    """GPT presets train with dropout 0.1 (GPT-2 config, Megatron defaults), Llama with none."""
    from simulator.workload.presets import GPT_DROPOUT, LLAMA_DROPOUT
    assert get_preset("gpt3-175b").dropout == GPT_DROPOUT == 0.1
    assert get_preset("llama2-7b").dropout == LLAMA_DROPOUT == 0.0
    with pytest.raises(SpecError) as err:
        replace(get_preset("gpt3-125m"), dropout=1.0)
    assert err.value.field == "model.dropout"


@pytest.mark.parametrize("zero, framework, per_element", [
    (ZeroStage.ZERO3, Framework.DEEPSPEED, 2 * 2 + 2),      # current + prefetched block, one unsharded gradient
    (ZeroStage.ZERO3, Framework.FSDP2, 2 * 2 + 2 * 2),      # + the reduce-scatter input the gradient is copied into
    (ZeroStage.ZERO2, Framework.FSDP2, 2 * 2),              # parameters already in the peak: the two gradient copies
    (ZeroStage.ZERO2, Framework.DEEPSPEED, 0),
])
def test_gathered_block_buffers_per_framework(zero, framework, per_element):
    """Largest block 1000 elements, bf16: FSDP2's foreach_reduce frees the unsharded gradients only after
    copying them into the reduce-scatter input (torch 2.13 _fsdp_collectives.py lines 597-606)
    [src: torch-fsdp2]; both frameworks hold the current and one prefetched block's parameters."""
    b = buffer_bytes(local_params=10**6, largest_block=1000, zero=zero, dtype=MIXED, framework=framework)
    assert b.gathered_params_bytes == 1000 * per_element
