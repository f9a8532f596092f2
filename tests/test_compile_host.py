"""Host side of a compiled step, hand-worked: CPU Adam, NVMe optimizer states, PCIe copies, data reads.

Formulas: :mod:`simulator.compile.offload_part`'s docstring (ZeRO-Offload, Ren et al. ATC'21 §4;
ZeRO-Infinity, Rajbhandari et al. SC'21 §6.1; K = 12 optimizer bytes per parameter in mixed
precision, Rajbhandari et al. SC'20 §3.1). Inputs: the dgx-a100 preset's host section (PCIe 24 GB/s,
10 µs; NVMe 50 GB/s read, 25 GB/s write; 8 GPUs per node; HBM 2039 GB/s × its
``hbm_efficiency`` 0.790) plus two test figures the preset lacks, named below. Tolerance 1e-9: each
expected value is the same arithmetic as the code, in another order.
"""

import math
from dataclasses import replace

import pytest

from simulator.analytical import estimate_work
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import CostCache, compile_step
from simulator.compile.offload_part import cpu_adam_s, data_s, fetch_slice_s, gpu_optimizer_s, nvme_s, pcie_s
from simulator.results import Category
from simulator.strategy import DataSource, InputPipeline, Offload, Strategy, ZeroStage
from simulator.workload import DtypePolicy, get_preset

CPU_ADAM_PARAMS_PER_S = 2e9
"""Test figure for the node's CPU Adam rate (the preset gives none); not a measurement."""
STORAGE_READ_GBPS = 2.0
"""Test figure for a node's storage read bandwidth (the preset gives none); not a measurement."""
PARAMS = 1_652_230_656
"""megatron-1.7b: 24 blocks × 63,730,944 + embedding 122,683,392 + final norm 4,608 (tied output)."""
PART = 103_264_416
"""One rank's ZeRO partition of PARAMS over dp = 16: ⌈1,652,230,656 / 16⌉ (exact)."""


@pytest.fixture(scope="module")
def cluster():
    base = load_preset("dgx-a100", 2)
    host = replace(base.node.host, cpu_adam_params_per_s=CPU_ADAM_PARAMS_PER_S, storage_read_GBps=STORAGE_READ_GBPS)
    return replace(base, node=replace(base.node, host=host))


@pytest.fixture(scope="module")
def model():
    return get_preset("megatron-1.7b")


def test_inputs_are_what_the_arithmetic_assumes(cluster, model):
    h = cluster.node.host
    assert (h.h2d_bw_GBps, h.h2d_latency_us, h.nvme_read_GBps, h.nvme_write_GBps) == (24, 10.0, 50, 25)
    assert cluster.node.gpus_per_node == 8 and cluster.device.hbm_bw_GBps == 2039
    assert model.params == PARAMS == 24 * 63_730_944 + 122_683_392 + 4_608
    assert PART == math.ceil(PARAMS / 16)


def test_host_helpers_hand_worked(cluster):
    """One GPU's share of the node's host resources (8 GPUs per node)."""
    # PCIe: 10 µs + 24e9 B / 24 GB/s = 1.00001 s
    assert pcie_s(cluster, 24e9) == pytest.approx(1.00001, rel=1e-12)
    # CPU Adam: 1e9 params × 8 GPUs / 2e9 params/s = 4 s
    assert cpu_adam_s(cluster, 1e9) == pytest.approx(4.0, rel=1e-12)
    # NVMe: 1e9 B × 8 GPUs / 50 GB/s = 0.16 s read; / 25 GB/s = 0.32 s write
    assert nvme_s(cluster, 1e9) == pytest.approx(0.16, rel=1e-12)
    assert nvme_s(cluster, 1e9, write=True) == pytest.approx(0.32, rel=1e-12)
    # a ZeRO-Infinity NVMe fetch reads NVMe, then crosses PCIe: 0.16 + 10 µs + 1e9/24e9
    assert fetch_slice_s(cluster, Offload.NVME, 1e9) == pytest.approx(0.16 + 1e-5 + 1 / 24, rel=1e-12)
    assert fetch_slice_s(cluster, Offload.PARAMS, 1e9) == pytest.approx(1e-5 + 1 / 24, rel=1e-12)
    # GPU Adam: 28 B/param (K 12 + grad 2 read, K 12 + weights 2 written) over the achievable 2039 × 0.790
    # GB/s (hbm_efficiency: BabelStream Copy on an A100-SXM4-80GB [src: azure-ai-bench])
    assert gpu_optimizer_s(cluster, DtypePolicy.BF16_MIXED, 1e9) == pytest.approx(28e9 / (2039e9 * 0.790), rel=1e-12)


