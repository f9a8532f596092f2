"""The runtime's own memory and the frameworks' buffers, byte by byte against their sources
(simulator/memory/runtime.py, buffers.py, activations.loss_working_bytes; docs/sources.md keys in each test)."""

import pytest

from simulator.cluster.io import load_cluster
from simulator.memory import memory_report
from simulator.memory.activations import loss_working_bytes
from simulator.memory.runtime import (ALLOCATOR_FRAGMENTATION_FRACTION, CUDA_CONTEXT_BYTES, NCCL_CHANNELS,
                                      cublas_workspace_bytes, nccl_buffer_bytes, nccl_peers)
from simulator.profiles import apply_profile
from simulator.strategy import Framework, Strategy, ZeroStage, build_layout
from simulator.strategy.sync import ParamServerSync
from simulator.workload import DtypePolicy, get_preset
from memory_layouts import layout_of, report_of

MiB = 1024**2


@pytest.mark.parametrize("cluster, expected", [
    ("dgx-h100", 4096 * 8 * 1024 + 1024 * 1024),               # sm90: 32 MiB + cuBLASLt 1 MiB = 34,603,008
    ("hgx-h200", 4096 * 8 * 1024 + 1024 * 1024),
    ("dgx-a100", 4096 * 1024 * 2 + 16 * 1024 * 8 + 1024 * 1024),  # :4096:2:16:8 = 8,519,680 + 1 MiB = 9,568,256
    ("dgx-b200", 4096 * 1024 * 2 + 16 * 1024 * 8 + 1024 * 1024),  # PyTorch tests major == 9 && minor == 0 only
    ("localhost-cpu", 0),                                         # no CUDA
])
def test_cublas_workspaces_as_pytorch_sets_them(cluster, expected):
    """aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize / parseCUDABlasLtWorkspaceSize
    [src: torch-cublas-workspace]."""
    assert cublas_workspace_bytes(load_cluster(cluster).device) == expected


def test_nccl_connection_is_the_three_protocol_buffers():
    """Per connection: Simple NCCL_BUFFSIZE 4 MiB, LL 8·512·8·16 = 524,288, LL128 120·640·8·8 = 4,915,200
    bytes: 9,633,792 [src: nccl-env, nccl-buffsizes]; one per channel and peer."""
    spec = get_preset("gpt3-1.3b")
    layout = layout_of(spec, dp=2, tp=2, pp=2, microbatches=2)
    assert nccl_peers(layout) == 1 + 1 + 2  # dp ring, tp ring, previous and next stage
    a100 = load_cluster("dgx-a100").device
    assert nccl_buffer_bytes(a100, layout) == 4 * NCCL_CHANNELS * 9_633_792
    assert nccl_buffer_bytes(a100, layout_of(spec)) == 0  # one GPU: no communicator
    assert nccl_buffer_bytes(load_cluster("localhost-cpu").device, layout) == 0  # gloo


@pytest.mark.parametrize("dtype, per_logit", [(DtypePolicy.BF16_MIXED, 8), (DtypePolicy.FP32, 8)])
def test_loss_working_set_of_the_eager_cross_entropy(dtype, per_logit):
    """llama2-7b, s = 4096, b = 1, V = 32000. Forward: the 16-bit logits and their fp32 copy, 2 + 4 B per
    logit (4 in fp32, where .float() is the same tensor); backward: nll_loss_backward's dense fp32
    gradient and log_softmax's fp32 gradient of the logits, alive together: 8 B, the larger:
    4096 · 32000 · 8 = 1,048,576,000 bytes [src: torch-autograd]. tp = 2: ceil(V/2) logits."""
    from dataclasses import replace
    spec = replace(get_preset("llama2-7b"), dtype=dtype)
    eager = Framework.DEEPSPEED  # cross_entropy(logits.float()); torch DDP's autocast path: tests/test_amp_memory.py
    assert loss_working_bytes(spec, seq=4096, mbs=1, framework=eager) == 4096 * 32000 * per_logit
    assert loss_working_bytes(spec, seq=4096, mbs=2, tp=2, framework=eager) == 2 * 4096 * 16000 * per_logit


def test_report_puts_each_runtime_term_where_torch_reports_it():
    """allocated = states + activations + buffers + cuBLAS; reserved = allocated + 10 % (assumed) of the
    transient bytes; device total = reserved + CUDA context + NCCL (outside the caching allocator)."""
    spec = get_preset("llama2-7b")
    w = report_of(spec, dp=8, zero=ZeroStage.ZERO3, seq=4096).worst
    states = w.params_bytes + w.grads_bytes + w.optimizer_bytes
    assert w.allocated_bytes == states + w.activations_bytes + w.buffers_bytes + 9_568_256
    transient = w.activations_bytes + w.buffers_bytes
    assert w.reserved_bytes == pytest.approx(w.allocated_bytes + ALLOCATOR_FRAGMENTATION_FRACTION * transient)
    assert w.total_bytes == pytest.approx(w.reserved_bytes + CUDA_CONTEXT_BYTES + NCCL_CHANNELS * 9_633_792)
    act = w.activations
    assert act.loss_working_bytes == 4096 * 32000 * 8
    assert act.gpu_bytes == act.blocks_bytes + act.embedding_bytes + act.head_bytes + act.loss_working_bytes


