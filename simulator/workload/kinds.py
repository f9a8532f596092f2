"""The options a transformer workload is described by (MLP kind, norm, positions, biases, numeric
formats). A module below the workload classes and their FLOP and kernel counts, so that those can
import them without importing :class:`~simulator.workload.transformer.TransformerSpec`."""

from __future__ import annotations

from simulator.dtypes import Dtype
from simulator.enum_kind import Kind

__all__ = ["ActivationKind", "BiasKind", "DtypePolicy", "ModelCode", "NormKind", "PositionKind"]


class ActivationKind(Kind):
    """The MLP's shape and non-linearity."""

    GELU = "gelu"
    """Two matrices h→f→h with GELU between (GPT-2/3, GPT-NeoX, Megatron GPT; f = 4h usually)."""
    SWIGLU = "swiglu"
    """Three matrices: gate and up h→f, SiLU(gate)·up, down f→h (Llama, Mistral, Qwen2; Shazeer 2020)."""


class NormKind(Kind):
    """The normalisation layer before attention, before the MLP, and after the last block."""

    LAYERNORM = "layernorm"
    """LayerNorm with a scale and a bias: 2h parameters (GPT-2/3, GPT-NeoX)."""
    RMSNORM = "rmsnorm"
    """RMSNorm with a scale only: h parameters (Llama, Mistral, Qwen2)."""


class PositionKind(Kind):
    """How token positions enter the model."""

    LEARNED = "learned"
    """A learned position-embedding table of ``max_positions × h`` parameters (GPT-2/3)."""
    ROTARY = "rotary"
    """Rotary embeddings applied to Q and K: no parameters, an element-wise op (NeoX, Llama)."""


class BiasKind(Kind):
    """Which linear layers carry a bias vector."""

    NONE = "none"
    """No biases (Llama, Mistral)."""
    QKV = "qkv"
    """Biases on the Q, K, V projections only (Qwen2)."""
    ALL = "all"
    """Biases on every linear layer (GPT-2/3, GPT-NeoX, Megatron GPT)."""


class LossImpl(Kind):
    """How the framework computes the softmax cross-entropy over the logits (:mod:`simulator.workload.loss`)."""

    TORCH_FP32 = "torch-fp32"
    """``F.cross_entropy`` on fp32 logits, as torch models call it (``logits.float()``, or autocast's fp32
    ``log_softmax``): a cast, ``log_softmax`` and ``nll_loss``, each its own pass, and their backward passes."""
    TORCH_AUTOCAST = "torch-autocast"
    """``F.cross_entropy`` on 16-bit logits under CUDA autocast (torch DDP's AMP recipe, the executor's loss):
    ``log_softmax`` in the logits' format, then ``nll_loss`` (autocast's fp32 list) on an fp32 cast of the
    log-probabilities; backward their passes in reverse (:mod:`simulator.workload.loss`)."""
    MEGATRON_VOCAB_PARALLEL = "megatron-vocab-parallel"
    """Megatron-LM's vocab-parallel cross-entropy on the ``.float()`` logits: a cast, the max, the in-place
    subtraction, exponent and normalisation, each its own pass; backward the in-place scaling and the cast back."""
    ONE_PASS = "one-pass"
    """The logits read and written once in their own format, backward 1.5×: the op tables' default where no
    framework is named."""


class KernelFusion(Kind):
    """How the framework turns a block's element-wise operations into kernels: the passes over
    device memory that the memory-bound kernels make (:mod:`simulator.workload.ops`)."""

    EAGER = "eager"
    """PyTorch eager mode: one kernel per operation. ``nn.Dropout`` is its own kernel (ATen
    ``native_dropout``: reads x, writes y and a bool mask), the residual add another; eager attention
    scales, masks and softmaxes the scores in three passes (Hugging Face ``eager_attention_forward``)."""
    MEGATRON = "megatron"
    """Megatron-LM's fused kernels: bias-dropout-add in one pass (``fused_bias_dropout.py``), scale,
    mask and softmax in one (``FusedScaleMaskSoftmax``, ``fused_softmax.py``); attention dropout and
    embedding dropout stay separate ``torch.nn.Dropout`` calls [src: megatron-core]."""
    COMPILED = "compiled"
    """``torch.compile`` (TorchInductor): chains of point-wise operations and the reductions they feed
    become one kernel (Ansel et al. ASPLOS'24 §5), so every dropout is fused into its neighbour and
    only writes its mask."""


class ModelCode(Kind):
    """Whose Python code the model's norms, rotary embedding and KV heads run as, under eager kernel fusion
    (:mod:`simulator.workload.model_code`)."""

    FUSED_OPS = "fused-ops"
    """One ``F.rms_norm`` / ``F.layer_norm`` kernel per norm, rotary as one pass, K and V read as projected: the
    executor's models and the frameworks whose norms are one kernel (the default)."""
    TORCHTITAN_2024_MID = "torchtitan-2024-mid"
    """torchtitan's Llama of mid-2024: its own ``RMSNorm`` class (fp32 operators), complex fp32 rotary,
    ``repeat_kv`` copies [src: torchtitan-llama-2024]."""
    TORCHTITAN_2024_12 = "torchtitan-2024-12"
    """torchtitan's Llama of 2024-12: ``nn.RMSNorm`` (ATen's composite ``rms_norm`` on that torch), complex fp32
    rotary, ``repeat_kv`` copies [src: torchtitan-llama-2024, torch-rms-norm-composite]."""
    LLM_FOUNDRY_MPT = "llm-foundry-mpt"
    """llm-foundry's MPT of 2023 with ``low_precision_layernorm``: under autocast each norm casts its input to
    bf16 and runs one ``F.layer_norm`` kernel in bf16 (not autocast's fp32 norm); ALiBi inside the attention
    kernel, one KV head per query head [src: llm-foundry-lp-layernorm]."""


class DtypePolicy(Kind):
    """Numeric formats for compute, stored weights, gradients and optimizer master weights."""

    BF16_MIXED = "bf16"
    """bf16 weights, activations and gradients for compute; fp32 master weights in the optimizer."""
    FP16_MIXED = "fp16"
    """fp16 compute with loss scaling; fp32 master weights (Micikevicius et al. 2018)."""
    FP32 = "fp32"
    """Everything in fp32 (on the CUDA cores: no TF32 unless the device's fp32 peak says so)."""

    @property
    def compute_dtype(self) -> Dtype:
        """Format the matmuls run in; picks the device's peak FLOP/s."""
        return {DtypePolicy.BF16_MIXED: Dtype.BF16, DtypePolicy.FP16_MIXED: Dtype.FP16,
                DtypePolicy.FP32: Dtype.FP32}[self]

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element (and per compute-copy weight element)."""
        return 4 if self is DtypePolicy.FP32 else 2

    @property
    def param_bytes(self) -> int:
        """Bytes per parameter of the weights the forward pass reads."""
        return self.activation_bytes

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element as produced by backward."""
        return self.activation_bytes

    @property
    def master_bytes(self) -> int:
        """Bytes per parameter of a separate fp32 master copy (0: the weights are the master)."""
        return 0 if self is DtypePolicy.FP32 else 4
