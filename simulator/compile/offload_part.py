"""Host side of a compiled step: the optimizer, ZeRO-Offload / ZeRO-Infinity copies, data loading.

- GPU optimizer: Adam is memory-bound (a few FLOPs per byte), so its time is one pass over the
  states at HBM speed: it reads the optimizer states K, the gradient and (without a separate
  master copy) the weights, and writes K and the weights —
  ``(K + g + [p]) + (K + p)`` bytes per parameter, 28 in bf16 mixed precision and in fp32
  (K from :func:`simulator.memory.optimizer_bytes_per_param`) with a fused Adam kernel (apex/TE/DeepSpeed
  FusedAdam, torch ``fused=True``) reaching the compute model's HBM efficiency; torch's unfused AdamW
  (foreach, for-loop: the torch frameworks' default) makes :data:`UNFUSED_ADAMW_PASSES` fp32 passes instead
  (:class:`~simulator.strategy.kinds.OptimizerImpl`).
- ZeRO-Offload (Ren et al. ATC'21 §4): after the gradients are reduced, each rank copies its
  gradient partition to the host over PCIe, the CPU runs Adam at the node's
  ``cpu_adam_params_per_s`` shared by the node's GPUs, the updated 16-bit parameters come back
  over PCIe and are all-gathered (ZeRO-1/2). We run these one after another (DeepSpeed overlaps
  the copies with the reduction and the CPU step in chunks: our figure is an upper bound on the
  exposed part; the one-step delayed update is not modelled).
- ZeRO-3 with offloaded parameters: each block is fetched from host memory before forward and
  backward, one of two ways (:class:`ParamFetch`). OWNER_BROADCAST: the rank owning the block
  copies it over its own PCIe link and broadcasts it, ``L/B_pcie + broadcast(L)`` — one link
  carries the whole block whatever dp is. INFINITY (ZeRO-Infinity, Rajbhandari et al. SC'21 §6.1
  "bandwidth-centric partitioning"): every rank copies its 1/dp slice in parallel and the slices
  are all-gathered, ``L/(dp·B_pcie) + all_gather(L)`` — the aggregate PCIe bandwidth grows with dp.
  NVMe offload reads the slice at the node's NVMe bandwidth shared by its GPUs (slower of the two).
- Data: each node reads its share of the step's samples (the global batch spread evenly over the
  nodes in use, an assumption: in Megatron only first/last stages read tokens and labels) at the
  node's ``storage_read_GBps``; shared storage caps all nodes together at ``shared_storage_GBps``.
"""

from __future__ import annotations

import math

from simulator.cluster.spec import Cluster, Device, KernelDispatch
from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.memory import optimizer_bytes_per_param
from simulator.strategy import DataSource, Offload, Strategy
from simulator.strategy.kinds import OptimizerImpl
from simulator.compute import achievable_hbm_Bps
from simulator.workload import DtypePolicy


class ParamFetch(Kind):
    """How offloaded ZeRO-3 parameters reach the GPUs (see the module docstring)."""

    INFINITY = "infinity"
    """Every rank copies its partition over its own PCIe link, then all-gather (ZeRO-Infinity)."""
    OWNER_BROADCAST = "owner-broadcast"
    """The owner copies the whole block over one PCIe link, then broadcasts it."""


UNFUSED_ADAMW_PASSES = 20
"""Parameter-sized tensors read or written by one step of torch's unfused AdamW (``_multi_tensor_adam`` and
``_single_tensor_adam`` alike; decoupled weight decay, not capturable, no amsgrad) [src: torch-adam-impl],
operator by operator: ``param.mul_`` (weight decay: read p, write p) 2, ``exp_avg.lerp_(grad)`` (m, g → m) 3,
``exp_avg_sq.mul_`` 2, ``.addcmul_(grad, grad)`` (v, g → v) 3, ``sqrt(exp_avg_sq)`` (v → t) 2, ``/ bc2_sqrt``
2, ``.add_(eps)`` 2, ``param.addcdiv_(exp_avg, t)`` (p, m, t → p) 4. Every one is fp32: torch's AdamW steps
the fp32 parameters that autocast and FSDP2's mixed precision keep, with states and temporaries like them."""
UNFUSED_ADAMW_ELEMENT_BYTES = 4
"""Bytes per element of those passes (fp32, above)."""


def adam_bytes_per_param(dtype: DtypePolicy, impl: OptimizerImpl = OptimizerImpl.FUSED) -> int:
    """Bytes of device memory one Adam update of one parameter reads and writes: a fused kernel's one
    pass over the states (module docstring), or torch's unfused passes,
    ``UNFUSED_ADAMW_PASSES · UNFUSED_ADAMW_ELEMENT_BYTES`` = 80 B (foreach and for-loop move the same bytes;
    they differ in host calls, :mod:`simulator.host_overhead`)."""
    if impl is not OptimizerImpl.FUSED:
        return UNFUSED_ADAMW_PASSES * UNFUSED_ADAMW_ELEMENT_BYTES
    k = optimizer_bytes_per_param(dtype)
    weights_read = dtype.param_bytes if dtype.master_bytes == 0 else 0
    return (k + dtype.grad_bytes + weights_read) + (k + dtype.param_bytes)


