"""Framework profiles: named sets of strategy defaults, each value with its source.

A profile answers "what would framework X do on this cluster?": it sets defaults only, and every
field stays overridable (``apply_profile("horovod", global_batch=512, bucket_bytes="64MiB")``).
Keys are the flat strategy keys of :mod:`simulator.strategy.flat`. A value marked
"(assumption)" is a common recipe choice rather than the library's own default; "(unverified)"
means the number could not be confirmed in the framework's documentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import SpecError
from simulator.workload.kinds import KernelFusion
from simulator.schedules import ScheduleKind
from simulator.strategy.flat import strategy_from_flat_with_profile
from simulator.strategy.framework import Framework
from simulator.strategy.spec import PlacementOrder, Strategy, ZeroStage
from simulator.strategy.sync import DDP_BUCKET_CAP_BYTES, AllReduceAlgorithm, DpSyncKind, ParamServerMode
from simulator.bucket_defaults import (DEEPSPEED_ALLGATHER_BUCKET_ELEMENTS, DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
                                        HOROVOD_FUSION_THRESHOLD_BYTES, MEGATRON_BUCKET_PARAMS)


@dataclass(frozen=True)
class Default:
    """One default value and where it comes from."""

    value: object
    source: str


@dataclass(frozen=True)
class Profile:
    """A framework's strategy defaults."""

    name: str
    framework: str
    description: str
    defaults: dict[str, Default]

    def values(self) -> dict[str, object]:
        return {key: d.value for key, d in self.defaults.items()}


_DDP_DOC = "torch.nn.parallel.DistributedDataParallel docs (bucket_cap_mb=25); Li et al. VLDB 2020 §3.2"
_NCCL_AUTO = "the library calls ncclAllReduce, and NCCL's tuner picks ring or tree per size"

PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("ddp", "PyTorch DDP", "DistributedDataParallel: bucketed all-reduce overlapped with backward", {
        "dp_sync": Default(DpSyncKind.ALL_REDUCE, _DDP_DOC),
        "allreduce_algorithm": Default(AllReduceAlgorithm.AUTO, _NCCL_AUTO),
        "bucket_bytes": Default(DDP_BUCKET_CAP_BYTES, _DDP_DOC + "; MB means MiB in torch (bucket_cap_mb·1024·1024)"),
        "overlap_grad_reduce": Default(True, "Li et al. VLDB 2020 §3.2.3: a bucket's all-reduce is launched from "
                                       "autograd hooks as soon as it is full"),
        "zero": Default(ZeroStage.ZERO0, "DDP replicates parameters, gradients and optimizer state"),
    }),
    Profile("horovod", "Horovod", "Tensor Fusion: ready tensors fused every cycle into one buffer", {
        "dp_sync": Default(DpSyncKind.ALL_REDUCE, "Horovod docs: ring all-reduce via NCCL/MPI"),
        "allreduce_algorithm": Default(AllReduceAlgorithm.AUTO, "HOROVOD_HIERARCHICAL_ALLREDUCE is off by default "
                                       "(horovodrun --hierarchical-allreduce turns it on; set this to hierarchical "
                                       "to model it); then " + _NCCL_AUTO),
        "bucket_bytes": Default(HOROVOD_FUSION_THRESHOLD_BYTES, "HOROVOD_FUSION_THRESHOLD default 128 MB since v0.21.0 (release notes, "
                                "PR #2468; the docs' Tensor Fusion page gives the older 64 MB)"),
        "fusion_cycle_s": Default(1e-3, "HOROVOD_CYCLE_TIME default 1 ms since v0.21.0 (was 5 ms), release notes"),
        "overlap_grad_reduce": Default(True, "Horovod docs, Tensor Fusion: tensors are reduced as they become ready "
                                       "during backward"),
        "zero": Default(ZeroStage.ZERO0, "Horovod replicates model states"),
    }),
    Profile("deepspeed", "DeepSpeed", "ZeRO data parallelism with element-count buckets", {
        "dp_sync": Default(DpSyncKind.ALL_REDUCE, "DeepSpeed config docs: zero_optimization"),
        "zero": Default(ZeroStage.ZERO2, "(assumption) the ZeRO-2 recipe of DeepSpeed's tutorials; the library's "
                        "own zero_optimization.stage default is 0"),
        "allreduce_algorithm": Default(AllReduceAlgorithm.AUTO, _NCCL_AUTO),
        "bucket_params": Default(DEEPSPEED_REDUCE_BUCKET_ELEMENTS, "zero_optimization.reduce_bucket_size default 5e8 elements "
                                 "(DeepSpeed config docs; also the value logged by GPT-NeoX runs that leave it unset)"),
        "allgather_bucket_params": Default(DEEPSPEED_ALLGATHER_BUCKET_ELEMENTS, "zero_optimization.allgather_bucket_size default 5e8 "
                                           "elements (DeepSpeed config docs)"),
        "overlap_grad_reduce": Default(False, "zero_optimization.overlap_comm default false for stages 1-2 "
                                       "(DeepSpeed config docs; true only for stage 3)"),
    }),
    Profile("megatron", "Megatron-LM", "3-D parallelism: tp in a node, distributed optimizer, overlapped reduce", {
        "dp_sync": Default(DpSyncKind.ALL_REDUCE, "Megatron-Core DistributedDataParallel"),
        "placement": Default(PlacementOrder.TP_DP_PP, "megatron/core/parallel_state.py initialize_model_parallel "
                             "order='tp-cp-ep-dp-pp' (tp innermost, pp outermost)"),
        "schedule": Default(ScheduleKind.ONE_F_ONE_B, "forward_backward_pipelining_without_interleaving (1F1B) "
                            "unless --num-layers-per-virtual-pipeline-stage is given"),
        "sequence_parallel": Default(True, "(assumption) --sequence-parallel, as in Korthikanti et al. 2022's "
                                     "runs; off unless the flag is given"),
        "zero": Default(ZeroStage.ZERO1, "(assumption) --use-distributed-optimizer (Megatron-LM docs, "
                        "distributed optimizer: optimizer state sharded over dp); off by default"),
        "framework": Default(Framework.MEGATRON, "Megatron-Core DistributedDataParallel and DistributedOptimizer: "
                             "fp32 main_grad buffer for bf16 models, buckets as views into it (Megatron-LM "
                             "distributed-optimizer docs: 18 / 6 + 12/d bytes per parameter); ZeRO 0-1 only"),
        "allreduce_algorithm": Default(AllReduceAlgorithm.AUTO, _NCCL_AUTO),
        "bucket_params": Default(MEGATRON_BUCKET_PARAMS, "Megatron-Core DistributedDataParallelConfig.bucket_size default "
                                 "max(40e6, 1e6·dp) parameters (MCore API docs); 40e6 is exact for dp ≤ 40"),
        "overlap_grad_reduce": Default(True, "(assumption) --overlap-grad-reduce as in Megatron-LM's example "
                                       "scripts; DistributedDataParallelConfig.overlap_grad_reduce defaults to False"),
        "kernel_fusion": Default(KernelFusion.MEGATRON, "Megatron-LM's --bias-dropout-fusion and "
                                 "--masked-softmax-fusion are on unless disabled (megatron/training/arguments.py)"),
    }),
    Profile("tf-mirrored", "TensorFlow MirroredStrategy", "one-node synchronous replicas, NCCL all-reduce", {
        "dp_sync": Default(DpSyncKind.ALL_REDUCE, "tf.distribute.MirroredStrategy docs: synchronous training"),
        "allreduce_algorithm": Default(AllReduceAlgorithm.AUTO, "cross_device_ops default: NcclAllReduce when "
                                       "NCCL is available (tf.distribute.NcclAllReduce docs); then " + _NCCL_AUTO),
        "bucket_bytes": Default(None, "tf.distribute.NcclAllReduce(num_packs=1): all gradients packed into one "
                                "buffer (tf.distribute.NcclAllReduce docs)"),
        "overlap_grad_reduce": Default(False, "(assumption) Keras aggregates gradients in apply_gradients, after "
                                       "the whole backward"),
        "zero": Default(ZeroStage.ZERO0, "variables mirrored on every replica (MirroredStrategy docs)"),
    }),
    Profile("tf-multiworker", "TensorFlow MultiWorkerMirroredStrategy", "multi-node synchronous collectives", {
        "dp_sync": Default(DpSyncKind.ALL_REDUCE, "tf.distribute.MultiWorkerMirroredStrategy docs"),
        "allreduce_algorithm": Default(AllReduceAlgorithm.AUTO, "CommunicationOptions(implementation=AUTO) "
                                       "(tf.distribute.experimental.CommunicationOptions docs)"),
        "bucket_bytes": Default(None, "(unverified) CommunicationOptions(bytes_per_pack=0): TensorFlow picks the "
                                "pack size itself; modelled as one pack"),
        "overlap_grad_reduce": Default(False, "(assumption) gradients are all-reduced in apply_gradients after "
                                       "backward"),
        "zero": Default(ZeroStage.ZERO0, "variables mirrored on every replica"),
    }),
    Profile("tf-ps", "TensorFlow ParameterServerStrategy", "asynchronous workers, variables on PS tasks", {
        "dp_sync": Default(DpSyncKind.PARAM_SERVER, "tf.distribute.experimental.ParameterServerStrategy docs: "
                           "variables are created on parameter servers"),
        "ps_mode": Default(ParamServerMode.ASYNC, "same docs: by default workers read and update variables "
                           "independently (asynchronous training)"),
        "staleness_steps": Default(None, "same docs: no staleness bound"),
        "ps_shards": Default(1, "(assumption) one PS task; variables are placed round-robin over PS tasks and "
                             "split only with a variable_partitioner"),
        "ps_server_nodes": Default(1, "(assumption) PS tasks run as their own tasks in the cluster spec; one node"),
        "zero": Default(ZeroStage.ZERO0, "ZeRO does not apply to a parameter server"),
    }),
)}


def profile_names() -> list[str]:
    return list(PROFILES)


def get_profile(name: str) -> Profile:
    """The profile called ``name``; an unknown name lists the known ones."""
    if not isinstance(name, str) or name not in PROFILES:  # a list or dict is no name (and unhashable)
        raise SpecError("profile", f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name]


def apply_profile(name: str, **overrides) -> Strategy:
    """A :class:`Strategy` with ``name``'s defaults under ``overrides`` (flat keys; ``global_batch`` required)."""
    profile = get_profile(name)
    if "global_batch" not in overrides:
        raise SpecError("global_batch", "a profile sets no batch size; give global_batch")
    return strategy_from_flat_with_profile({**profile.values(), "profile": name}, overrides)
