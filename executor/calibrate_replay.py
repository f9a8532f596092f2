"""The calibration's probes: calls measured beside the fitted ones, each checked against the fitted cluster.

The default design (:mod:`executor.calibrate_run`) fits the per-call latency, hop latency and bandwidth to
gloo's native all-reduce and all-gather. Two more series are timed in the same launches (:data:`PROBE_SERIES`):

- **native broadcast** (gloo's binomial tree, ``registry.GLOO_NATIVE``): not fitted; its rows compare each
  measurement with what the fitted cluster says a native broadcast costs (``share·call`` plus ``⌈lg p⌉`` rounds
  of ``α + n/bw``, each round at the time-sharing of its busy processes:
  :func:`simulator.collectives.gloo.active_share_time_s`), the cost torch ZeRO-1's one broadcast per parameter
  tensor pays [src: torch-zero1-broadcasts]; a check of that formula at 2, 3 and 4 processes;
- **ring all-reduce replayed** with ``isend``/``irecv`` (``executor/p2p.py``), as the executor runs a plan that
  names an all-reduce algorithm: fits the one parameter ``comm.replay_step_us``
  (:mod:`simulator.collectives.replayed`), the others held at the native fit:

      T_meas ≈ T_ring(fitted) + S·share·x,   x = replay_step_us

  where ``T_ring`` is the executed schedule's time on the fitted cluster (its call, hops, bytes, reduction) and
  ``S`` its steps. ``x ≥ 0`` minimises ``Σ |T_ring + S·share·x − T_meas| / T_meas`` (the relative-L1 criterion
  of the main fit): the weighted median of ``(T_meas − T_ring) / (S·share)`` with weights ``S·share / T_meas``.
  Fitting it apart keeps the replays' larger spread out of the native parameters the other plans' calls use.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.collectives.base import Op

NATIVE = "native"
PROBE_SERIES = ((Op.BROADCAST, NATIVE), (Op.ALL_REDUCE, "ring"))
"""(op, algorithm) timed beside the fitted series in the default design (module docstring)."""
REPLAY_SERIES = (Op.ALL_REDUCE, "ring")
"""The probe whose rows fit ``comm.replay_step_us``."""


def _steps_share(cluster, measurement, schedules) -> float:
    """``S · share`` of one replayed measurement: its schedule's steps (each at its busy processes' share,
    :func:`simulator.collectives.replayed.weighted_steps`; a ring's all 1) × its node's time-sharing."""
    from executor.calibrate import on_node
    from simulator.collectives.cost import Env
    from simulator.collectives.replayed import weighted_steps

    schedule = schedules[(measurement.op, measurement.algorithm, measurement.ranks, measurement.nbytes)]
    node = on_node(cluster, measurement.ranks)
    return weighted_steps(node, schedule) * Env(node, None).time_share


def weighted_median(values: list[float], weights: list[float]) -> float:
    """The smallest value at which the cumulative weight (values ascending) reaches half the total."""
    pairs = sorted(zip(values, weights))
    half, acc = sum(weights) / 2, 0.0
    for value, weight in pairs:
        acc += weight
        if acc >= half:
            return value
    return pairs[-1][0]


def fit_replay_step(cluster, measurements, cases) -> float:
    """``replay_step_us`` (µs, >= 0) for the replayed ``measurements`` on the natively fitted ``cluster``
    (module docstring); ``cases`` are the launches' cases, whose schedules ran."""
    from executor.calibrate import TARGET, executed_time, fit_rows

    if not measurements:
        return 0.0
    schedules = {(c.timed_schedule.op, c.algorithm, len(c.timed_schedule.ranks), c.timed_schedule.nbytes):
                 c.timed_schedule for c in cases if c.timed_schedule is not None}
    bare = replace(cluster, comm=replace(cluster.comm, replay_step_us=0.0))
    rows = fit_rows(bare, measurements, executed_time(cases))
    values, weights = [], []
    for m, row in zip(measurements, rows):
        a = _steps_share(bare, m, schedules) * 1e-6  # seconds per µs of replay_step_us
        measured = getattr(m, TARGET)
        values.append((measured - row.estimate_s) / a)
        weights.append(a / measured)
    return max(0.0, weighted_median(values, weights))


def split_probes(measurements, probes=PROBE_SERIES):
    """``(fitted, replays, checked)``: the measurements of the fitted series, of :data:`REPLAY_SERIES` (when
    among ``probes``) and of the other probes."""
    fitted, replays, checked = [], [], []
    for m in measurements:
        key = (m.op, m.algorithm)
        if key == REPLAY_SERIES and key in probes:
            replays.append(m)
        elif key in probes:
            checked.append(m)
        else:
            fitted.append(m)
    return fitted, replays, checked
