"""The error each layout rule raises for one strategy, worded with its fix.

:mod:`simulator.strategy.rules` says *which* rule a candidate breaks, for one strategy or for numpy
arrays of many (the planner's vector check); this module says *how* to tell the user, for the one
strategy :func:`simulator.strategy.layout.build_layout` checks: a :class:`SpecError` naming the
field and a value that would pass (``dp`` that the GPUs allow, a micro-batch that divides the
batch, ...). :func:`check_rules` runs the same rule functions as the planner, so the two cannot
disagree on what is valid.
"""

from __future__ import annotations

from functools import lru_cache

from simulator.errors import SpecError
from simulator.schedules import ScheduleKind, make_schedule
from simulator.strategy.rules import Candidates, first_violation
from simulator.strategy.spec import Strategy
from simulator.workload.protocol import divisors, one_of


def _pp_error(s: Strategy, dp: int, gpus: int, layers: int | None) -> SpecError:
    n = s.pp * s.virtual_stages
    if layers is None:
        return SpecError("pp", f"{s.pp}: a model known only by its parameter count has no layers to split; "
                         "give a transformer or a layer list, or use pp 1")
    return SpecError("pp", f"pp·virtual_stages = {n} exceeds the model's {layers} layers; use at most {layers} "
                     "stages")


def _dp_error(s: Strategy, dp: int, gpus: int, layers: int | None) -> SpecError:
    model = s.tp * s.pp * s.cp
    names = "tp·pp·cp" if s.cp > 1 else "tp·pp"
    if s.dp is None:
        return SpecError("tp", f"{names} = {model} does not divide the {gpus} GPUs; choose {names} from "
                         f"{one_of(divisors(gpus))}")
    fix = (f"use dp {gpus // model}" if gpus % model == 0 else f"choose {names} from {one_of(divisors(gpus))}")
    cp_text = f"·{s.cp}" if s.cp > 1 else ""
    return SpecError("dp", f"dp·{names} = {s.dp}·{s.tp}·{s.pp}{cp_text} = {s.dp * model} does not match the "
                     f"{gpus} GPUs; {fix}")


def _batch_error(s: Strategy, dp: int, gpus: int, layers: int | None) -> SpecError:
    return SpecError("global_batch", f"{s.global_batch} does not split over dp={dp} replicas; use a multiple "
                     f"of {dp}")


MAX_SUGGESTED_MBS = 4096
"""Largest micro-batch an error message suggests (the divisors of a huge batch are not listed)."""


def _micro_batch_error(s: Strategy, dp: int, gpus: int, layers: int | None) -> SpecError:
    per_replica = s.global_batch // dp
    return SpecError("micro_batch", f"{s.micro_batch} does not divide the {per_replica} samples per replica; "
                     f"use {one_of(divisors(per_replica, up_to=MAX_SUGGESTED_MBS))}")


def _schedule_error(s: Strategy, dp: int, gpus: int, layers: int | None) -> SpecError:
    try:  # the schedule generator words its own precondition
        make_schedule(s.schedule, s.pp, s.global_batch // (dp * s.micro_batch), s.virtual_stages)
    except SpecError as err:
        return err
    raise AssertionError("rules.RULES and the schedule generator disagree")  # pragma: no cover


def _ep_error(s: Strategy, dp: int, gpus: int, layers: int | None) -> SpecError:
    return SpecError("ep", f"{s.ep} does not divide dp={dp}: the experts are sharded over the data-parallel "
                     f"ranks; use ep {one_of(divisors(dp))}")


def _zero_error(s: Strategy, dp: int, gpus: int, layers: int | None) -> SpecError:
    return SpecError("zero", f"ZeRO-{int(s.zero)} with pp {s.pp}: {s.resolved_framework.value} cannot partition "
                     "gradients across a pipeline (DeepSpeed's pipeline engine and Megatron-LM stop at ZeRO-1); "
                     "use zero 1, pp 1, or framework fsdp2")


_ERRORS = {"pp": _pp_error, "dp": _dp_error, "global_batch": _batch_error, "micro_batch": _micro_batch_error,
           "micro_batches": _schedule_error, "ep": _ep_error, "zero": _zero_error}
"""The error each rule of :data:`simulator.strategy.rules.RULES` raises, with the fix."""


def check_rules(s: Strategy, dp: int, gpus: int, layers: int | None) -> None:
    """Raise the error of the first rule of :data:`~simulator.strategy.rules.RULES` that ``s`` breaks with
    ``dp`` replicas on ``gpus`` worker GPUs and a model of ``layers`` layers (None: no layer count)."""
    field = first_broken(dp, s.tp, s.pp, s.virtual_stages, s.micro_batch, s.global_batch,
                         s.schedule is ScheduleKind.INTERLEAVED and s.virtual_stages > 1, int(s.zero),
                         s.resolved_framework.partitions_gradients_with_pipeline, s.ep, s.cp, gpus, layers)
    if field is not None:
        raise _ERRORS[field](s, dp, gpus, layers)


@lru_cache(maxsize=4096)
def first_broken(dp: int, tp: int, pp: int, v: int, micro_batch: int, global_batch: int, interleaved: bool,
                 zero: int, zero_with_pp: bool, ep: int, cp: int, gpus: int, layers: int | None) -> str | None:
    """:func:`~simulator.strategy.rules.first_violation` of one candidate, remembered by the integers the rules
    read (they read nothing else): a planner lays out thousands of strategies that differ only in fields no
    rule reads (recomputation, attention, placement, gradient sync), and one check on length-1 arrays costs
    more than the rest of a layout."""
    one = Candidates.of(dp=dp, tp=tp, pp=pp, v=v, micro_batch=micro_batch, global_batch=global_batch,
                        interleaved=interleaved, zero=zero, zero_with_pp=zero_with_pp, ep=ep, cp=cp)
    return first_violation(one, gpus, layers)
