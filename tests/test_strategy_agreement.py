"""Properties over random layouts: ``memory`` and ``simulate`` build the same layout and the same
memory report from the same flags (or refuse it with the same one-line error), and the planner's
vectorised validity check (:func:`simulator.strategy.rules.valid_mask`) says exactly what
:func:`build_layout` says."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from presets_once import cluster as preset_cluster
from simulator.compile import compile_step
from simulator.errors import SpecError
from simulator.memory import memory_report
from simulator.schedules import ScheduleKind
from simulator.strategy import Framework, Strategy, ZeroStage, build_layout
from simulator.strategy.rules import Candidates, valid_mask
from simulator.workload import get_preset
from trainplan import cli_common, strategy_flags
from trainplan.__main__ import build_parser


@st.composite
def flag_sets(draw):
    tp, pp, mbs = draw(st.sampled_from([1, 2, 3, 4])), draw(st.sampled_from([1, 2, 3, 4])), draw(st.sampled_from([1, 2]))
    # mostly GPU counts the degrees divide (layouts that build and get compared), sometimes any
    fits = [g for g in (1, 2, 4, 8, 16) if g % (tp * pp) == 0 and (g <= 8 or g % 8 == 0)] or [8]
    gpus = draw(st.sampled_from(fits * 3 + [1, 2, 4, 8, 16]))
    schedule = draw(st.sampled_from([k.value for k in ScheduleKind]))
    fitting = max(1, gpus // (tp * pp)) * mbs * pp * draw(st.sampled_from([1, 2]))  # mostly layouts that build
    gbs = draw(st.sampled_from([fitting, fitting, fitting, 1, 24]))
    flags = ["--model", "gpt3-125m", "--gpus", str(gpus), "--tp", str(tp), "--pp", str(pp), "--mbs", str(mbs),
             "--gbs", str(gbs), "--schedule", schedule, "--seq", "512",
             "--zero", draw(st.sampled_from(["0", "1", "2", "3"])),
             "--recompute", draw(st.sampled_from(["none", "selective", "full"])),
             "--attention", draw(st.sampled_from(["flash", "eager"]))]
    if draw(st.booleans()):
        flags.append("--sp")
    if pp == 2 and draw(st.booleans()):
        flags += ["--layer-split", draw(st.sampled_from(["2,10", "6,6", "11,1", "4,4"]))]
    return flags


def _job(command: str, flags: list[str]):
    args = build_parser().parse_args([command, *flags])
    try:
        return strategy_flags.build_job(args)
    except (SpecError, cli_common.UsageError) as err:
        return str(err)


@settings(max_examples=60, deadline=None)
@given(flag_sets())
def test_memory_and_simulate_describe_one_layout(flags):
    mem, sim = _job("memory", flags), _job("simulate", flags)
    if isinstance(sim, str) or isinstance(mem, str):
        assert mem == sim
        return
    assert mem.layout == sim.layout and mem.strategy == sim.strategy
    work = compile_step(sim.cluster, sim.workload, sim.strategy, layout=sim.layout)
    report = memory_report(mem.workload, mem.cluster, mem.layout)
    assert [st.blocks for st in work.memory.stages] == list(sim.layout.layers_per_rank)
    assert [st.total_bytes for st in work.memory.stages] == [st.total_bytes for st in report.stages]


def test_layer_split_reaches_the_memory_report():
    """The bug this file guards: layer_split (2, 10) compiled as [2, 10] but reported memory as [6, 6]."""
    job = _job("simulate", ["--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--dp", "2", "--tp",
                            "2", "--pp", "2", "--gbs", "16", "--layer-split", "2,10"])
    work = compile_step(job.cluster, job.workload, job.strategy, layout=job.layout)
    assert [c.layers for st in work.stages for c in st.chunks] == [2, 10]
    assert [st.blocks for st in work.memory.stages] == [2, 10]


@st.composite
def candidate_columns(draw):
    n = draw(st.integers(1, 40))
    ints = lambda *values: np.array(draw(st.lists(st.sampled_from(values), min_size=n, max_size=n)))  # noqa: E731
    inter = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    v = np.where(inter, ints(2, 3), 1)
    zero = ints(0, 1, 2, 3)
    fsdp = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))) & (zero >= 2)  # FSDP2 does ZeRO 2/3
    return dict(dp=ints(1, 2, 3, 4, 8), tp=ints(1, 2, 3, 4, 5), pp=ints(1, 2, 3, 4, 8), v=v,
                micro_batch=ints(1, 2, 3, 4), global_batch=ints(1, 6, 8, 12, 16, 24, 48), interleaved=inter,
                zero=zero, zero_with_pp=fsdp)


def _by_hand(c: dict, gpus: int) -> bool:
    """The layout rules written out independently of simulator.strategy.rules, for gpt3-125m (12 layers,
    12 heads, 12 kv heads): degrees multiply to the GPUs, tp divides the heads (Megatron-Core's divide),
    pp·v ≤ layers, dp divides the batch, the micro-batch divides each replica's share, and interleaving
    needs at least two pipeline ranks and m a multiple of pp (Narayanan et al. SC'21), and ZeRO-2/3
    with pp > 1 only under FSDP2 (DeepSpeed's pipeline engine asserts ZeRO < 2; the default framework at
    ZeRO >= 1 is DeepSpeed)."""
    dp, tp, pp, v, b, gbs = c["dp"], c["tp"], c["pp"], c["v"], c["micro_batch"], c["global_batch"]
    if dp * tp * pp != gpus or 12 % tp or pp * v > 12 or gbs % dp or (gbs // dp) % b:
        return False
    if c["interleaved"] and (pp == 1 or (gbs // (dp * b)) % pp):
        return False
    return c["zero"] < 2 or pp == 1 or bool(c["zero_with_pp"])


@settings(max_examples=60, deadline=None)
@given(candidate_columns(), st.sampled_from([8, 16, 32]))
def test_valid_mask_equals_build_layout(columns, gpus):
    """valid_mask and build_layout run the same rule functions, so they are also both checked against
    the rules written out by hand (:func:`_by_hand`): a broken rule shows here."""
    cluster, model = preset_cluster("dgx-a100", gpus // 8), get_preset("gpt3-125m")
    mask = valid_mask(Candidates.of(**columns), gpus, model)
    for i, ok in enumerate(mask):
        c = {k: int(v[i]) for k, v in columns.items()}
        assert bool(ok) == _by_hand(c, gpus), c
        schedule = ScheduleKind.INTERLEAVED if c["interleaved"] else ScheduleKind.ONE_F_ONE_B
        try:
            build_layout(Strategy(global_batch=c["global_batch"], micro_batch=c["micro_batch"], dp=c["dp"],
                                  tp=c["tp"], pp=c["pp"], schedule=schedule, virtual_stages=c["v"],
                                  zero=ZeroStage(c["zero"]), framework=Framework.FSDP2 if c["zero_with_pp"] else None),
                         cluster, model)
            built = True
        except SpecError:
            built = False
        assert bool(ok) == built, c