def optimizer_impl(s: Strategy, device: Device) -> OptimizerImpl:
    """The Adam(W) implementation a step runs: the strategy's ``optimizer_impl``, else its framework's default
    on ``device`` (:meth:`~simulator.strategy.framework.Framework.optimizer_impl`), where a device with
    asynchronous kernel dispatch (a GPU) has torch's foreach kernels and an inline one (the CPU) has not, the
    line :func:`simulator.host_overhead.optimizer_calls` counts host calls by."""
    return s.resolved_optimizer_impl(foreach_device=device.kernel_dispatch is not KernelDispatch.INLINE)


def gpu_optimizer_s(cluster: Cluster, dtype: DtypePolicy, params: float,
                    impl: OptimizerImpl = OptimizerImpl.FUSED) -> float:
    """Memory-bound Adam step over ``params`` parameters on one GPU, by ``impl``."""
    return params * adam_bytes_per_param(dtype, impl) / achievable_hbm_Bps(cluster.device)


def _host(cluster: Cluster, what: str):
    host = cluster.node.host
    if host is None:
        raise SpecError("host", f"{what} needs the cluster's host section (h2d_bw_GBps, cpu_adam_params_per_s); "
                        f"cluster {cluster.name!r} has none")
    return host


def pcie_s(cluster: Cluster, nbytes: float) -> float:
    """One host↔device copy on one GPU's PCIe link: latency + bytes / h2d bandwidth."""
    host = _host(cluster, "offload")
    return host.h2d_latency_us * 1e-6 + nbytes / (host.h2d_bw_GBps * 1e9)


def gpus_on_node(cluster: Cluster, world: int) -> int:
    """GPUs of one node that a job of ``world`` GPUs uses, and so share its host: a job smaller
    than a node leaves the rest of the node's CPU, NVMe and host memory bandwidth to its ranks."""
    return max(1, min(world, cluster.node.gpus_per_node))


def cpu_adam_s(cluster: Cluster, params: float, sharing: int | None = None) -> float:
    """CPU Adam over ``params`` parameters, the node's throughput shared by ``sharing`` GPUs
    (default: all of the node's GPUs; :func:`gpus_on_node` for a smaller job)."""
    host = _host(cluster, "optimizer offload")
    if host.cpu_adam_params_per_s <= 0:
        raise SpecError("host.cpu_adam_params_per_s", f"cluster {cluster.name!r} gives no CPU Adam throughput; "
                        "add it to the host section to model optimizer offload")
    return params * (sharing or cluster.node.gpus_per_node) / host.cpu_adam_params_per_s


def nvme_s(cluster: Cluster, nbytes: float, write: bool = False, sharing: int | None = None) -> float:
    """Moving ``nbytes`` between NVMe and host for one GPU, the node's bandwidth shared by
    ``sharing`` GPUs (default: all of the node's)."""
    host = _host(cluster, "NVMe offload")
    bw = host.nvme_write_GBps if write else host.nvme_read_GBps
    if bw <= 0:
        raise SpecError("host.nvme_read_GBps", f"cluster {cluster.name!r} gives no NVMe bandwidth; add it, "
                        "or offload to host memory (offload params)")
    return nbytes * (sharing or cluster.node.gpus_per_node) / (bw * 1e9)


def fetch_slice_s(cluster: Cluster, offload: Offload, nbytes: float, sharing: int | None = None) -> float:
    """Bringing ``nbytes`` of offloaded parameters to one GPU: PCIe, and NVMe first for ``nvme``."""
    t = pcie_s(cluster, nbytes)
    return t + nvme_s(cluster, nbytes, sharing=sharing) if offload is Offload.NVME else t


def data_s(cluster: Cluster, strategy: Strategy, world: int) -> float:
    """Seconds one node takes to read its share of one step's samples (0 when input is free)."""
    pipe = strategy.input
    if pipe.bytes_per_sample == 0 or pipe.source is DataSource.SYNTHETIC:
        return 0.0
    host = cluster.node.host
    nodes = max(1, math.ceil(world / cluster.node.gpus_per_node))
    bw = host.storage_read_GBps
    if pipe.source is DataSource.SHARED and pipe.shared_storage_GBps is not None:
        bw = min(bw, pipe.shared_storage_GBps / nodes)
    return pipe.bytes_per_sample * strategy.global_batch / nodes / (bw * 1e9)
