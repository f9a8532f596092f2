"""Context-parallel communication of one chunk's micro-batch (:mod:`simulator.workload.context`).

Per transformer block, on the representative rank's cp group (its ring order is the group order),
with ``b`` the micro-batch, ``s/cp`` the local tokens, ``kv_t`` the key/value width on one tp rank
and ``e`` bytes per element:

- **ring**: a KV block is ``2·b·(s/cp)·kv_t·e`` bytes (K and V of the local tokens). Forward runs
  cp steps; in each of the first cp − 1 every rank sends the block it holds to the next rank while
  it computes the attention of one block, so a step's exposed time is
  ``max(0, t_send − t_attn/cp)``, ``t_attn`` the rank's attention-core time and ``t_send`` the
  slowest neighbour transfer of the ring on the real placement (an inter-node hop if the ring
  crosses nodes). Backward passes the KV blocks and the partial dK, dV along the ring (Transformer
  Engine's ``flash_attn_p2p_communicate`` of "KV and dKV" [src: te-context-parallel]): twice the
  bytes per step, against the backward attention time. Full recomputation repeats the forward ring
  inside backward. torch's ring (:attr:`~simulator.workload.context.RingRuntime.TORCH`) hands the dK, dV
  on in fp32 (``accum_dtype``), so a backward step moves ``2·b·(s/cp)·kv_t·(e + 4)`` bytes, and it waits for
  the last dK, dV hand-on after its loop, with no kernel left to hide it: one more neighbour transfer of the
  fp32 dK, dV, exposed [src: torch-context-parallel].
- **all-to-all** (Ulysses [src: jacobs-2023]): forward one all-to-all of Q, K, V
  (``b·(s/cp)·(q/t + 2·kv_t)·e`` bytes per rank) before the core and one of the output
  (``b·(s/cp)·(q/t)·e``) after it; backward the same two sizes (output gradient, then Q, K, V
  gradients). Blocking: the attention needs them.

The calls join the chunk's blocking TP calls (kind CP); a ring's exposed remainder is an
:attr:`~simulator.work.Transport.OVERLAPPED` call (a timed delay; the DES does not put its flows on
the links).
"""

from __future__ import annotations

from simulator.attention_efficiency import AttentionBackend
from simulator.collectives.base import Op
from simulator.compile.costs import CostCache
from simulator.compile.comm_part import call
from simulator.compute import Phase, layer_times
from simulator.work import CommCall, CommKind, Transport
from simulator.workload.context import ContextKind, ContextSplit, RingRuntime
from simulator.workload.ops import OpKind
from simulator.workload.ring_steps import FP32 as FP32_BYTES

__all__ = ["cp_calls", "ring_exposed_s"]


def ring_exposed_s(send_s: float, attention_s: float, cp: int) -> float:
    """Exposed seconds of one ring pass: ``(cp − 1) · max(0, send_s − attention_s / cp)``."""
    return (cp - 1) * max(0.0, send_s - attention_s / cp)


def _attention_s(cache: CostCache, spec, micro_batch: int, tp: int, context: ContextSplit,
                 backend: AttentionBackend) -> tuple[float, float]:
    """(forward, backward) seconds of one block's attention core on one rank (flash, ``backend``'s kernel)."""
    def compute():
        rows = layer_times(spec, cache.cluster.device, micro_batch, spec.seq_len, tp, context=context,
                           attention_backend=backend)
        pick = [r for r in rows if r.op is OpKind.ATTENTION]
        return (sum(r.time_s for r in pick if r.phase is Phase.FWD),
                sum(r.time_s for r in pick if r.phase is Phase.BWD))
    return cache.memo(("cp_attention", spec, micro_batch, tp, context, backend), compute)


def _ring_send_s(cache: CostCache, group: tuple[int, ...], nbytes: int) -> float:
    """The slowest neighbour transfer of the ring ``group`` (all ranks send at once)."""
    return max(cache.p2p(group[i], group[(i + 1) % len(group)], nbytes) for i in range(len(group)))


def _overlapped(group: tuple[int, ...], nbytes: int, time_s: float, concurrent: int) -> CommCall:
    return CommCall(kind=CommKind.CP, op=Op.SEND_RECV, group=group, nbytes=nbytes, transport=Transport.OVERLAPPED,
                    time_s=time_s, concurrent_groups=concurrent)


def cp_calls(cache: CostCache, spec, group: tuple[int, ...], *, micro_batch: int, tp: int, context: ContextSplit,
             layers: int, full_recompute: bool, concurrent: int,
             attention_backend: AttentionBackend = AttentionBackend.FLASH_ATTENTION_2,
             ) -> tuple[tuple[CommCall, ...], tuple[CommCall, ...]]:
    """(forward calls, backward calls) of one chunk's micro-batch on its cp ``group`` (module docstring)."""
    cp = context.degree
    if cp == 1 or layers == 0:
        return (), ()
    e, local = spec.dtype.activation_bytes, micro_batch * (spec.seq_len // cp)
    q_t = spec.q_dim / tp
    kv_t = spec.kv_dim / tp if spec.n_kv_heads >= tp else spec.kv_dim
    if context.kind is ContextKind.RING:
        block = int(round(2 * local * kv_t * e))
        attn_f, attn_b = _attention_s(cache, spec, micro_batch, tp, context, attention_backend)
        fwd_s = ring_exposed_s(_ring_send_s(cache, group, block), attn_f, cp)
        step = 2 * block if context.runtime is not RingRuntime.TORCH else int(round(block * (e + FP32_BYTES) / e))
        bwd_s = ring_exposed_s(_ring_send_s(cache, group, step), attn_b, cp)
        last = 0
        if context.runtime is RingRuntime.TORCH:  # the fp32 dK, dV hand-on waited for after the loop
            last = int(round(2 * local * kv_t * FP32_BYTES))
            bwd_s += _ring_send_s(cache, group, last)
        f = _overlapped(group, (cp - 1) * block, fwd_s, concurrent)
        b = _overlapped(group, (cp - 1) * step + last, bwd_s, concurrent)
        block_fwd, block_bwd = (f,), (b,)
    else:
        qkv = call(cache, CommKind.CP, Op.ALL_TO_ALL, group, local * (q_t + 2 * kv_t) * e, concurrent)
        out = call(cache, CommKind.CP, Op.ALL_TO_ALL, group, local * q_t * e, concurrent)
        block_fwd, block_bwd = (qkv, out), (out, qkv)
    per_block_bwd = (block_fwd if full_recompute else ()) + block_bwd
    return block_fwd * layers, per_block_bwd * layers
