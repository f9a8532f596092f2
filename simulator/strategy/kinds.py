"""The choices a strategy is made of, as enums with a docstring per member."""

from __future__ import annotations

from enum import IntEnum

from simulator.checks import enum_member
from simulator.enum_kind import Kind
from simulator.errors import SpecError


class ZeroStage(IntEnum):
    """Which model states are partitioned over the data-parallel ranks (Rajbhandari et al. SC'20)."""

    ZERO0 = 0
    """Plain data parallelism (DDP): every rank holds all parameters, gradients, optimizer states."""
    ZERO1 = 1
    """P_os: optimizer states partitioned."""
    ZERO2 = 2
    """P_os+g: optimizer states and gradients partitioned."""
    ZERO3 = 3
    """P_os+g+p: optimizer states, gradients and parameters partitioned (FSDP's full sharding)."""

    @classmethod
    def parse(cls, text: str) -> "ZeroStage":
        """``"2"``, ``"zero2"``, ``"zero-2"`` or ``"ZERO2"`` → ZERO2."""
        stage = str(text).lower().removeprefix("zero").removeprefix("-")
        if stage in ("0", "1", "2", "3"):
            return cls(int(stage))
        raise SpecError("zero", f"unknown ZeRO stage {text!r}; use 0, 1, 2 or 3")


class Offload(Kind):
    """Where model states live outside GPU memory (DeepSpeed ZeRO-Offload / ZeRO-Infinity)."""

    NONE = "none"
    """Everything on the GPU."""
    OPTIMIZER = "optimizer"
    """ZeRO-Offload (Ren et al. ATC'21): fp32 optimizer states and fp32 gradient partitions in host
    memory, the Adam step on the CPU; needs ZeRO >= 1."""
    PARAMS = "params"
    """ZeRO-3 offload: the optimizer offload plus the 16-bit parameter partitions in host memory;
    the GPU holds only the layers gathered for compute. Needs ZeRO 3."""
    NVME = "nvme"
    """ZeRO-Infinity (Rajbhandari et al. SC'21): parameter and optimizer partitions on NVMe, fp32
    gradient partitions and staging buffers in host memory. Needs ZeRO 3."""


class PlacementOrder(Kind):
    """Order in which the parallel dimensions fill consecutive ranks, innermost first.

    Ranks fill a node before the next (``Cluster.place``), so the innermost dimension's groups
    share a node when their size divides ``gpus_per_node``.
    """

    TP_PP_DP = "tp-pp-dp"
    """tp innermost (same node, fastest links), then pp, then dp outermost. Default."""
    TP_DP_PP = "tp-dp-pp"
    """tp innermost, then dp, pp outermost: Megatron-LM's default order ``tp-cp-ep-dp-pp``."""
    PP_TP_DP = "pp-tp-dp"
    """pp innermost, then tp, then dp."""
    PP_DP_TP = "pp-dp-tp"
    """pp innermost, then dp, then tp."""
    DP_TP_PP = "dp-tp-pp"
    """dp innermost, then tp, then pp."""
    DP_PP_TP = "dp-pp-tp"
    """dp innermost, then pp, tp outermost."""

    @property
    def dims(self) -> tuple[str, str, str]:
        """The three dimension names, innermost first (split once per member: a search asks ~40k times)."""
        return _PLACEMENT_DIMS[self]

    @classmethod
    def parse(cls, text: str) -> "PlacementOrder":
        return enum_member(cls, text, "placement", "order", lambda t: t.lower().replace(",", "-").replace("_", "-"))


_PLACEMENT_DIMS = {order: tuple(order.value.split("-")) for order in PlacementOrder}


class AttentionKind(Kind):
    """How the attention core (scores QKᵀ, softmax, A·V) is computed, which sets both its time and
    the activations it keeps for backward."""

    FLASH = "flash"
    """FlashAttention / torch SDPA (Dao et al. 2022): one fused kernel; the s×s scores are never
    materialised in device memory, only a log-sum-exp per row is kept, and backward recomputes the
    scores inside its own kernel. Default (what current frameworks use)."""
    EAGER = "eager"
    """Scores and softmax materialised as separate kernels and kept for backward, as in Megatron-LM
    (Narayanan et al. SC'21) and Korthikanti et al. 2022's activation count (the 5as/h term)."""


class DataSource(Kind):
    """Where training samples are read from."""

    SYNTHETIC = "synthetic"
    """Generated in memory: no input cost (benchmarks)."""
    LOCAL = "local"
    """Node-local disk at the node's ``host.storage_read_GBps``."""
    SHARED = "shared"
    """A shared file system: each node at ``host.storage_read_GBps``, all nodes together capped at
    ``shared_storage_GBps`` when given."""


class OptimizerImpl(Kind):
    """How the Adam(W) update runs on the GPU: one fused kernel, or torch's unfused implementations whose
    every operator is a pass over a parameter-sized tensor (:func:`simulator.compile.offload_part.adam_bytes_per_param`
    counts the bytes; :mod:`simulator.host_overhead` the host calls). The names are torch's and torchtitan's
    (``implementation: "for-loop" | "foreach" | "fused"``) [src: torchtitan-optimizer-impl]."""

    FUSED = "fused"
    """One kernel reads and writes each state once: ``torch.optim.AdamW(fused=True)``, apex/Transformer
    Engine ``FusedAdam`` (Megatron-LM), DeepSpeed's ``FusedAdam``."""
    FOREACH = "foreach"
    """torch's ``_multi_tensor_adam``: one ``torch._foreach_*`` call per operator over all tensors of a
    device and dtype, each a pass over the states; torch's default where every parameter is on a device with
    foreach kernels (CUDA) [src: torch-adam-impl]."""
    FOR_LOOP = "for-loop"
    """torch's ``_single_tensor_adam``: the same operators as foreach, issued tensor by tensor; torch's
    default on the CPU [src: torch-adam-impl]."""


class MixedPrecision(Kind):
    """How a bf16/fp16 model's mixed precision is implemented, which decides the casts and fp32 traffic around
    its kernels (:mod:`simulator.workload.autocast`); nothing for an fp32 model."""

    AUTOCAST = "autocast"
    """``torch.autocast`` around a model whose parameters stay fp32 (PyTorch's AMP recipe
    [src: torch-amp-autocast]): every linear casts its weight and input to bf16, norms run in fp32 on an fp32
    residual stream."""
    PARAM_DTYPE = "param-dtype"
    """The parameters the forward uses are held in the compute format: Megatron-LM's ``Float16Module``
    (``--bf16``), DeepSpeed's bf16/fp16 engine, FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16)``
    (torchtitan); the fp32 master copy lives in the optimizer, and the forward runs in bf16 without casts."""


class GradReduceDtype(Kind):
    """The format a bf16/fp16 model's gradients are reduced in over the data-parallel ranks (all-reduce or
    ZeRO reduce-scatter): Megatron-Core's ``grad_reduce_in_fp32``, torchtitan's ``mixed_precision_reduce``,
    DeepSpeed's ``communication_data_type``. Nothing for an fp32 model, or under ``autocast`` (its gradients
    are fp32 already)."""

    FP32 = "fp32"
    """Gradients accumulated and reduced in fp32: twice the bytes of 16-bit ones on the wire."""
    PARAM_DTYPE = "param-dtype"
    """Gradients reduced in the parameters' own format (bf16 or fp16 under ``param-dtype`` mixed precision)."""
