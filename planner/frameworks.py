"""What each framework can run: the capability table that ``--profile`` restricts the search to.

A :class:`Capability` is a framework's simulator profile (its defaults,
:mod:`simulator.profiles`) plus :class:`Rule` s — the values of one strategy key the framework
implements, optionally only where pp > 1 — each with the reason and its source. The planner
drops the rest of the space (counted invalid under ``profile``), refuses a pin outside a rule
(one line naming the flag, exit 2) and, when the pins and the profile leave nothing together,
says which rule removed the last candidate.

These are framework capabilities, not layout rules (:mod:`simulator.strategy.rules` holds those):
a layout Megatron-LM cannot run is still a valid layout for DeepSpeed. ``(assumption)`` marks a
restriction read from what the framework documents rather than from an explicit refusal in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.errors import SpecError
from simulator.schedules import ScheduleKind
from simulator.strategy import Framework, Offload, ParamServerSync, Recompute, Strategy, ZeroStage
from simulator.strategy.sync import AllReduceAlgorithm, DpSyncKind, ParamServerMode
from simulator.workload.context import ContextKind
from simulator.workload.fp8 import MatmulPrecision

Z = ZeroStage
NCCL_ALGORITHMS = (AllReduceAlgorithm.AUTO, AllReduceAlgorithm.RING, AllReduceAlgorithm.TREE)
_NCCL_WHY = ("the framework calls NCCL, whose tuner picks ring or tree and NCCL_ALGO forces one [src: nccl-env]; "
             "no hierarchical all-reduce")


@dataclass(frozen=True)
class Rule:
    """The values of ``key`` a framework runs (where ``pipelined`` only: where pp > 1)."""

    key: str
    values: tuple
    why: str
    pipelined: bool = False


_READ: dict[str, Callable[[Strategy], object]] = {
    "tp": lambda s: s.tp,
    "pp": lambda s: s.pp,
    "zero": lambda s: s.zero,
    "schedule": lambda s: s.schedule if s.pp > 1 else None,
    "sequence_parallel": lambda s: s.sequence_parallel if s.tp > 1 else None,
    "offload": lambda s: s.offload,
    "dp_sync": lambda s: s.dp_sync.kind,
    "ps_mode": lambda s: s.dp_sync.mode if isinstance(s.dp_sync, ParamServerSync) else None,
    "allreduce_algorithm": lambda s: None if isinstance(s.dp_sync, ParamServerSync) else s.dp_sync.algorithm,
    "cp": lambda s: s.cp,
    "ep": lambda s: s.ep,
    "cp_kind": lambda s: s.cp_kind if s.cp > 1 else None,
    "precision": lambda s: s.precision,
}
"""Each ruled key's value in a strategy (None: the key does not apply there)."""


@dataclass(frozen=True)
class Capability:
    """A framework: its simulator profile (defaults), fixed flat keys, and what it can run."""

    name: str
    framework: str
    rules: tuple[Rule, ...]
    defaults: str | None
    """The :mod:`simulator.profiles` profile whose defaults the candidates take (None: the fields' own)."""
    fixed: dict = field(default_factory=dict)
    """Flat keys every candidate gets (e.g. FSDP2's framework)."""
    one_node: str | None = None
    """Why the framework runs on one machine only (None: any number)."""
    buckets: bool = True
    """Whether the framework has a gradient bucket size to tune (the search varies it)."""
    extra_recompute: tuple = ()
    """Recompute policies of this framework's own that the search adds to the default ones."""

    def refusal(self, s: Strategy) -> str | None:
        """Why this framework cannot run ``s`` (None: it can)."""
        for rule in self.rules:
            value = _READ[rule.key](s)
            if value is not None and value not in rule.values and (s.pp > 1 or not rule.pipelined):
                return self.message(rule, value)
        if s.recompute is Recompute.SELECTIVE_OP and s.recompute not in self.extra_recompute:
            return (f"{self.framework} (--profile {self.name}) cannot run recompute selective-op: it is torch's "
                    "selective checkpointing as torchtitan applies it (--profile fsdp or ddp)")
        return None

    def message(self, rule: Rule, value) -> str:
        shown = getattr(value, "value", value)
        where = " with pp > 1" if rule.pipelined else ""
        return f"{self.framework} (--profile {self.name}) cannot run {rule.key} {shown}{where}: {rule.why}"

    def allows(self, key: str, value) -> bool:
        """Whether ``value`` of ``key`` passes the rules that hold everywhere (not only with pp > 1)."""
        return all(value in r.values for r in self.rules if r.key == key and not r.pipelined)

    def check_pins(self, pins: dict, gpus: int, gpus_per_node: int) -> None:
        """A pinned value the framework never runs is an error naming the key."""
        if self.one_node and gpus > gpus_per_node:
            raise SpecError("profile", f"{self.framework} runs on one machine ({self.one_node}); use at most "
                            f"{gpus_per_node} GPUs or another profile")
        for rule in self.rules:
            for value in pins.get(rule.key, ()):
                if value not in rule.values and not rule.pipelined:
                    raise SpecError(rule.key, self.message(rule, value) + "; drop the pin or the profile")


