"""torch's DTensor output layer and loss_parallel (simulator/memory/dtensor_tp.py), byte by byte
against hand-worked numbers from the framework's source [src: torch-loss-parallel, torch-dtensor-tp,
torchtitan-tp-loss]; exact (no tolerance: integer byte counts)."""

from dataclasses import replace

import pytest

from simulator.memory.activations import loss_working_bytes
from simulator.memory.stage_acts import stage_activations
from simulator.memory.dtensor_tp import uses_dtensor_tp
from simulator.strategy import Framework, ZeroStage
from simulator.workload import DtypePolicy, get_preset
from memory_layouts import layout_of

T = 8192 * 16             # tokens of one micro-batch: s = 8192, b = 16 (torchtitan Table 4's local batch)
LOCAL_VOCAB = 128256 // 8  # Llama 3.1's vocabulary over tp = 8: 16,032 logits per token
SBH = T * 8192            # Llama 3.1 70B, h = 8192: 1,073,741,824 elements


def llama70b():
    return get_preset("llama3.1-70b").with_seq(8192)


@pytest.mark.parametrize("dtype", [DtypePolicy.BF16_MIXED, DtypePolicy.FP32])
def test_loss_parallel_working_set_is_three_fp32_logit_tensors(dtype):
    """_nll_loss_and_log_softmax_backward: zeros_like(x), exp(x) and their sum next to the saved
    log-probabilities: 12 B per local logit, 131,072 · 16,032 · 12 = 25,216,155,648 bytes. The forward
    (e + 4 + 4 with e = 2, or 4 + 4 in fp32) is smaller, so fp32 gives the same."""
    spec = replace(llama70b(), dtype=dtype)
    got = loss_working_bytes(spec, seq=8192, mbs=16, tp=8, framework=Framework.FSDP2)
    assert got == T * LOCAL_VOCAB * 12 == 25_216_155_648


def test_other_frameworks_keep_their_loss():
    """The eager cross-entropy (8 B per logit) at tp = 1 under FSDP2 and at tp = 8 under DeepSpeed; torch
    DDP's autocast on bf16 logits 4 (simulator.memory.autocast); Megatron's in-place vocab-parallel loss
    (e = 2 B) at tp = 8."""
    spec = llama70b()
    assert loss_working_bytes(spec, seq=8192, mbs=2, tp=1, framework=Framework.FSDP2) == 8192 * 2 * 128256 * 8
    assert loss_working_bytes(spec, seq=8192, mbs=16, tp=8, framework=Framework.DEEPSPEED) == T * LOCAL_VOCAB * 8
    assert loss_working_bytes(spec, seq=8192, mbs=16, tp=8, framework=Framework.TORCH_DDP) == T * LOCAL_VOCAB * 4
    assert loss_working_bytes(spec, seq=8192, mbs=16, tp=8, framework=Framework.MEGATRON) == T * LOCAL_VOCAB * 2
    assert not uses_dtensor_tp(Framework.FSDP2, 1) and uses_dtensor_tp(Framework.FSDP2, 8)


def _head(framework, zero, sp=True):
    spec = llama70b()
    layout = layout_of(spec, dp=2, tp=8, mbs=16, seq=8192, sp=sp, zero=zero, framework=framework)
    return stage_activations(spec, layout, 0)


