"""The validation suite as data: one small plan per strategy the executor runs, grouped into families.

``trainplan validate --suite default|quick`` (issue 11 §1) plans, runs (``--scale tiny``) and validates
each :class:`SuiteCase` here; this module only says *what* to run. Each case is a model preset, the plan's
cluster, its worker GPUs and its strategy as flat strategy keys (the plan file's own schema,
``simulator.strategy.flat``), so every case is a plan like any other (:func:`case_plan`) and can be run
by hand with ``trainplan execute`` or under torchrun.

The default suite covers DDP (overlap on and off, ring and tree all-reduce, gradient accumulation),
ZeRO-1/2/3, offload, GPipe / 1F1B / interleaved pipelines, TP, TP+SP, TP+DP, PP+DP, 3D, full and
selective recomputation, and synchronous and asynchronous parameter servers; ``quick`` is one case of
six of its families, all on two or three processes. Nothing here is launched: the runner is
``executor/suite_run.py`` and the report ``simulator/suite_report.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.plan_file import Plan


class Family(Kind):
    """What a case exercises; the report's MAPE per family and the scatter's markers are by family."""

    DDP = "ddp"
    """Data parallel with all-reduce (torch DDP or the replayed ring/tree schedules)."""
    ZERO = "zero"
    """ZeRO-1/2/3 (ZeroRedundancyOptimizer, FSDP2)."""
    OFFLOAD = "offload"
    """ZeRO with model states offloaded to host memory."""
    PIPELINE = "pipeline"
    """Pipeline parallel alone (GPipe, 1F1B, interleaved 1F1B)."""
    TENSOR = "tensor"
    """Tensor parallel alone, with and without sequence parallelism."""
    HYBRID = "hybrid"
    """Two or three of dp, tp and pp together."""
    RECOMPUTE = "recompute"
    """Activation recomputation (full, selective) under DDP."""
    PARAM_SERVER = "param-server"
    """Parameter servers, synchronous and stale-synchronous."""


class SuiteName(Kind):
    """``--suite``."""

    DEFAULT = "default"
    QUICK = "quick"


MODEL = "gpt3-125m"
"""The model preset every case plans (the run shrinks it with ``--scale tiny``: docs/executor.md)."""
GLOBAL_BATCH = 8
MICRO_BATCH = 2
"""Samples per step and per micro-batch unless a case sets them: m = 8 / (dp·2) micro-batches per replica."""


@dataclass(frozen=True, kw_only=True)
class SuiteCase:
    """One plan of the suite."""

    name: str
    """Unique, file-name safe: the case's plan and results files are ``<name>.plan.json``, ``<name>.results.json``."""
    family: Family
    gpus: int
    """Worker GPUs of the plan (= dp·tp·pp); a parameter server's world adds its server shards."""
    flat: tuple[tuple[str, object], ...]
    """The strategy's flat keys (``simulator.strategy.flat``) on top of the global and micro batch."""
    cluster: str = "dgx-h100"
    """The cluster the plan is made for (a parameter server lays out over every GPU of it: localhost-cpu has 2)."""
    quick: bool = False
    """Also in the quick suite."""

    @property
    def strategy_keys(self) -> dict:
        return {"global_batch": GLOBAL_BATCH, "micro_batch": MICRO_BATCH} | dict(self.flat)

    @property
    def min_processes(self) -> int:
        """Fewest local processes that keep what the case exercises: its tp·pp, two replicas where it has
        dp > 1, and its server shards."""
        keys = self.strategy_keys
        dp = self.gpus // (keys.get("tp", 1) * keys.get("pp", 1))
        shards = keys.get("ps_shards", 1) if keys.get("dp_sync") == "param-server" else 0
        return keys.get("tp", 1) * keys.get("pp", 1) * min(dp, 2) + shards

    @property
    def processes(self) -> int:
        """Local processes of the run as planned: the workers and the server shards."""
        keys = self.strategy_keys
        return self.gpus + (keys.get("ps_shards", 1) if keys.get("dp_sync") == "param-server" else 0)


def _case(name: str, family: Family, gpus: int, quick: bool = False, cluster: str = "dgx-h100",
          **flat) -> SuiteCase:
    return SuiteCase(name=name, family=family, gpus=gpus, flat=tuple(flat.items()), cluster=cluster, quick=quick)


_PS = {"dp": 2, "dp_sync": "param-server", "ps_shards": 1}