def _data_parallel_only(why: str) -> tuple[Rule, ...]:
    """tp, pp, cp and ep 1: a framework that replicates the whole model on every worker shards neither
    the layers nor the sequence nor a MoE layer's experts (expert parallelism needs its own all-to-all
    dispatch, which these frameworks do not have)."""
    return (Rule("tp", (1,), why), Rule("pp", (1,), why), Rule("cp", (1,), why), Rule("ep", (1,), why))


_NO_FP8 = Rule("precision", (MatmulPrecision.MODEL,), "(assumption) no FP8 training recipe is documented for it")


CAPABILITIES: dict[str, Capability] = {c.name: c for c in (
    Capability("ddp", "PyTorch DDP", _data_parallel_only(
        "DistributedDataParallel replicates the whole module on every rank [src: torch-ddp]") + (
        Rule("zero", (Z.ZERO0, Z.ZERO1), "ZeRO-1 is torch's ZeroRedundancyOptimizer; sharded gradients and "
             "parameters are FSDP (--profile fsdp) [src: torch-ddp]"),
        Rule("offload", (Offload.NONE,), "(assumption) DDP and ZeroRedundancyOptimizer keep every state on the GPU"),
        Rule("dp_sync", (DpSyncKind.ALL_REDUCE,), "DDP all-reduces gradient buckets [src: torch-ddp]"),
        Rule("allreduce_algorithm", NCCL_ALGORITHMS, _NCCL_WHY)), "ddp",
        extra_recompute=(Recompute.SELECTIVE_OP,)),  # torch.utils.checkpoint's selective policy [src: torchtitan-op-sac]
    Capability("fsdp", "PyTorch FSDP2 (torchtitan)", (
        Rule("zero", (Z.ZERO2, Z.ZERO3), "fully_shard shards gradients and optimizer state, and the parameters "
             "too with reshard_after_forward=True [src: torch-fsdp2]"),
        Rule("schedule", (ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B, ScheduleKind.INTERLEAVED),
             "torch.distributed.pipelining's ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B "
             "[src: torch-pipelining]"),
        Rule("offload", (Offload.NONE, Offload.PARAMS), "CPUOffloadPolicy moves the sharded parameters, "
             "gradients and optimizer state to the host and steps there; no NVMe tier [src: torch-fsdp2]"),
        Rule("dp_sync", (DpSyncKind.ALL_REDUCE,), "FSDP reduce-scatters gradients [src: torch-fsdp2]"),
        Rule("allreduce_algorithm", NCCL_ALGORITHMS, _NCCL_WHY)), None, fixed={"framework": Framework.FSDP2},
        buckets=False,  # fully_shard reduces one parameter group (module) at a time: no bucket size
        # torchtitan's op-level selective activation checkpointing [src: torchtitan-op-sac]
        extra_recompute=(Recompute.SELECTIVE_OP,)),
    Capability("megatron", "Megatron-LM", (
        Rule("schedule", (ScheduleKind.ONE_F_ONE_B, ScheduleKind.INTERLEAVED), "Megatron-Core's pipeline "
             "schedules are 1F1B with or without interleaving; no GPipe [src: megatron-core]"),
        Rule("zero", (Z.ZERO0, Z.ZERO1), "the distributed optimizer shards optimizer state only (ZeRO-1); "
             "sharded gradients and parameters come with Megatron-FSDP, which we take as pp = 1 only "
             "(assumption) [src: megatron-core]", pipelined=True),
        Rule("offload", (Offload.NONE,), "(assumption) the documented memory savers are the distributed "
             "optimizer and recomputation [src: megatron-core]"),
        Rule("dp_sync", (DpSyncKind.ALL_REDUCE,), "Megatron-Core DistributedDataParallel [src: megatron-core]"),
        Rule("allreduce_algorithm", NCCL_ALGORITHMS, _NCCL_WHY)), "megatron"),
    Capability("deepspeed", "DeepSpeed", (
        Rule("schedule", (ScheduleKind.ONE_F_ONE_B,), "the pipeline engine runs TrainSchedule, 1F1B "
             "(PipeDream-Flush) [src: deepspeed-pipe]"),
        Rule("zero", (Z.ZERO0, Z.ZERO1), "PipelineEngine asserts ZeRO stage < 2 [src: deepspeed-pipe]",
             pipelined=True),
        Rule("sequence_parallel", (False,), "(assumption) Megatron-style sequence parallelism is Megatron's; "
             "DeepSpeed-Ulysses splits attention heads instead (cp_kind all-to-all)"),
        Rule("cp_kind", (ContextKind.ALL_TO_ALL,), "DeepSpeed's sequence parallelism is Ulysses' all-to-all "
             "[src: jacobs-2023]"),
        Rule("dp_sync", (DpSyncKind.ALL_REDUCE,), "ZeRO reduces gradients collectively [src: deepspeed-config]"),
        Rule("allreduce_algorithm", NCCL_ALGORITHMS, _NCCL_WHY)), "deepspeed"),
    Capability("horovod", "Horovod", _data_parallel_only("Horovod is data parallel [src: horovod-docs]") + (
        Rule("zero", (Z.ZERO0,), "every worker holds the whole model and optimizer [src: horovod-docs]"),
        Rule("offload", (Offload.NONE,), "every worker holds the whole model and optimizer [src: horovod-docs]"),
        Rule("dp_sync", (DpSyncKind.ALL_REDUCE,), "Horovod all-reduces [src: horovod-docs]"),
        Rule("allreduce_algorithm", NCCL_ALGORITHMS + (AllReduceAlgorithm.HIERARCHICAL,),
             "NCCL's choices, and HOROVOD_HIERARCHICAL_ALLREDUCE [src: horovod-docs]"), _NO_FP8), "horovod"),
    *(Capability(name, title, _data_parallel_only(f"{title} replicates variables [src: tf-distribute]") + (
        Rule("zero", (Z.ZERO0,), "variables are mirrored, not partitioned [src: tf-distribute]"),
        Rule("offload", (Offload.NONE,), "variables are mirrored on the devices [src: tf-distribute]"),
        Rule("dp_sync", (DpSyncKind.ALL_REDUCE,), "synchronous all-reduce [src: tf-distribute]"),
        Rule("allreduce_algorithm", NCCL_ALGORITHMS, _NCCL_WHY), _NO_FP8), name,
        one_node="MirroredStrategy is synchronous training on one machine [src: tf-distribute]"
        if name == "tf-mirrored" else None)
      for name, title in (("tf-mirrored", "TensorFlow MirroredStrategy"),
                          ("tf-multiworker", "TensorFlow MultiWorkerMirroredStrategy"))),
    Capability("tf-ps", "TensorFlow ParameterServerStrategy", _data_parallel_only(
        "workers run the whole model; variables live on the parameter servers [src: tf-distribute]") + (
        Rule("zero", (Z.ZERO0,), "variables live on the parameter servers [src: tf-distribute]"),
        Rule("offload", (Offload.NONE,), "variables live on the parameter servers [src: tf-distribute]"),
        Rule("dp_sync", (DpSyncKind.PARAM_SERVER,), "variables live on the parameter servers [src: tf-distribute]"),
        Rule("ps_mode", (ParamServerMode.ASYNC,), "workers update variables asynchronously "
             "[src: tf-distribute]"), _NO_FP8), "tf-ps",
        # colocated: the planner sizes the cluster to the workers (the profile's one server node needs a spare one)
        fixed={"ps_server_nodes": 0}),
)}


def capability(name: str | None) -> Capability | None:
    """The capability of ``--profile name`` (None for no profile); an unknown name lists the known."""
    if name is None:
        return None
    if name not in CAPABILITIES:
        raise SpecError("profile", f"unknown profile {name!r}; known: {', '.join(CAPABILITIES)}")
    return CAPABILITIES[name]