def test_dtensor_tp_keeps_the_gathered_projection_input():
    """FSDP2 + tp 8 + sp (torchtitan): the final norm's input stays sequence-sharded (SBH·2/8 =
    268,435,456), the output projection saves ColwiseParallel's all-gathered input (SBH·2 =
    2,147,483,648), plus the fp32 log-probabilities (4 · 131,072 · 16,032 = 8,405,385,216):
    10,821,304,320 bytes. Megatron keeps both inputs sharded: 2 · 268,435,456 + 8,405,385,216."""
    logits = 4 * T * LOCAL_VOCAB
    assert _head(Framework.FSDP2, ZeroStage.ZERO3).head_bytes == SBH * 2 // 8 + SBH * 2 + logits == 10_821_304_320
    assert _head(Framework.MEGATRON, ZeroStage.ZERO1).head_bytes == 2 * (SBH * 2 // 8) + logits
    # without sequence parallelism both keep whole inputs
    assert _head(Framework.FSDP2, ZeroStage.ZERO3, sp=False).head_bytes == 2 * SBH * 2 + logits


def test_peak_holds_the_loss_parallel_working_set():
    """Under full recompute the loss's working set (25.2 GB) exceeds one recomputed block's, so it is
    the one the peak adds to the checkpoints and the head."""
    act = _head(Framework.FSDP2, ZeroStage.ZERO3)
    assert act.loss_working_bytes == T * LOCAL_VOCAB * 12
    assert act.gpu_bytes == act.blocks_bytes + act.head_bytes + act.loss_working_bytes


@pytest.mark.parametrize("parallel, framework", [(True, Framework.FSDP2), (False, Framework.DEEPSPEED)])
def test_measured_loss_working_set_matches_the_model(parallel, framework):
    """Measured on 2 gloo ranks (executor.loss_memory: the CPU allocator's events under torch.profiler):
    loss_parallel on vocab-sharded bf16 logits holds 12 B per local logit on top of the saved fp32
    log-probabilities in backward; the eager loss on whole logits 8. The model's working set is the
    larger of the forward's (peak + 2 B logits − kept) and the backward's peak; within 1 % (the
    measurement adds O(tokens) targets and masks: 0.016 B per logit here)."""
    from executor.loss_memory import measure_loss_working

    tokens, vocab = 256, 4096
    spec = replace(get_preset("llama2-7b"), vocab=vocab)
    model = loss_working_bytes(spec, seq=tokens, mbs=1, tp=2 if parallel else 1, framework=framework)
    for rank in measure_loss_working(tokens=tokens, vocab=vocab, tp=2, loss_parallel=parallel):
        assert rank["kept_bytes"] == pytest.approx(4 * rank["local_logits"], rel=0.01)  # the saved fp32 log-probs
        forward = rank["forward_peak_bytes"] + 2 * rank["local_logits"] - rank["kept_bytes"]
        assert max(forward, rank["backward_peak_bytes"]) == pytest.approx(model, rel=0.01)


def test_measured_output_layer_saves_the_gathered_input():
    """Measured on 2 gloo ranks (executor.loss_memory.measure_head_saved, saved_tensors_hooks):
    torchtitan's ColwiseParallel(input_layouts=Shard(1)) output layer saves the all-gathered input,
    256 tokens · 64 · 2 B = 32,768 bytes per rank (twice the rank's 16,384-byte shard), exactly the
    model's output-projection line; Megatron's sequence-parallel layer would keep the shard."""
    from executor.loss_memory import measure_head_saved
    from simulator.memory.dtensor_tp import head_projection_input_bytes

    model = head_projection_input_bytes(tokens=256, hidden=64, activation_bytes=2, tp=2, sp=True, dtensor=True)
    megatron = head_projection_input_bytes(tokens=256, hidden=64, activation_bytes=2, tp=2, sp=True, dtensor=False)
    for rank in measure_head_saved(tokens=256, hidden=64, vocab=1024, tp=2):
        assert rank["saved_bytes"] == model == 32_768 == 2 * rank["input_shard_bytes"]
        assert megatron == rank["input_shard_bytes"]


@pytest.mark.parametrize("sp, expected", [(False, 82_688), (True, 74_240)])
def test_measured_dtensor_block_matches_the_model(sp, expected):
    """The executor's GPT block (fp32, h = 64, a = 4, f = 256, no dropout, SDPA) over 2 gloo ranks with
    torch's TP plan (executor.memory_measure.tp_block_saved_bytes, saved_tensors_hooks), s = 16, b = 2:
    32 tokens · 4 B · (norm parts + (q + 2kv + q + 2f)/2 = 384 + LayerNorm stats + lse). Without sp the
    norm parts are 4h = 256 and the stats 4 + 2: 646 elements, 82,688 B. With sp the norms' inputs are
    sharded (2h/2 = 64) but QKV and MLP-up save their gathered inputs (2h = 128); stats 2 + 2: 580
    elements, 74,240 B, exactly the model's DTensor count; Megatron's 4h/t count would be 66,048."""
    from executor.memory_measure import tp_block_saved_bytes
    from simulator.memory.activations import layer_activation
    from simulator.workload import TransformerSpec

    spec = TransformerSpec(name="gpt-tiny-v126", layers=2, hidden=64, heads=4, vocab=126, seq_len=16,
                           dtype=DtypePolicy.FP32)
    assert layer_activation(spec, seq=16, mbs=2, tp=2, sp=sp, dtensor=True).full_bytes == expected
    for rank in tp_block_saved_bytes(spec, tp=2, sequence_parallel=sp, batch=2, seq=16):
        assert rank["saved_bytes"] == expected
    if sp:
        assert layer_activation(spec, seq=16, mbs=2, tp=2, sp=True).full_bytes == 66_048
