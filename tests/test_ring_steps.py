"""A context-parallel ring's attention as its steps run (simulator/workload/ring_steps.py), hand-worked against
torch's ``_templated_ring_attention`` [src: torch-context-parallel]."""

import pytest

from simulator.attention_efficiency import AttentionBackend, AttentionCall, AttentionPass
from simulator.cluster.io import load_cluster
from simulator.compile import CostCache, compile_step
from simulator.compile.cp_part import ring_exposed_s
from simulator.compute import Phase, layer_times
from simulator.strategy.flat import strategy_from_flat
from simulator.work import CommKind
from simulator.workload import load_model
from simulator.workload.context import ContextKind, ContextSplit, RingRuntime
from simulator.workload.kernels import Kernel
from simulator.workload.kinds import KernelFusion
from simulator.workload.ops import OpKind, layer_work
from simulator.workload.ring_steps import ring_step_kernels, torch_ring_bytes

LLAMA = load_model("llama3-8b")


def _steps(cp: int, balanced: bool):
    """A rank's ring kernel of b 1, s 1024, q/t 64, K/V 16 wide, bf16, split into its step kernels."""
    s, q_t, kv_t = 1024, 64, 16
    call = AttentionCall(backend=AttentionBackend.FLASH_ATTENTION_2, direction=AttentionPass.FWD, seq_len=s // cp,
                         head_dim=64, causal=True)
    context = ContextSplit(cp, ContextKind.RING, balanced)
    kernel = Kernel(name="flash_attn", flops=4.0 * s * s * q_t / cp * context.imbalance, bytes=1e6, gemm=True,
                    attention=call)
    return kernel, ring_step_kernels(kernel, call, 1, s, q_t, kv_t, 2, context)


def test_balanced_ring_runs_one_causal_block_and_half_blocks_without_mask():
    kernel, (diag, off) = _steps(4, balanced=True)
    f0 = 4.0 * 256 * 256 * 64                        # one 256 × 256 block, counted in full: 16,777,216
    assert diag.flops == f0 and diag.attention.causal and diag.attention.seq_len == 256
    assert diag.attention.published_flops(diag.flops) == f0 / 2      # the diagonal block, causal
    # steps 1-3: s/cp queries × s/(2cp) keys, no mask: 3 half blocks = 3·f0/2, read at the shorter side 128
    assert not off.attention.causal and off.attention.seq_len == 128
    assert off.attention.published_flops(off.flops) == 3 * f0 / 2
    # the rank's total work unchanged: cp/2 blocks, what the one causal kernel counted
    total = sum(k.attention.published_flops(k.flops) for k in (diag, off))
    assert total == kernel.attention.published_flops(kernel.flops) == 2 * f0
    assert diag.bytes + off.bytes == kernel.bytes
    assert diag.bytes == 2 * 256 * (2 * 64 + 2 * 16)


def test_unbalanced_ring_last_rank_runs_full_blocks():
    kernel, (diag, off) = _steps(4, balanced=False)
    f0 = 4.0 * 256 * 256 * 64
    # the last rank of a contiguous split: the causal diagonal and 3 full blocks, cp − ½ = 3.5 block units
    assert off.attention.seq_len == 256 and off.attention.published_flops(off.flops) == 3 * f0
    assert sum(k.attention.published_flops(k.flops) for k in (diag, off)) == 3.5 * f0


def test_ring_step_rates_for_the_256k_row_by_hand():
    """Llama 3 8B at 262,144 tokens on cp 8, one H100 at full clock: the diagonal 32k block causal at the FA3
    paper's FA2 335 TFLOP/s, seven 32k × 16k blocks without mask at 370 [src: fa3-paper]."""
    device = load_cluster("dgx-h100").device
    rows = layer_times(LLAMA.with_seq(262144), device, 1, context=ContextSplit(8))
    fwd = sum(r.time_s for r in rows if r.op is OpKind.ATTENTION and r.phase is Phase.FWD)
    f0_causal = 4.0 * 32768**2 * 4096 / 2            # 8.796e12 computed on the diagonal
    hand = f0_causal / 335e12 + 7 * f0_causal / 370e12
    assert fwd == pytest.approx(hand, rel=1e-9)      # 192.7 ms (one causal kernel over all: 210.1 ms)


