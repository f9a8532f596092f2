"""Failures over a training run: expected time-to-train and goodput, in closed form and sampled.

Model: failures of the job form a Poisson process with mean time between failures
``M = mtbf_gpu_hours·3600 / gpus`` (any GPU failing stops the job). Training runs in segments of
``τ = checkpoint_interval_steps × step_time`` seconds of work, each followed by a checkpoint of
``δ`` seconds; a failure loses the segment in progress and costs a restart of ``R`` seconds (which
can itself be hit by a failure).

- Expected wall time, Daly (FGCS 2006, "A higher order estimate of the optimum checkpoint interval
  for restart dumps", eq. 11-12, exponential failures):
  ``T_wall = M · e^{R/M} · (e^{(τ+δ)/M} − 1) · T_solve / τ``; goodput = ``T_solve / T_wall``.
- Optimal interval: Young (CACM 1974) ``τ* = √(2δM)``; Daly's first-order refinement
  ``τ* = √(2δM) − δ`` (valid for δ < M/2).
- Sampled: the same process drawn with a seeded ``random.Random`` (mean of ``trials`` runs).
"""

from __future__ import annotations

import math
import random

from simulator.checks import positive_int
from simulator.errors import SpecError
from simulator.strategy import FailureModel

MAX_SAMPLED_DRAWS = 200_000
"""Cap on the expected random draws of one :func:`sampled_time_to_train_s` call (keeps a call well under
a second). A guard on work, not a model parameter."""


def _expected_draws(segments: list[float], m: float, restart_s: float) -> float:
    """Expected draws of one sampled run: a segment of ``τ`` seconds is hit ``e^{τ/M} − 1`` times on
    average (geometric retries of an exponential clock), and each restart takes ``e^{R/M}`` draws."""
    if restart_s / m > 700 or any(seg / m > 700 for seg in segments):
        return math.inf
    per_restart = math.exp(restart_s / m)
    return sum(1.0 + math.expm1(seg / m) * (1.0 + per_restart) for seg in segments)


def _check(step_time_s: float, train_steps: int) -> None:
    if not step_time_s > 0:
        raise SpecError("step_time_s", f"must be positive, got {step_time_s!r}")
    positive_int("train_steps", train_steps)


def expected_time_to_train_s(model: FailureModel, gpus: int, step_time_s: float, train_steps: int) -> float:
    """Daly's expected wall time to finish ``train_steps`` steps (see the module docstring)."""
    _check(step_time_s, train_steps)
    m = model.job_mtbf_s(gpus)
    tau = model.checkpoint_interval_steps * step_time_s
    solve = train_steps * step_time_s
    x = (tau + model.checkpoint_cost_s) / m
    if x > 700 or model.restart_cost_s / m > 700:
        return math.inf
    return m * math.exp(model.restart_cost_s / m) * math.expm1(x) * solve / tau


def sampled_time_to_train_s(model: FailureModel, gpus: int, step_time_s: float, train_steps: int,
                            seed: int = 0, trials: int = 100) -> float:
    """Mean wall time over ``trials`` seeded draws of the failure process (same model as Daly's)."""
    _check(step_time_s, train_steps)
    m = model.job_mtbf_s(gpus)
    per = model.checkpoint_interval_steps
    segments = [min(per, train_steps - i) * step_time_s + model.checkpoint_cost_s
                for i in range(0, train_steps, per)]
    draws = _expected_draws(segments, m, model.restart_cost_s)
    if draws > max(MAX_SAMPLED_DRAWS, 2 * len(segments)):
        raise SpecError("mtbf_gpu_hours", f"the job fails every {m:.3g} s on {gpus} GPUs on average, so a "
                        f"{max(segments):.3g} s checkpoint segment (with a {model.restart_cost_s:.3g} s restart) "
                        "almost never completes; raise the MTBF or checkpoint more often")
    trials = max(1, min(trials, int(MAX_SAMPLED_DRAWS // draws)))
    rng = random.Random(f"failures:{seed}")
    total = 0.0
    for _ in range(trials):
        t = 0.0
        for seg in segments:
            while True:
                x = rng.expovariate(1.0 / m)
                if x >= seg:
                    t += seg
                    break
                t += x
                while True:  # restart, possibly interrupted
                    y = rng.expovariate(1.0 / m)
                    if y >= model.restart_cost_s:
                        t += model.restart_cost_s
                        break
                    t += y
        total += t
    return total / trials


def failure_extras(model: FailureModel, gpus: int, step_time_s: float, train_steps: int,
                   seed: int = 0) -> dict[str, float]:
    """``time_to_train_s``, ``goodput`` (expected), the sampled time, and the Young/Daly intervals."""
    expected = expected_time_to_train_s(model, gpus, step_time_s, train_steps)
    young = model.young_interval_s(gpus)
    return {"time_to_train_s": expected, "goodput": train_steps * step_time_s / expected,
            "time_to_train_sampled_s": sampled_time_to_train_s(model, gpus, step_time_s, train_steps, seed),
            "train_steps": train_steps, "job_mtbf_s": model.job_mtbf_s(gpus),
            "young_interval_s": young, "daly_interval_s": max(young - model.checkpoint_cost_s, 0.0)}
