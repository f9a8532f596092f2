"""``--profile`` restricts the planner to what the framework runs (planner.frameworks): every
ranked plan passes the framework's rules (written out here by hand, not read from the table),
a pin the framework never runs is a one-line error naming the flag, and a pin combination it
cannot run (DeepSpeed's ZeRO-3 with a pipeline) says which rule removed the last candidate."""

from __future__ import annotations

import pytest

import planner
from argv import merged
from planner.frameworks import CAPABILITIES
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.profiles import PROFILES
from simulator.schedules import ScheduleKind
from simulator.strategy import Framework, Offload, ParamServerSync, ZeroStage
from simulator.strategy.sync import AllReduceAlgorithm, ParamServerMode
from simulator.workload import get_preset
from trainplan.__main__ import main

MODEL = get_preset("gpt3-125m").with_seq(512)
CLUSTER = load_cluster("dgx-h100", nodes=2)
NCCL = {AllReduceAlgorithm.AUTO, AllReduceAlgorithm.RING, AllReduceAlgorithm.TREE}


def _algo(s):
    return None if isinstance(s.dp_sync, ParamServerSync) else s.dp_sync.algorithm


EXPECTED = {  # what each framework's documentation says it runs (sources in planner/frameworks.py)
    "ddp": lambda s: s.tp == 1 and s.pp == 1 and s.zero <= ZeroStage.ZERO1 and s.offload is Offload.NONE
    and _algo(s) in NCCL,
    "fsdp": lambda s: s.zero >= ZeroStage.ZERO2 and s.resolved_framework is Framework.FSDP2
    and s.offload in (Offload.NONE, Offload.PARAMS) and _algo(s) in NCCL,
    "megatron": lambda s: (s.pp == 1 or s.zero <= ZeroStage.ZERO1 and s.schedule is not ScheduleKind.GPIPE)
    and s.offload is Offload.NONE and _algo(s) in NCCL,
    "deepspeed": lambda s: (s.pp == 1 or s.zero <= ZeroStage.ZERO1 and s.schedule is ScheduleKind.ONE_F_ONE_B)
    and not (s.sequence_parallel and s.tp > 1) and _algo(s) in NCCL,
    "horovod": lambda s: s.tp == 1 and s.pp == 1 and s.zero is ZeroStage.ZERO0,
    "tf-ps": lambda s: s.tp == 1 and s.pp == 1 and isinstance(s.dp_sync, ParamServerSync)
    and s.dp_sync.mode is ParamServerMode.ASYNC,
}


def test_every_simulator_profile_has_a_capability():
    assert set(PROFILES) <= set(CAPABILITIES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_profile_ranks_only_what_the_framework_runs(name):
    result = planner.plan(MODEL, CLUSTER, gpus=16, global_batch=32, refine=0, profile=name)
    strategies = list(result.frame["strategy"])
    assert strategies and all(EXPECTED[name](s) for s in strategies), name
    c = result.counts.to_dict()
    assert c["enumerated"] == c["invalid"] + c["infeasible"] + c["ranked"]


def test_without_a_profile_the_space_is_wider():
    """The restrictions bite: plans each framework refuses exist in the unrestricted space."""
    free = list(planner.plan(MODEL, CLUSTER, gpus=16, global_batch=32, refine=0).frame["strategy"])
    for name in ("ddp", "megatron", "deepspeed"):
        assert not all(EXPECTED[name](s) for s in free), name


@pytest.mark.parametrize("profile, pins, key, needle", [
    ("ddp", {"tp": (2,)}, "tp", "PyTorch DDP (--profile ddp) cannot run tp 2"),
    ("megatron", {"schedule": (ScheduleKind.GPIPE,)}, "schedule", "cannot run schedule gpipe"),
    ("horovod", {"zero": (ZeroStage.ZERO1,)}, "zero", "Horovod (--profile horovod) cannot run zero 1"),
    ("deepspeed", {"pp": (2,), "zero": (ZeroStage.ZERO3,)}, "profile", "cannot run zero 3 with pp > 1"),
    ("tf-mirrored", {}, "profile", "runs on one machine"),
    ("nonesuch", {}, "profile", "unknown profile 'nonesuch'; known: ddp, fsdp"),
])
def test_a_pin_the_profile_cannot_honour_is_an_error(profile, pins, key, needle):
    with pytest.raises(SpecError) as err:
        planner.plan(MODEL, CLUSTER, gpus=16, global_batch=32, refine=0, profile=profile, pins=pins)
    assert err.value.field == key and needle in err.value.problem


@pytest.mark.parametrize("extra, needle", [
    (["--profile", "ddp", "--pp", "2"], "--pp: PyTorch DDP (--profile ddp) cannot run pp 2"),
    (["--profile", "deepspeed", "--pp", "2", "--zero", "2"], "--profile: DeepSpeed (--profile deepspeed) cannot "
                                                              "run zero 2 with pp > 1"),
    (["--profile", "horovod", "--offload", "optimizer"], "--offload: Horovod (--profile horovod) cannot run "
                                                          "offload optimizer")])
def test_cli_profile_errors_are_one_line_exit_2(capsys, extra, needle):
    argv = ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "32", "--seq", "512",
            "--quiet", "--refine", "0"]
    assert main(merged(argv, extra)) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
