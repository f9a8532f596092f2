"""Dropout and softmax kernels by the framework's kernel fusion (simulator.workload.ops, KernelFusion).

Bytes are hand-worked from the kernels each framework runs: PyTorch eager ``native_dropout`` (reads x,
writes y and a 1-byte bool mask), Megatron-LM's fused bias-dropout-add and scale-mask-softmax
[src: megatron-core], torch.compile fusing point-wise chains [src: ansel-2024].
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.compute import total_time, layer_times
from simulator.profiles import get_profile
from simulator.workload import get_preset
from simulator.workload.kinds import KernelFusion
from simulator.workload.ops import edge_work, layer_work

GPT = get_preset("gpt3-1.3b")  # h = 2048, 16 heads, dropout 0.1, bf16 activations (e = 2)
RES = 1 * 2048 * 2048 * 2  # one residual stream, b = 1, s = 2048: T·h·e bytes


def _kernels(work, name):
    return [k for w in work for k in w.fwd if k.name == name]


def test_gpt_has_dropout_and_llama_does_not():
    assert GPT.dropout == pytest.approx(0.1)
    llama = layer_work(get_preset("llama2-7b"), 1, 2048, fusion=KernelFusion.EAGER, flash_attention=False)
    assert not [k for w in llama for k in w.fwd if "dropout" in k.name]


def test_eager_residual_dropouts_are_their_own_kernels():
    # two dropouts (after attention, after MLP): read T·h·e, write T·h·e and T·h mask bytes each
    (k,) = _kernels(layer_work(GPT, 1, 2048, fusion=KernelFusion.EAGER), "resid_dropout")
    assert k.bytes == 2 * (2 * RES + RES / 2)


@pytest.mark.parametrize("fusion", [KernelFusion.MEGATRON, KernelFusion.COMPILED])
def test_fused_residual_dropouts_only_write_their_masks(fusion):
    (k,) = _kernels(layer_work(GPT, 1, 2048, fusion=fusion), "resid_dropout.mask")
    assert k.bytes == 2 * RES / 2


def test_eager_attention_softmax_passes_and_attention_dropout():
    scores = 1 * 16 * 2048 * 2048  # b · heads · s², one tp rank
    eager = layer_work(GPT, 1, 2048, flash_attention=False, fusion=KernelFusion.EAGER)
    fused = layer_work(GPT, 1, 2048, flash_attention=False, fusion=KernelFusion.MEGATRON)
    compiled = layer_work(GPT, 1, 2048, flash_attention=False, fusion=KernelFusion.COMPILED)
    assert _kernels(eager, "softmax")[0].bytes == 3 * 2 * 2 * scores  # scale, mask, softmax: read+write each
    assert _kernels(fused, "softmax")[0].bytes == 2 * 2 * scores
    assert _kernels(eager, "attn_dropout")[0].bytes == 2 * 2 * scores + scores  # Megatron keeps it separate too
    assert _kernels(fused, "attn_dropout")[0].bytes == 2 * 2 * scores + scores
    assert _kernels(compiled, "attn_dropout.mask")[0].bytes == scores


def test_flash_attention_has_no_separate_attention_dropout():
    work = layer_work(GPT, 1, 2048, flash_attention=True, fusion=KernelFusion.EAGER)
    assert not _kernels(work, "attn_dropout") and not _kernels(work, "attn_dropout.mask")


def test_embedding_dropout_on_the_first_stage():
    th = 2048 * 2048
    eager = edge_work(GPT, 1, 2048, fusion=KernelFusion.EAGER)
    assert _kernels(eager, "embed_dropout")[0].bytes == 2 * th * 2 + th
    assert _kernels(edge_work(GPT, 1, 2048, fusion=KernelFusion.COMPILED), "embed_dropout.mask")[0].bytes == th


def test_more_fusion_is_never_slower():
    device = load_preset("dgx-a100").device
    times = [total_time(layer_times(GPT, device, 1, 2048, flash_attention=False, fusion=f))
             for f in (KernelFusion.EAGER, KernelFusion.MEGATRON, KernelFusion.COMPILED)]
    assert times[0] > times[1] > times[2]


def test_without_dropout_fusion_changes_only_the_eager_softmax():
    """Without dropout or biases the fusions time flash attention blocks alike but for eager torch's norms and GELU,
    which run below a copy's rate (simulator.workload.eager_rates); with biases, eager autograd adds its
    bias-gradient reductions (simulator.workload.ops._bias_grads), which the fusions leave out."""
    from simulator.workload.kinds import BiasKind
    from simulator.workload.ops import OpKind

    device = load_preset("dgx-a100").device
    plain = replace(GPT, dropout=0.0, bias=BiasKind.NONE)
    flash = {f: total_time(layer_times(plain, device, 1, 2048, fusion=f)) for f in KernelFusion}
    assert flash[KernelFusion.EAGER] > flash[KernelFusion.MEGATRON] == flash[KernelFusion.COMPILED]
    rest = {f: total_time([r for r in layer_times(plain, device, 1, 2048, fusion=f)
                           if r.op not in (OpKind.NORM, OpKind.ELEMENTWISE)]) for f in KernelFusion}
    assert rest[KernelFusion.EAGER] == rest[KernelFusion.MEGATRON] == rest[KernelFusion.COMPILED]
    biased = {f: total_time(layer_times(replace(plain, bias=BiasKind.ALL), device, 1, 2048, fusion=f))
              for f in KernelFusion}
    assert biased[KernelFusion.EAGER] > biased[KernelFusion.MEGATRON] == biased[KernelFusion.COMPILED]


def test_the_megatron_profile_fuses():
    assert get_profile("megatron").values()["kernel_fusion"] is KernelFusion.MEGATRON
    assert "kernel_fusion" not in get_profile("ddp").values()
