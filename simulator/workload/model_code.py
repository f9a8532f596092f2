"""The element-wise kernels of a model's own Python code where it is not one kernel per layer.

The block kernel list (:mod:`simulator.workload.ops`) charges a norm as one kernel that reads and writes its
input (``F.rms_norm`` / ``F.layer_norm``), rotary embedding as one read and write of Q and K, and the attention
kernel reading K and V as the projections wrote them. torchtitan's Llama of 2024 (the code of its published
runs, :class:`~simulator.workload.kinds.ModelCode`) runs each of them as several eager operators, every one a
pass over device memory. Per element of the tensor, ``e`` its bytes (bf16: 2), fp32 intermediates 4 B; forward,
then backward as autograd differentiates the same operators (each list counted by hand from the source and
checked operator by operator with torch's dispatcher on CPU, ``benchmarks/torchtitan_eager_ops.py``):

    RMSNorm, ATen's composite ``rms_norm`` (``nn.RMSNorm`` on torch <= 2.7) [src: torch-rms-norm-composite]
      fwd  to(fp32) e+4, pow 4+4, mean 4, mul by rsqrt 4+4, mul by weight 4+4, type_as 4+e       = 2e + 36
      bwd  cast e+4; mul-weight: dx 4+4, dw 4+4+4 and its sum 4; mul-rsqrt: 4+4, 4+4+4 and sum 4;
           mean 4; pow: x.pow(1) 4+4, ·2 4+4, ·grad 4+4+4; the two branches' add 4+4+4; cast 4+e = 2e + 100
    RMSNorm, torchtitan's own class (``_norm(x.float()).type_as(x) * weight``) [src: torchtitan-llama-2024]
      fwd  to(fp32) e+4, pow 8, mean 4, mul 8, type_as 4+e, mul by weight in e: 2e               = 4e + 28
      bwd  mul-weight in e: dx 2e, dw 3e and its sum e; cast e+4; mul-rsqrt 24; mean 4; pow 28;
           add 12; cast 4+e                                                                        = 8e + 76
    rotary (``apply_rotary_emb``: ``xq.float()``, complex multiply, ``type_as``) on Q and K, per element
      fwd  e+4, 4+4, 4+e = 2e + 16;   bwd the same three passes = 2e + 16
    ``repeat_kv`` (``unsqueeze``/``expand``/``reshape`` copies K and V to all query heads), per K or V
    element, ``r`` = query heads per KV head (> 1 only)
      fwd  reads e (once: a lower bound), writes r·e;   bwd ``sum`` over the repeats: reads r·e, writes e

The modelled kernels they replace: a norm's ``2e`` forward (at ``F.rms_norm``'s rate) and ``5e`` backward
(input gradient and γ/β kernel, :mod:`simulator.workload.eager_norm`); rotary's ``2e`` and ``3e``; nothing
for ``repeat_kv``. Each chain is charged as one memory-bound kernel of its bytes at the device's copy rate
(element-wise kernels and reductions run at a copy's rate on the H200: the residual add and SwiGLU's two
kernels measured so, :mod:`simulator.workload.eager_rates`). Only under eager kernel fusion:
``torch.compile`` fuses these chains (the compiled rows keep the list of :mod:`simulator.workload.ops`).

llm-foundry's MPT (``ModelCode.LLM_FOUNDRY_MPT``) runs none of these chains: its ``LPLayerNorm`` is one
``F.layer_norm`` call, ALiBi is a bias inside the attention kernel and every query head has its own K and V. What
it changes is the norm's format under ``torch.autocast`` over fp32 parameters: ``LPLayerNorm.forward`` casts its
input (and weight) to the autocast dtype and calls ``F.layer_norm`` with autocast disabled [src:
llm-foundry-lp-layernorm], so the norm reads and writes bf16 (``2e`` forward), preceded by a cast of the fp32
stream (``4 + e``), where autocast's own rule runs ``layer_norm`` in fp32 (``2·4``) followed by a cast of its
output (``4 + e``): :func:`fp32_norms_under_autocast`, read by :mod:`simulator.workload.autocast`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.workload.kernels import Kernel, OpKind, OpWork, Scope, memory
from simulator.workload.kinds import KernelFusion, ModelCode

FP32_BYTES = 4


@dataclass(frozen=True)
class NormChain:
    """Bytes per element of an eager norm written as separate operators: ``a·e + b`` forward and backward."""

    fwd_per_e: int
    fwd_fixed: int
    bwd_per_e: int
    bwd_fixed: int

    def fwd_bytes(self, e: int) -> int:
        return self.fwd_per_e * e + self.fwd_fixed

    def bwd_bytes(self, e: int) -> int:
        return self.bwd_per_e * e + self.bwd_fixed


ATEN_COMPOSITE_RMS_NORM = NormChain(fwd_per_e=2, fwd_fixed=36, bwd_per_e=2, bwd_fixed=100)
"""``nn.RMSNorm`` through ATen's composite ``rms_norm`` (module docstring) [src: torch-rms-norm-composite]."""
TORCHTITAN_RMSNORM_CLASS = NormChain(fwd_per_e=4, fwd_fixed=28, bwd_per_e=8, bwd_fixed=76)
"""torchtitan's ``RMSNorm`` module of mid-2024 (module docstring) [src: torchtitan-llama-2024]."""

