"""Which fused-attention kernel torch's ``scaled_dot_product_attention`` runs here, told to the simulator.

torch picks SDPA's backend at run time from its version, the bundled cuDNN, the GPU and the call's shapes
(``sdp_utils.cpp``: cuDNN first only with cuDNN > 9.15 on sm90/sm100) [src: pytorch-sdpa-cudnn-optin], so the
torch frameworks' rule in the simulator (FlashAttention-2) can be wrong for a given machine: on the H200 of
2026-11-24, torch 2.11 with cuDNN 9.19 ran cuDNN attention (docs/hardware_measured.md). A rank asks torch
(``torch._fused_sdp_choice``, the function SDPA dispatches on) for the model's causal attention shape in bf16,
and the run plan names the answer as its ``attention_backend``, with a note when it differs from the
framework's rule: the results file then records, and ``trainplan validate`` re-estimates, the kernel that ran.
CUDA only (the CPU's SDPA kernels have no rates in the simulator); a backend without rates (memory-efficient,
math) leaves the plan as it is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from simulator.attention_efficiency import AttentionBackend
from simulator.plan_scale import ScaledPlan
from simulator.strategy import AttentionKind

SDPA_FLASH_ATTENTION, SDPA_CUDNN_ATTENTION = 1, 3
"""``torch.nn.attention.SDPBackend`` values of the two kernels the simulator has rates for."""

BACKEND_OF_CHOICE = {SDPA_FLASH_ATTENTION: AttentionBackend.FLASH_ATTENTION_2,
                     SDPA_CUDNN_ATTENTION: AttentionBackend.CUDNN}


def sdpa_choice(spec, device) -> int:
    """torch's SDPA backend (an ``SDPBackend`` value) for one causal bf16 call of ``spec``'s heads on ``device``
    (a CUDA device): the same dispatch ``F.scaled_dot_product_attention`` runs, on a small sequence."""
    import torch

    seq = min(spec.seq_len, 1024)
    q = torch.zeros(1, spec.heads, seq, spec.d_head, dtype=torch.bfloat16, device=device)
    kv = torch.zeros(1, spec.n_kv_heads, seq, spec.d_head, dtype=torch.bfloat16, device=device)
    return int(torch._fused_sdp_choice(q, kv, kv, is_causal=True, enable_gqa=spec.n_kv_heads != spec.heads))


def with_sdpa_backend(scaled: ScaledPlan, device, choice: Callable[..., int] = sdpa_choice) -> ScaledPlan:
    """``scaled`` whose run plan names the attention kernel torch picks on ``device`` (module docstring)."""
    s, plan = scaled.run.strategy, scaled.run
    if getattr(device, "type", device) != "cuda" or s.attention is not AttentionKind.FLASH:
        return scaled
    backend = BACKEND_OF_CHOICE.get(choice(plan.model, device))
    if backend is None or backend is s.attention_backend:
        return scaled
    rule = s.resolved_attention_backend(plan.cluster.device.compute_capability)
    notes = scaled.notes
    if backend is not rule:
        notes += (f"attention backend {rule.value} → {backend.value}: torch's SDPA picks it on this GPU",)
    return replace(scaled, run=replace(plan, strategy=replace(s, attention_backend=backend)), notes=notes)