def test_torch_ring_bytes_by_hand():
    o, kv = 32768 * 4096, 32768 * 1024               # the 256k row's rank: output and K (or V) elements
    # compiled: 7 merges of 8 + e per output element, one K/V cat 2e per 2·KV
    fwd, bwd = torch_ring_bytes(o, kv, 8, 2, KernelFusion.COMPILED)
    assert fwd == 7 * 10 * o + 4 * 2 * kv == 9_663_676_416
    # 8 fp32 sums of dQ, dK, dV (8 + e), one K/V cat, the final dK/dV cast 4 + e
    assert bwd == 8 * 10 * (o + 2 * kv) + 4 * 2 * kv + 6 * 2 * kv == 16_777_216_000
    fwd, bwd = torch_ring_bytes(o, kv, 8, 2, KernelFusion.EAGER)
    # eager: 7 merges of 36 + e, step 0's upcast and the final cast, a K/V cat before each of the 7 hand-ons
    assert fwd == 7 * 38 * o + 12 * o + 7 * 4 * 2 * kv == 39_191_576_576
    assert bwd == 8 * (10 * (o + 2 * kv) + 8 * 2 * kv) + 7 * 4 * 2 * kv + 10 * (o + 2 * kv) == 24_293_408_768


def test_torch_merges_only_on_torch_rings():
    def extra(context):
        work = next(w for w in layer_work(LLAMA, 1, 8192, context=context) if w.op is OpKind.ATTENTION)
        return [k.name for k in work.fwd + work.bwd if not k.attention and not k.gemm]
    assert extra(ContextSplit(2, runtime=RingRuntime.TORCH)) == ["ring_merge", "ring_grad_sum"]
    assert extra(ContextSplit(2)) == []                                  # Transformer Engine's p2p
    assert extra(ContextSplit(2, ContextKind.ALL_TO_ALL, runtime=RingRuntime.TORCH)) == []
    torch_fsdp = strategy_from_flat(dict(global_batch=2, cp=2, zero=3, framework="fsdp2"))
    megatron = strategy_from_flat(dict(global_batch=2, cp=2, framework="megatron"))
    assert torch_fsdp.context.runtime is RingRuntime.TORCH and megatron.context.runtime is RingRuntime.FUSED


def test_torch_ring_hands_on_fp32_gradients_and_waits_for_the_last():
    """cp 2 on one DGX H100, torch DDP: backward moves K, V in bf16 and dK, dV in fp32 per step, and the last dK,
    dV hand-on (2·4096·1024·4 B) is waited for after the loop, exposed."""
    cluster = load_cluster("dgx-h100")
    work = compile_step(cluster, LLAMA.with_seq(8192), strategy_from_flat(dict(global_batch=8, cp=2)), memory=False)
    back = next(c for c in work.stages[0].chunks[0].tp_bwd if c.kind is CommKind.CP)
    block = 2 * 4096 * 1024 * 2
    step, last = block * 6 // 2, 2 * 4096 * 1024 * 4
    assert back.nbytes == step + last == 83_886_080
    cache = CostCache(cluster)
    rows = layer_times(LLAMA.with_seq(8192), cluster.device, 1, context=work.strategy.context)
    attn_b = sum(r.time_s for r in rows if r.op is OpKind.ATTENTION and r.phase is Phase.BWD)
    send = max(cache.p2p(0, 1, step), cache.p2p(1, 0, step))
    assert ring_exposed_s(send, attn_b, 2) == 0.0                       # NVLink hides the per-step hand-on
    assert back.time_s == pytest.approx(max(cache.p2p(0, 1, last), cache.p2p(1, 0, last)), rel=1e-12)
