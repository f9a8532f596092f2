"""The rank-step probe's plain-model figures as the median over several independent launches.

One launch of :func:`executor.step_bench.time_rank_steps` set every host-bound case's host time, and on this VM one
launch read the per-operator forward 17-24 % below every other calibration of two days (8.32 µs against
10.0-11.0 µs; docs/validation.md, "Quiet suites after the twentieth session's merges"): the spread between launches,
not within one (its 100 steps' median is stable), is the calibration's largest error. ``calibrate --compute`` now
runs :data:`STEP_PROBE_LAUNCHES` launches; the first with its DDP and FSDP2 steps, the others the plain steps only.
From each launch's plain steps it derives, by the formulas of :mod:`executor.step_bench` [src: own-rank-step-probe]
[src: own-step-loop-probe],

    forward_us, backward_us = executor.calibrate_calls.step_call_overheads(warm_forward_s, backward_s)
    op_call_us              = executor.calibrate_host.adamw_call_us(the launch's AdamW step)
    step_loop_us            = max(0, outside_s) · 1e6,   first_cold_us = max(0, first_cold_s) · 1e6

and writes each field as the median over the launches (:func:`with_launch_medians`, :func:`with_launch_loop`); each
launch's value and the min..max stay in the report (:class:`StepLaunches`). DDP's and FSDP2's terms are differences
against the plain steps of the same processes (paired), so they stay the first launch's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, fields, replace

STEP_PROBE_LAUNCHES = 3
"""Independent launches of the rank-step probe whose plain-model figures are medianed: with 3 one launch reading
low (or high) by itself moves no field, where with 1 it moved every host-bound case (the twentieth session's r1, 25.9 %
MAPE against r2's 15.2 %); the extra two launches run the plain steps only (~105 steps of the tiny model on 2
processes, a few seconds each), so the cost stays modest against the rest of ``calibrate --compute``."""


@dataclass(frozen=True, kw_only=True)
class LaunchFields:
    """The fields one launch's plain steps give (module docstring), µs."""

    forward_us: float
    """``device.kernel_launch_overhead_us``."""
    backward_us: float
    """``device.backward_call_overhead_us``."""
    op_call_us: float
    """``device.op_call_overhead_us``."""
    step_loop_us: float
    """``host.step_loop_us``."""
    first_cold_us: float
    """``host.first_microbatch_cold_us``."""


FIELD_NAMES = tuple(f.name for f in fields(LaunchFields))


@dataclass(frozen=True)
class StepLaunches:
    """Each launch's fields, in launch order, and their medians and spreads."""

    launches: tuple[LaunchFields, ...]

    def values(self, name: str) -> tuple[float, ...]:
        return tuple(getattr(launch, name) for launch in self.launches)

    def spread(self, name: str) -> tuple[float, float]:
        """(min, max) over the launches."""
        return min(self.values(name)), max(self.values(name))

    @property
    def median(self) -> LaunchFields:
        """Each field the median over the launches (of an even count: the mean of the middle two)."""
        return LaunchFields(**{name: statistics.median(self.values(name)) for name in FIELD_NAMES})

    def as_dict(self) -> dict:
        """For ``--json``: per field the median, the min..max and each launch's value."""
        median = self.median
        return {"launches": len(self.launches), **{name: {
            "median": getattr(median, name), "min": self.spread(name)[0], "max": self.spread(name)[1],
            "per_launch": list(self.values(name))} for name in FIELD_NAMES}}

    def note(self) -> str:
        """One line: the per-operator fields' medians with their spread and each launch's value."""
        median = self.median
        parts = (f"{label} {getattr(median, name):.2f} us (min..max {self.spread(name)[0]:.2f}.."
                 f"{self.spread(name)[1]:.2f}: " + " / ".join(f"{v:.2f}" for v in self.values(name)) + ")"
                 for label, name in (("forward", "forward_us"), ("backward", "backward_us"),
                                     ("per op call", "op_call_us"), ("step loop", "step_loop_us")))
        return f"median of {len(self.launches)} rank-step probe launches: " + ", ".join(parts)


def launch_fields(device, spec, micro_batch: int, adamw, dtype, steps) -> LaunchFields:
    """One launch's fields (module docstring): ``device`` the calibrated device (its roofline), ``spec`` the executed
    tiny model, ``adamw`` the AdamW tight loop's timing (its tensors and parameters), ``steps`` the launch's
    :class:`executor.step_timing.RankStepTiming`."""
    from executor.calibrate_calls import step_call_overheads
    from executor.calibrate_host import adamw_call_us

    per_call = step_call_overheads(device, spec, micro_batch, steps.warm_forward_s, steps.backward_s)
    op_call_us = adamw_call_us(device, replace(adamw, step=steps.optimizer_timing), dtype)
    return LaunchFields(forward_us=per_call.kernel_launch_overhead_us, backward_us=per_call.backward_call_overhead_us,
                        op_call_us=op_call_us, step_loop_us=max(0.0, steps.outside_s * 1e6),
                        first_cold_us=max(0.0, steps.first_cold_s * 1e6))


def with_launch_medians(device, launches: StepLaunches):
    """``device`` with its per-operator fields the launches' medians."""
    median = launches.median
    return replace(device, kernel_launch_overhead_us=median.forward_us, backward_call_overhead_us=median.backward_us,
                   op_call_overhead_us=median.op_call_us)


def with_launch_loop(node, launches: StepLaunches | None):
    """``node`` with ``host.step_loop_us`` and ``host.first_microbatch_cold_us`` the launches' medians; as is without a
    host section or launches."""
    if node.host is None or launches is None:
        return node
    median = launches.median
    return replace(node, host=replace(node.host, step_loop_us=median.step_loop_us,
                                      first_microbatch_cold_us=median.first_cold_us))