NORM_CHAINS = {ModelCode.TORCHTITAN_2024_MID: TORCHTITAN_RMSNORM_CLASS,
               ModelCode.TORCHTITAN_2024_12: ATEN_COMPOSITE_RMS_NORM}


LOW_PRECISION_NORM_CODES = frozenset({ModelCode.LLM_FOUNDRY_MPT})
"""Model codes whose norms cast their input down and run in the compute format under autocast."""


def fp32_norms_under_autocast(code: ModelCode) -> bool:
    """Whether ``code``'s norms run in fp32 under eager autocast over fp32 parameters (autocast's ``layer_norm``
    and ``rms_norm`` rule), rather than in bf16 on a cast of their input (llm-foundry's ``LPLayerNorm``)."""
    return code not in LOW_PRECISION_NORM_CODES


def rotary_bytes_per_element(e: int) -> int:
    """torchtitan's complex rotary, forward or backward, per Q or K element: cast up, complex multiply in fp32,
    cast back: ``2e + 16`` (module docstring)."""
    return (e + FP32_BYTES) + 2 * FP32_BYTES + (FP32_BYTES + e)


def repeat_kv_bytes(kv_elems: float, n_rep: float, e: int) -> float:
    """Forward (and backward) bytes of ``repeat_kv`` over K and V of ``kv_elems`` elements each on the rank:
    ``2 · kv_elems · (1 + n_rep) · e``; 0 when every query head has its own KV head (``n_rep`` 1)."""
    return 0.0 if n_rep <= 1 else 2.0 * kv_elems * (1 + n_rep) * e


def _chain(kernel: Kernel, name: str, nbytes: float) -> Kernel:
    """One kernel standing for a chain of operators: ``kernel``'s host dispatches, a copy's rate."""
    return replace(memory(name, nbytes), dispatches=kernel.dispatches)


def _norm_work(work: OpWork, chain: NormChain, e: int) -> OpWork:
    """The norm operation with each forward kernel (``2e`` per element: read and write) as its chain."""
    fwd = tuple(_chain(k, k.name + ".ops", k.bytes / (2 * e) * chain.fwd_bytes(e)) for k in work.fwd)
    bwd = tuple(_chain(k, k.name + ".ops.bwd", k.bytes / (2 * e) * chain.bwd_bytes(e)) for k in work.fwd)
    return replace(work, fwd=fwd, bwd=bwd)


def _elementwise_work(work: OpWork, e: int, kv_elems: float, n_rep: float) -> OpWork:
    """The block's element-wise operation with rotary as torchtitan's three passes and ``repeat_kv``'s copies."""
    per = rotary_bytes_per_element(e)
    fwd, bwd = [], []
    for k in work.fwd:
        fwd.append(_chain(k, "rotary.ops", k.bytes / (2 * e) * per) if k.name == "rotary" else k)
    rotary_bwd = {k.name + ".bwd": k for k in work.fwd if k.name == "rotary"}
    for k in work.bwd:
        src = rotary_bwd.get(k.name)
        bwd.append(_chain(k, "rotary.ops.bwd", src.bytes / (2 * e) * per) if src is not None else k)
    repeat = repeat_kv_bytes(kv_elems, n_rep, e)
    if repeat:
        fwd.append(memory("repeat_kv", repeat))
        bwd.append(memory("repeat_kv.bwd", repeat))
    return replace(work, fwd=tuple(fwd), bwd=tuple(bwd))


def with_model_code(works: list[OpWork], code: ModelCode, fusion: KernelFusion, e: int, kv_elems: float = 0.0,
                    n_rep: float = 1.0) -> list[OpWork]:
    """``works`` (a block's or the edges' operations) with the model code's own operator chains in place of the
    one-kernel norms and rotary, and ``repeat_kv``'s copies (``kv_elems`` K or V elements on the rank, ``n_rep``
    query heads per KV head) in the block's element-wise operation; unchanged for the codes whose norms are one
    kernel (``FUSED_OPS``, ``LLM_FOUNDRY_MPT``) and under Megatron's or torch.compile's fusion. Apply after :func:`~simulator.workload.eager_norm.
    with_norm_weight_grads`: a chain's backward includes the weight gradient."""
    if code not in NORM_CHAINS or fusion is not KernelFusion.EAGER:
        return works
    chain = NORM_CHAINS[code]
    out = []
    for w in works:
        if w.op is OpKind.NORM:
            w = _norm_work(w, chain, e)
        elif w.op is OpKind.ELEMENTWISE and w.scope is Scope.LAYER:
            w = _elementwise_work(w, e, kv_elems, n_rep)
        out.append(w)
    return out


def kv_repeat(spec, tokens: float, tp: int) -> tuple[float, float]:
    """(K or V elements on a rank, query heads per KV head) of ``spec``'s block on ``tokens`` tokens per rank and
    ``tp`` ranks (KV heads replicated when fewer than the ranks, as :func:`simulator.workload.ops.layer_work`);
    (0, 1) for a latent-attention block (no ``repeat_kv``)."""
    if getattr(spec, "mla", None) is not None:
        return 0.0, 1.0
    kv_t = spec.kv_dim / tp if spec.n_kv_heads >= tp else spec.kv_dim
    return tokens * kv_t, (spec.q_dim / tp) / kv_t