CASES: tuple[SuiteCase, ...] = (
    _case("ddp-overlap", Family.DDP, 2, quick=True, dp=2),
    _case("ddp-no-overlap", Family.DDP, 2, dp=2, overlap_grad_reduce=False),
    _case("ddp-ring", Family.DDP, 4, dp=4, allreduce_algorithm="ring"),
    _case("ddp-tree", Family.DDP, 4, dp=4, allreduce_algorithm="tree"),
    _case("ddp-accumulate", Family.DDP, 2, dp=2, micro_batch=1),
    _case("zero1", Family.ZERO, 2, dp=2, zero=1),
    _case("zero2", Family.ZERO, 2, dp=2, zero=2),
    _case("zero3", Family.ZERO, 2, quick=True, dp=2, zero=3),
    _case("zero3-offload", Family.OFFLOAD, 2, dp=2, zero=3, offload="optimizer"),
    _case("pp-gpipe", Family.PIPELINE, 2, dp=1, pp=2, schedule="gpipe"),
    _case("pp-1f1b", Family.PIPELINE, 2, quick=True, dp=1, pp=2, schedule="1f1b"),
    _case("pp-interleaved", Family.PIPELINE, 2, dp=1, pp=2, schedule="interleaved", virtual_stages=2),
    _case("tp", Family.TENSOR, 2, quick=True, dp=1, tp=2),
    _case("tp-sp", Family.TENSOR, 2, dp=1, tp=2, sequence_parallel=True),
    _case("tp-dp", Family.HYBRID, 4, dp=2, tp=2),
    _case("pp-dp", Family.HYBRID, 4, dp=2, pp=2),
    _case("3d", Family.HYBRID, 8, dp=2, tp=2, pp=2, micro_batch=1),
    _case("recompute-full", Family.RECOMPUTE, 2, quick=True, dp=2, recompute="full"),
    _case("recompute-selective", Family.RECOMPUTE, 2, dp=2, recompute="selective"),
    _case("ps-sync", Family.PARAM_SERVER, 2, quick=True, cluster="localhost-cpu", **_PS, ps_mode="sync"),
    _case("ps-async", Family.PARAM_SERVER, 2, cluster="localhost-cpu", **_PS, ps_mode="async", staleness_steps=1),
)
"""Every case of the default suite, in the order they run; ``quick`` marks the quick subset."""


def suite_cases(suite: SuiteName | str) -> tuple[SuiteCase, ...]:
    """The cases of ``suite``; SpecError naming ``--suite`` for an unknown name."""
    if isinstance(suite, str):
        try:
            suite = SuiteName(suite)
        except ValueError:
            raise SpecError("--suite", f"unknown suite {suite!r}; known: "
                            f"{', '.join(s.value for s in SuiteName)}") from None
    return CASES if suite is SuiteName.DEFAULT else tuple(c for c in CASES if c.quick)


def case_by_name(name: str) -> SuiteCase:
    """The case called ``name`` (SpecError listing the known names)."""
    for case in CASES:
        if case.name == name:
            return case
    raise SpecError("case", f"unknown suite case {name!r}; known: {', '.join(c.name for c in CASES)}")


def case_plan(case: SuiteCase) -> Plan:
    """The plan of ``case``: the model preset on the case's cluster with its strategy, checked (layout built)."""
    from simulator.cluster.io import load_cluster
    from simulator.strategy.flat import strategy_from_flat
    from simulator.workload import get_preset

    plan = Plan(model=get_preset(MODEL), cluster=load_cluster(case.cluster), gpus=case.gpus,
                strategy=strategy_from_flat(case.strategy_keys))
    plan.layout()
    return plan


STEPS_WARMUP = {SuiteName.DEFAULT: (24, 4), SuiteName.QUICK: (5, 2)}
"""Optimizer steps per case and how many lead as warm-up (left out of the median, p10 and p90). The default
suite's 20 measured steps (5 until 2026-11-25): its cases' step medians moved by up to 43 % between two quiet
runs minutes apart (ddp-no-overlap 9.87 vs 6.89 ms, docs/validation.md), more than any model term, and a
case's steps cost 6-224 ms against 3.5-18 s of process start-up, so 15 more steps add about 15 s to a suite
of about 2.5 minutes."""

MEASURE_S = {SuiteName.DEFAULT: 1.0, SuiteName.QUICK: None}
"""Seconds of measured steps per case (``execute --measure-s``, ``executor.step_budget``): a short case runs
as many more steps as fill it, up to 400 in all. Why (branch var16, 2026-11-25, docs/validation.md): a step
that waits for a core waits a ~4 ms tick, so a 5-10 ms case's steps are bimodal and the median of 20 of them
has a bootstrap p10..p90 of 17 % (median case of two quiet runs; 34 % for ps-async); 1/sqrt(n) makes it ~7 %
at 200 steps. A case of 50 ms or more keeps its 24 steps; the short ones add about 1 s each. The quick suite
keeps its fixed 5 steps (a smoke test, not a measurement)."""