def test_gpu_optimizer_of_a_zero1_partition(cluster, model):
    """ZeRO-1 over dp 16: Adam over PART = 103,264,416 params × 28 B / (2039 × 0.790) GB/s = 1.79500 ms."""
    st = compile_step(cluster, model, Strategy(global_batch=16, zero=ZeroStage.ZERO1), memory=False).stages[0]
    assert st.optimizer_s == pytest.approx(PART * 28 / (2039e9 * 0.790), rel=1e-9)


def test_nvme_optimizer_reads_and_writes_the_states(cluster, model):
    """ZeRO-Infinity with NVMe offload (ZeRO-3, dp 16), per rank over PART = 103,264,416 params:
    CPU Adam   PART × 8 GPUs / 2e9            = 0.413057664 s
    NVMe read  PART × 12 B × 8 GPUs / 50 GB/s = 0.19826767872 s
    NVMe write PART × 12 B × 8 GPUs / 25 GB/s = 0.39653535744 s
    optimizer_s = 1.00786070016 s. Gradients out over PCIe first: 10 µs + PART × 2 B / 24 GB/s = 8.615368 ms."""
    s = Strategy(global_batch=16, zero=ZeroStage.ZERO3, offload=Offload.NVME)
    st = compile_step(cluster, model, s, memory=False).stages[0]
    assert st.optimizer_s == pytest.approx(0.413057664 + 0.19826767872 + 0.39653535744, rel=1e-9)
    assert st.optimizer_s == pytest.approx(1.00786070016, rel=1e-9)
    d2h = st.grad_sync[-1]
    assert d2h.op is Op.SEND_RECV and d2h.time_s == pytest.approx(8.615368e-3, rel=1e-9)
    assert st.after_step == ()  # ZeRO-3 keeps no all-gather after the step


def test_params_offload_has_no_nvme_traffic(cluster, model):
    """offload params (host memory, ZeRO-3): CPU Adam only, 0.413057664 s (the NVMe terms above are absent)."""
    s = Strategy(global_batch=16, zero=ZeroStage.ZERO3, offload=Offload.PARAMS)
    st = compile_step(cluster, model, s, memory=False).stages[0]
    assert st.optimizer_s == pytest.approx(0.413057664, rel=1e-9)


def test_nvme_parameter_fetch_adds_the_nvme_read(cluster, model):
    """ZeRO-Infinity fetch of one block (63,730,944 params × 2 B = 127,461,888 B) over dp 16: each rank brings
    its slice of 7,966,368 B from NVMe (× 8 GPUs / 50 GB/s = 1.27461888 ms) and over PCIe (10 µs + slice /
    24 GB/s = 0.341932 ms), then the block is all-gathered (the collective's own cost model)."""
    s = Strategy(global_batch=16, zero=ZeroStage.ZERO3, offload=Offload.NVME)
    cache = CostCache(cluster)
    work = compile_step(cluster, model, s, cache=cache, memory=False)
    block = work.stages[0].chunks[0].zero_fwd[1]
    gather_s, _ = cache.collective(block.group, Op.ALL_GATHER, 127_461_888)
    assert block.nbytes == 127_461_888
    assert block.time_s - gather_s == pytest.approx(1.27461888e-3 + 0.341932e-3, rel=1e-9)