def test_cpu_cluster_has_no_cuda_runtime():
    spec = get_preset("gpt3-125m")
    w = report_of(spec, load_cluster("localhost-cpu"), dp=2).worst
    assert w.runtime_total_bytes == 0 and w.total_bytes == w.allocated_bytes


def test_parameter_server_counts_no_ddp_buckets():
    """A parameter server (ZeRO 0, torch) pushes gradients as they are; an all-reduce counts DDP's copy."""
    spec = get_preset("gpt3-125m")
    cluster = load_cluster("dgx-a100")
    ps = memory_report(spec, cluster, build_layout(Strategy(global_batch=8, dp_sync=ParamServerSync()), cluster, spec))
    ddp = memory_report(spec, cluster, build_layout(Strategy(global_batch=8), cluster, spec))
    assert ps.worst.buffers.grad_buckets_bytes == 0
    assert ddp.worst.buffers.grad_buckets_bytes == spec.params * 4  # fp32 gradients under autocast


@pytest.mark.parametrize("profile, zero, overlap, expected", [
    ("deepspeed", ZeroStage.ZERO2, False, 500_000_000 * 2),       # reduce_bucket_size 5e8, bf16, overlap_comm off
    ("deepspeed", ZeroStage.ZERO2, True, 2 * 500_000_000 * 2),    # overlap_comm: two buffers
    ("deepspeed", ZeroStage.ZERO3, True, 500_000_000 * 2),        # stage 3: one
])
def test_deepspeed_buffers_come_from_the_strategy(profile, zero, overlap, expected):
    """The report sizes DeepSpeed's reduce buffers from the strategy's bucket_params (the deepspeed
    profile's 5e8 elements [src: deepspeed-config]) and overlap flag [src: deepspeed-zero-ipg]."""
    spec = get_preset("llama2-7b")
    cluster = load_cluster("dgx-a100")
    s = apply_profile(profile, global_batch=8, zero=zero, overlap_grad_reduce=overlap)
    w = memory_report(spec, cluster, build_layout(s, cluster, spec)).worst
    assert w.buffers.grad_buckets_bytes == expected
    small = apply_profile(profile, global_batch=8, zero=zero, overlap_grad_reduce=overlap, bucket_params=10**6)
    w = memory_report(spec, cluster, build_layout(small, cluster, spec)).worst
    assert w.buffers.grad_buckets_bytes == expected // 500


# --- Megatron-LM ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, zero0, zero1_d4", [
    (DtypePolicy.BF16_MIXED, 18, 6 + 12 / 4),   # bf16 param, fp32 grads
    (DtypePolicy.FP16_MIXED, 20, 4 + 16 / 4),   # fp16 param, fp16 grads (+ fp32 main grads in the optimizer)
    (DtypePolicy.FP32, 16, 8 + 8 / 4),          # fp32 param, fp32 grads
])
def test_megatron_bytes_per_parameter_table(dtype, zero0, zero1_d4):
    """Megatron-LM's distributed-optimizer table, bytes per parameter: non-distributed / distributed
    over d = 4 [src: megatron-distopt]; 1000 parameters, exact."""
    from simulator.memory import Framework, model_state_bytes
    shapes = [("w", (1000,))]
    z0 = model_state_bytes(shapes, dp=4, zero=ZeroStage.ZERO0, dtype=dtype, framework=Framework.MEGATRON)
    z1 = model_state_bytes(shapes, dp=4, zero=ZeroStage.ZERO1, dtype=dtype, framework=Framework.MEGATRON)
    assert z0.total_bytes == zero0 * 1000 and z1.total_bytes == zero1_d4 * 1000
    assert z0.optimizer_step_bytes == 0


def test_megatron_buckets_are_views_and_its_loss_works_in_place():
    """No bucket bytes (views into main_grad); the vocab-parallel cross-entropy adds only the 16-bit logits
    or their gradient's cast: 2 B per logit in bf16 (eager torch: 8) [src: megatron-cross-entropy]."""
    from simulator.memory import Framework, buffer_bytes
    b = buffer_bytes(local_params=1000, largest_block=1, zero=ZeroStage.ZERO1, dtype=DtypePolicy.BF16_MIXED,
                     framework=Framework.MEGATRON, bucket_elements=100, overlap_grad_reduce=True)
    assert b.total_bytes == 0
    spec = get_preset("llama2-7b")
    assert loss_working_bytes(spec, seq=4096, mbs=1, framework=Framework.MEGATRON) == 4096 * 32000 * 2
    s = apply_profile("megatron", global_batch=8, tp=2)
    cluster = load_cluster("dgx-a100")
    w = memory_report(spec.with_seq(4096), cluster, build_layout(s, cluster, spec)).worst
    assert w.activations.loss_working_bytes == 4096 * 16000 * 2
    assert w.buffers.grad_buckets_bytes == 0
    assert w.grads_bytes == 2 * w.params_bytes  # fp32 main grads of every local bf16 parameter (not sharded)


def test_megatron_refuses_zero_2_and_3():
    from simulator.errors import SpecError
    with pytest.raises(SpecError) as err:
        apply_profile("megatron", global_batch=8, zero=3)
    assert err.value.field == "framework" and "megatron does not implement ZeRO-3" in err.value.problem
