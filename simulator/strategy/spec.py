"""The strategy: how a workload is spread over a cluster, as the user asked for it.

Only what the user said, checked field by field; everything that needs the cluster or the
workload (world size, micro-batch count, layer split, rank groups, the framework in effect) is
derived and checked in :mod:`simulator.strategy.layout`, as torchtitan's ``ParallelDims``
separates requested from derived values. Each field is declared once, with its flat key, flag,
role and check (:mod:`simulator.strategy.fields`); the cross-field rules are in
:func:`simulator.strategy.combinations.check_combinations`.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass

from simulator.checks import positive_number
from simulator.errors import SpecError
from simulator.attention_efficiency import AttentionBackend
from simulator.schedules import ScheduleKind
from simulator.strategy.combinations import check_combinations
from simulator.strategy.faults import FailureModel, StragglerModel
from simulator.strategy.fields import (Flag, Role, choices_of, declare, enum_field, float_parser, int_field,
                                       int_tuple_parser, opt_enum_field, opt_pos_int, switch_field, validate)
from simulator.strategy.framework import Framework, Partitioning, resolve_framework
from simulator.strategy.input_pipeline import InputPipeline
from simulator.strategy.kinds import (AttentionKind, DataSource, GradReduceDtype, MixedPrecision, Offload, OptimizerImpl,
                                      PlacementOrder, ZeroStage)
from simulator.strategy.sync import AllReduceSync, ParamServerSync
from simulator.workload import Recompute
from simulator.workload.context import ContextKind, ContextSplit, RingRuntime, context_split
from simulator.workload.fp8 import Fp8Recipe, MatmulPrecision
from simulator.workload.kinds import KernelFusion, ModelCode
from simulator.workload.moe_routing import Dispatcher, Routing

__all__ = ["AttentionKind", "DataSource", "Framework", "InputPipeline", "Offload", "Partitioning",
           "PlacementOrder", "Strategy", "ZeroStage"]


def _at_least_one(key: str, value) -> None:
    if positive_number(key, value) < 1:
        raise SpecError(key, f"must be at least 1 (1 is balanced routing), got {value!r}")


DEFAULT_INTERLEAVED_V = 2
"""Model chunks per rank an interleaved schedule gets when none is given (the CLI) or searched (the
planner's default): a choice, not a framework default — Megatron-LM makes the user set the virtual
pipeline size [src: megatron-core]; 2 is the smallest interleaving."""


def _text(key: str, value) -> None:
    if not isinstance(value, str):
        raise SpecError(key, f"must be a name, got {value!r}")


_F = Flag
_STRUCT, _MEM = Role.STRUCTURE, Role.MEMORY


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """A parallelisation strategy as requested. :func:`simulator.strategy.build_layout` checks it
    against a cluster and a workload and derives the rest."""

    global_batch: int = int_field(MISSING, "global_batch", "Samples (sequences) per optimizer step, over all replicas",
                             _F("--gbs", "global batch, sequences per optimizer step", metavar="GB"),
                             role=Role.BATCH)
    micro_batch: int = int_field(1, "micro_batch", "Samples per micro-batch on one pipeline (one dp replica)",
                            _F("--mbs", "micro-batch size, sequences", metavar="B"))
    dp: int | None = int_field(None, "dp", "Data-parallel degree; None: whatever the GPUs leave, world ÷ (tp·pp·cp)",
                          _F("--dp", "data-parallel degree", metavar="D", default_help="GPUs ÷ (tp·pp·cp)"),
                          opt_pos_int)
    tp: int = int_field(1, "tp", "Tensor-parallel degree (Megatron-style, attention heads split)",
                   _F("--tp", "tensor-parallel degree", metavar="T"))
    pp: int = int_field(1, "pp", "Pipeline-parallel degree (ranks per pipeline)",
                   _F("--pp", "pipeline-parallel degree (stages)", metavar="P"))
    ep: int = int_field(1, "ep", "Expert-parallel degree: each MoE layer's routed experts split over ep ranks of the "
                   "data-parallel group, tokens exchanged by all-to-all (Megatron-Core, DeepSpeed-MoE); 1: every "
                   "rank holds every expert", _F("--ep", "expert-parallel degree (MoE models; divides dp)", metavar="E"))
    routing_skew: float = declare(
        1.0, key="routing_skew", role=Role.SCENARIO, parse=float_parser("routing_skew"), check=_at_least_one,
        doc="MoE load imbalance: tokens the busiest expert-parallel rank receives ÷ its balanced share (1: "
            "balanced routing); the slowest rank sets each MoE layer's time",
        flag=_F("--routing-skew", "MoE load imbalance, busiest rank ÷ balanced share (what-if)", metavar="X"))
    moe_dispatcher: Dispatcher = enum_field(Dispatcher, "moe_dispatcher", _F(
        "--moe-dispatcher", "per-expert (one copy per routed expert: Megatron-Core alltoall) or deepep (one "
        "copy per destination node, forwarded over NVLink)", choices=choices_of(Dispatcher)),
        doc="How the MoE token all-to-alls ship a token (simulator.workload.moe_routing)",
        default=Dispatcher.PER_EXPERT)
    moe_routing: Routing = enum_field(Routing, "moe_routing", _F(
        "--moe-routing", "learned (the model's gate, uniform over the experts it allows) or round-robin "
        "(AutoModel's fake balanced gate: k consecutive experts)", choices=choices_of(Routing)),
        doc="Which experts a token goes to, for the dispatch volume (simulator.workload.moe_routing)",
        default=Routing.LEARNED)
    placement: PlacementOrder = enum_field(PlacementOrder, "placement", _F("--placement", "rank order, innermost first",
                                                                      choices=choices_of(PlacementOrder),
                                                                      aliases=("--order",)),
                                      doc="Order the dimensions fill consecutive ranks", default=PlacementOrder.TP_PP_DP)
    schedule: ScheduleKind = enum_field(ScheduleKind, "schedule", _F("--schedule", "pipeline schedule",
                                                                choices=choices_of(ScheduleKind)),
                                   doc="Pipeline schedule", default=ScheduleKind.ONE_F_ONE_B)
    virtual_stages: int = int_field(1, "virtual_stages", "Model chunks per pipeline rank, v (interleaved only)",
                               _F("--virtual-stages", "model chunks per rank (interleaved only)", metavar="V",
                                  default_help="1; 2 with --schedule interleaved"))
    schedules_per_step: int = int_field(1, "schedules_per_step", "Pipeline schedules per optimizer step, each of "
                                        "m / k micro-batches with its own fill and drain (gradient accumulation "
                                        "over k schedule.step() calls, NeMo AutoModel's loop); 1: one schedule",
                                        _F("--schedules-per-step", "pipeline schedules per optimizer step", metavar="K",
                                           default_help="1"))
    layer_split: tuple[int, ...] | None = declare(
        None, key="layer_split", role=_STRUCT, parse=int_tuple_parser("layer_split"), check=None,
        doc="Layers per (virtual) stage in model order, pp·v entries; None: as even as possible",
        flag=_F("--layer-split", "layers per (virtual) stage in model order, e.g. 2,10", metavar="L1,L2,...",
                default_help="as even as possible, extra layers after the first stage"))
    sequence_parallel: bool = switch_field(False, "sequence_parallel", "Megatron sequence parallelism on the tp group "
                                      "(Korthikanti et al. 2022); a no-op at tp = 1, as in Megatron-LM", "--sp")
    cp: int = int_field(1, "cp", "Context-parallel degree: each sample's sequence split over cp ranks, weights "
                   "replicated (simulator.workload.context)", _F("--cp", "context-parallel degree", metavar="C"))
    cp_kind: ContextKind = enum_field(ContextKind, "cp_kind", _F(
        "--cp-kind", "ring (KV blocks around the cp ring, overlapped with attention) or all-to-all "
        "(DeepSpeed-Ulysses, heads split by cp)", choices=choices_of(ContextKind)),
        doc="How the attention core of a cp group exchanges tokens", default=ContextKind.RING)
    cp_balanced: bool = switch_field(True, "cp_balanced", "Causal load balancing of ring attention: the sequence in "
                                "2·cp chunks, rank r holding chunks r and 2cp−1−r (Megatron-Core, torchtitan)",
                                "--cp-balanced")
    precision: MatmulPrecision = enum_field(MatmulPrecision, "precision", _F(
        "--precision", "model (the model's own dtype) or fp8 (linear layers' GEMMs in FP8 by the framework's "
        "recipe, the rest in bf16)", choices=choices_of(MatmulPrecision)),
        doc="Format of the linear layers' GEMMs (simulator.workload.fp8)", default=MatmulPrecision.MODEL)
    fp8_recipe: Fp8Recipe | None = opt_enum_field(
        Fp8Recipe, "fp8_recipe", doc="FP8 recipe (precision fp8 only); None: the framework's (megatron: te, torch and fsdp2: torchao)",
        flag=_F("--fp8-recipe", "te (Transformer Engine, delayed scaling), torchao (float8, tensorwise dynamic "
                "scaling), torchao-rowwise (float8, rowwise dynamic scaling), te-current (TE per-tensor current "
                "scaling), te-blockwise (TE 1x128/128x128 block scaling) or te-mxfp8 (TE MXFP8, Blackwell); default: "
                "the framework's", choices=choices_of(Fp8Recipe)))
    fp8_all_gather: bool = switch_field(False, "fp8_all_gather", "FSDP2 all-gathers the FP8 weights cast on their "
                                   "shards (torchao enable_fsdp_float8_all_gather; torchao recipe, fsdp2, zero 2-3)",
                                   "--fp8-all-gather")
    zero: ZeroStage = enum_field(ZeroStage, "zero", _F("--zero", "ZeRO stage", choices=choices_of(ZeroStage)),
                            doc="Which model states are partitioned over the dp ranks", default=ZeroStage.ZERO0)
    offload: Offload = enum_field(Offload, "offload", _F("--offload", "model states offloaded (ZeRO-Offload/Infinity)",
                                                    choices=choices_of(Offload)),
                             doc="Where model states live outside GPU memory", default=Offload.NONE)
    offload_activations: bool = switch_field(
        False, "offload_activations", "Move the activation checkpoints of full recomputation to host memory "
        "(DeepSpeed activation checkpointing, cpu_checkpointing); each block's checkpoint is copied over the host "
        "link in forward and back in backward (simulator.compile.act_offload_part)", "--offload-activations")
    recompute: Recompute = enum_field(Recompute, "recompute", _F("--recompute", "activation recomputation",
                                                            choices=choices_of(Recompute)),
                                 doc="Activation recomputation", default=Recompute.NONE)
    attention: AttentionKind = enum_field(AttentionKind, "attention", _F(
        "--attention", "flash (FlashAttention/SDPA, no s×s scores kept) or eager (scores materialised, as "
        "Megatron-LM 2021; --recompute selective then recomputes the attention core)", choices=choices_of(AttentionKind)),
        doc="Attention implementation", default=AttentionKind.FLASH)
    attention_backend: AttentionBackend | None = opt_enum_field(
        AttentionBackend, "attention_backend",
        doc="The fused-attention kernel (attention flash): flash-attention-2 or cudnn; None: the framework's "
            "choice on the GPU (Framework.attention_backend). The executor records what torch's SDPA picked",
        flag=_F("--attention-backend", "fused-attention kernel: flash-attention-2 or cudnn (torch's "
                "sdpa_kernel, Transformer Engine's NVTE_FUSED_ATTN); default: the framework's choice",
                choices=choices_of(AttentionBackend)))
    kernel_fusion: KernelFusion = enum_field(KernelFusion, "kernel_fusion", _F(
        "--kernel-fusion", "how the framework fuses element-wise kernels: eager (PyTorch, one kernel per op), "
        "megatron (Megatron-LM's fused bias-dropout-add and scale-mask-softmax), compiled (torch.compile)",
        choices=choices_of(KernelFusion)), doc="Kernel fusion of the framework", default=KernelFusion.EAGER)
    model_code: ModelCode = enum_field(ModelCode, "model_code", _F(
        "--model-code", "whose code the norms, rotary and KV heads run as in eager mode: fused-ops (one kernel "
        "each), torchtitan-2024-mid or torchtitan-2024-12 (fp32 operator chains, repeat_kv copies), "
        "llm-foundry-mpt (bf16 norms under autocast)",
        choices=choices_of(ModelCode)),
        doc="The model's own element-wise code (simulator.workload.model_code)", default=ModelCode.FUSED_OPS)
    framework: Framework | None = opt_enum_field(
        Framework, "framework",
        doc="Who implements the ZeRO stage (memory, and the granularity of ZeRO-2/3 calls); None: implied by the "
            "partitioning and the stage (resolve_framework)",
        flag=_F("--framework", "torch (DDP, ZeRO 0-1), fsdp2 (ZeRO 2-3), deepspeed (ZeRO 0-3), megatron (DDP and "
                "distributed optimizer, ZeRO 0-1); default: implied "
                "by --partitioning (flat: torch at ZeRO 0, deepspeed above)", choices=choices_of(Framework)))
    partitioning: Partitioning | None = opt_enum_field(
        Partitioning, "partitioning", doc="How ZeRO splits states over dp ranks; None: the framework's",
        flag=_F("--partitioning", "how ZeRO splits states: flat (DeepSpeed), whole-tensor (torch "
                "ZeroRedundancyOptimizer), dim0-padded (FSDP2); default: the framework's",
                choices=choices_of(Partitioning)))
    fsdp1_flat_params: bool = switch_field(  # [src: torch-fsdp1-flat-param]
        False, "fsdp1_flat_params", "FSDP1's FlatParameter (torch FullyShardedDataParallel, e.g. Composer) instead of "
        "FSDP2's per-parameter shards: gathers land in the buffer the parameters view and the gradient's reduce "
        "cast runs on the post-backward stream, so no copy-out / copy-in on the compute stream "
        "(simulator.compile.fsdp2_copies; framework fsdp2, zero 2-3)", "--fsdp1-flat-params")
    moe_a2a_overlap: bool = switch_field(  # [src: megatron-core-moe-a2a-overlap]
        False, "moe_a2a_overlap", "Megatron-Core's batch-level overlap of the expert-parallel all-to-alls "
        "(--overlap-moe-expert-parallel-comm with --delay-wgrad-compute): one micro-batch's all-to-alls run under "
        "another's compute in the 1F1B steady state (simulator.compile.ep_part.batch_overlap; framework megatron, "
        "ep > 1)", "--moe-a2a-overlap")
    unfused_grad_accumulation: bool = switch_field(  # [src: megatron-ddp-main-grad]
        False, "unfused_grad_accumulation", "Megatron-LM without gradient-accumulation fusion "
        "(--no-gradient-accumulation-fusion, or Megatron-LM 2021, before it): each micro-batch's gradients are "
        "added into the accumulation buffer by a kernel of their own, not by the weight-gradient GEMM "
        "(simulator.workload.grad_accum; framework megatron)", "--unfused-grad-accumulation")
    megatron_unbuffered_grads: bool = switch_field(  # [src: megatron-ddp-main-grad, megatron-2021-fp16-optimizer]
        False, "megatron_unbuffered_grads", "Megatron-LM's local DDP without contiguous gradient buffers (2021's "
        "--fp16 default; --use-contiguous-buffers-in-ddp was opt-in): autograd accumulates .grad (the first "
        "micro-batch of a step assigns), allreduce_gradients flattens, divides and copies the gradients back, and "
        "the fp16 optimizer copies them to fp32 main gradients (simulator.compile.megatron_step; framework "
        "megatron, zero 0, with unfused_grad_accumulation)", "--megatron-unbuffered-grads")
    gradient_as_bucket_view: bool = switch_field(
        False, "gradient_as_bucket_view", "torch DDP's gradient_as_bucket_view: no bucket copy of the gradients",
        "--bucket-view", _MEM)
    optimizer_impl: OptimizerImpl | None = opt_enum_field(
        OptimizerImpl, "optimizer_impl",
        doc="How the GPU's Adam(W) step runs: fused, foreach or for-loop (torch's names); None: the framework's "
            "(Framework.optimizer_impl: torch's default for torch and fsdp2, fused for megatron and deepspeed)",
        flag=_F("--optimizer-impl", "fused (one kernel), foreach or for-loop (torch's unfused AdamW: 20 fp32 passes "
                "per parameter); default: the framework's", choices=choices_of(OptimizerImpl)))
    mixed_precision: MixedPrecision | None = opt_enum_field(
        MixedPrecision, "mixed_precision",
        doc="How a bf16/fp16 model's mixed precision runs: autocast (torch.autocast over fp32 parameters) or "
            "param-dtype (parameters held in bf16 for compute); None: the framework's (Framework.mixed_precision)",
        flag=_F("--mixed-precision", "autocast (fp32 parameters under torch.autocast: weight casts, fp32 norms "
                "and residual stream) or param-dtype (bf16 parameters for compute); default: the framework's",
                choices=choices_of(MixedPrecision)))
    grad_reduce_dtype: GradReduceDtype | None = opt_enum_field(
        GradReduceDtype, "grad_reduce_dtype",
        doc="The format a bf16/fp16 model's gradients are reduced in over dp: fp32 or param-dtype; None: the "
            "framework's (Framework.grad_reduce_dtype: fp32 for megatron bf16 and fsdp2)",
        flag=_F("--grad-reduce-dtype", "fp32 (Megatron's grad_reduce_in_fp32, torchtitan's mixed_precision_reduce) "
                "or param-dtype (bf16/fp16 gradients on the wire); default: the framework's",
                choices=choices_of(GradReduceDtype)))
    dp_sync: AllReduceSync | ParamServerSync = declare(
        key="dp_sync", role=_STRUCT, default_factory=AllReduceSync, nested=(AllReduceSync, ParamServerSync),
        doc="How dp replicas agree on gradients: all-reduce, or a parameter server")
    input: InputPipeline = declare(key="input", role=Role.BATCH, default_factory=InputPipeline,
                                   nested=(InputPipeline,), doc="Reading the training samples")
    stragglers: StragglerModel = declare(key="stragglers", role=Role.SCENARIO, default_factory=StragglerModel,
                                         nested=(StragglerModel,), doc="Per-rank speed factors and slowdowns")
    failures: FailureModel | None = declare(None, key="failures", role=Role.SCENARIO, nested=(FailureModel,),
                                            doc="GPU failures and checkpoints; None: no failures")
    profile: str = declare("", key="profile", role=Role.INFO, check=_text,
                           doc="Name of the framework profile the defaults came from ('' for none)",
                           flag=_F("--profile", "framework defaults (every flag given overrides them)", metavar="NAME",
                                   default_help="none"))

    def __post_init__(self) -> None:
        validate(self)
        for name, kinds in (("dp_sync", (AllReduceSync, ParamServerSync)), ("input", (InputPipeline,)),
                            ("stragglers", (StragglerModel,)), ("failures", (FailureModel, type(None)))):
            if not isinstance(getattr(self, name), kinds):
                raise SpecError(name, f"must be a {' or '.join(k.__name__ for k in kinds)}, got "
                                f"{getattr(self, name)!r}")
        check_combinations(self)

    @property
    def context(self) -> ContextSplit:
        """The sequence split these fields ask for (:mod:`simulator.workload.context`)."""
        torch_ring = self.cp > 1 and self.resolved_framework in (Framework.TORCH_DDP, Framework.FSDP2)
        return context_split(self.cp, self.cp_kind, self.cp_balanced,
                             RingRuntime.TORCH if torch_ring else RingRuntime.FUSED)

    @property
    def resolved_fp8_recipe(self) -> Fp8Recipe | None:
        """The FP8 recipe in effect: given, or the framework's. Megatron-LM runs FP8 through Transformer
        Engine [src: te-fp8], torchtitan (FSDP2, DDP) through torchao float8 [src: torchao-float8];
        None under precision model, or for DeepSpeed without a given recipe."""
        if self.precision is not MatmulPrecision.FP8:
            return None
        if self.fp8_recipe is not None:
            return self.fp8_recipe
        return {Framework.MEGATRON: Fp8Recipe.TE, Framework.FSDP2: Fp8Recipe.TORCHAO,
                Framework.TORCH_DDP: Fp8Recipe.TORCHAO}.get(self.resolved_framework)

    def resolved_optimizer_impl(self, foreach_device: bool) -> OptimizerImpl:
        """The Adam(W) implementation in effect on a device with (``foreach_device``: a GPU) or without foreach
        kernels: given, or the framework's (:meth:`Framework.optimizer_impl`)."""
        return self.optimizer_impl or self.resolved_framework.optimizer_impl(foreach_device)

    @property
    def resolved_mixed_precision(self) -> MixedPrecision:
        """The mixed-precision implementation in effect: given, or the framework's."""
        return self.mixed_precision or self.resolved_framework.mixed_precision

    def resolved_grad_reduce_dtype(self, dtype) -> GradReduceDtype:
        """The gradient-reduction format in effect for a model of ``dtype`` (a ``DtypePolicy``): given, or the
        framework's (:meth:`Framework.grad_reduce_dtype`)."""
        return self.grad_reduce_dtype or self.resolved_framework.grad_reduce_dtype(dtype)

    def resolved_attention_backend(self, compute_capability: float | None) -> AttentionBackend:
        """The fused-attention kernel in effect on a GPU of ``compute_capability``: given, or the framework's."""
        return self.attention_backend or self.resolved_framework.attention_backend(compute_capability)

    @property
    def resolved_framework(self) -> Framework:
        """The framework in effect (given, or implied by the partitioning and the ZeRO stage)."""
        return resolve_framework(self.zero, self.partitioning, self.framework)[1]

    @property
    def resolved_partitioning(self) -> Partitioning:
        """The partitioning in effect (given, or the framework's)."""
        return resolve_framework(self.zero, self.partitioning, self.framework)[0]