def test_data_read_time_hand_worked(cluster, model):
    """Each node reads its share of the step: 1 MB/sample × 16 samples / 2 nodes = 8 MB at 2 GB/s = 4 ms.
    Shared storage capped at 2 GB/s for both nodes gives each 1 GB/s: 8 ms."""
    local = InputPipeline(bytes_per_sample=1_000_000)
    s = Strategy(global_batch=16, input=local)
    assert data_s(cluster, s, 16) == pytest.approx(4e-3, rel=1e-12)
    assert compile_step(cluster, model, s, memory=False).stages[0].data_s == pytest.approx(4e-3, rel=1e-12)
    shared = InputPipeline(bytes_per_sample=1_000_000, source=DataSource.SHARED, shared_storage_GBps=2.0)
    assert data_s(cluster, Strategy(global_batch=16, input=shared), 16) == pytest.approx(8e-3, rel=1e-12)
    synthetic = InputPipeline(bytes_per_sample=1_000_000, source=DataSource.SYNTHETIC)
    assert data_s(cluster, Strategy(global_batch=16, input=synthetic), 16) == 0.0


def test_unprefetched_data_read_adds_to_the_step(cluster, model):
    """prefetch_batches 0: the step waits for its own read (analytical_formula: stall = data), so the step
    is the same step without input plus 4 ms (the read above), and DATA shows 4 ms."""
    base = Strategy(global_batch=16)
    waited = Strategy(global_batch=16, input=InputPipeline(bytes_per_sample=1_000_000, prefetch_batches=0))
    t0 = estimate_work(compile_step(cluster, model, base, memory=False)).step_time_s
    r = estimate_work(compile_step(cluster, model, waited, memory=False))
    assert r.step_time_s == pytest.approx(t0 + 4e-3, rel=1e-9)
    assert r.breakdown[Category.DATA] == pytest.approx(4e-3, rel=1e-9)


def test_a_job_smaller_than_a_node_shares_the_host_among_its_own_gpus(cluster):
    """A 2-GPU job on an 8-GPU node: its ranks share the CPU and NVMe between 2 GPUs, not 8."""
    from simulator.compile.offload_part import gpus_on_node
    assert gpus_on_node(cluster, 2) == 2 and gpus_on_node(cluster, 64) == 8
    # CPU Adam: 1e9 params × 2 GPUs / 2e9 params/s = 1 s (4 s when all 8 GPUs share the node)
    assert cpu_adam_s(cluster, 1e9, sharing=2) == pytest.approx(1.0, rel=1e-12)
    # NVMe read: 1e9 B × 2 GPUs / 50 GB/s = 0.04 s
    assert nvme_s(cluster, 1e9, sharing=2) == pytest.approx(0.04, rel=1e-12)
    assert fetch_slice_s(cluster, Offload.NVME, 1e9, sharing=2) == pytest.approx(0.04 + 1e-5 + 1 / 24, rel=1e-12)


def test_a_two_gpu_offload_job_charges_cpu_adam_for_two_gpus(cluster, model):
    """offload params on 2 GPUs of an 8-GPU node, ZeRO-3 dp 2: each rank's PARAMS/2 parameters at
    the node's 2e9 params/s shared by 2 GPUs — a quarter of what the 8-way share charged before."""
    from simulator.strategy.layout import build_layout
    s = Strategy(global_batch=16, zero=ZeroStage.ZERO3, offload=Offload.PARAMS)
    layout = build_layout(s, cluster, model, gpus=2)
    st = compile_step(cluster, model, s, memory=False, layout=layout).stages[0]
    assert st.optimizer_s == pytest.approx(math.ceil(PARAMS / 2) * 2 / 2e9, rel=1e-9)
