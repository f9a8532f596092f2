"""The analytical engine's closed form, in numpy over a batch of candidates (leading axis N).

Inputs (:class:`StepArrays`, one row per candidate; n = p·v chunks, p pipeline ranks, J buckets):

- per chunk c, per micro-batch: ``F[c]`` forward action time and ``B[c]`` backward action time
  (compute + blocking TP calls + exposed ZeRO/offload fetches; B includes recomputation);
- per boundary k (chunk k → k+1): ``cf[k]``, ``cb[k]`` the forward and backward p2p times;
- per rank r: its gradient-sync exposure past its last backward (``tail``, from the calls'
  durations and ready fractions by :func:`sync_exposure`), the optimizer ``opt``, the calls after
  the step ``after``.

Pipeline (m micro-batches; w_c = F_c + B_c; W_r = Σ of w over rank r's chunks; C = Σcf + Σcb):

- GPipe: ``T = Σ_c w_c + (m−1)·(max(F ∪ cf) + max(B ∪ cb)) + C`` — the longest path through the
  (stage × micro-batch) grid; exact for any stage times (Huang et al. 2019's (m+p−1) steps). Each
  boundary's sends run one at a time, in micro-batch order, on the sending rank's p2p stream (as the DES's
  ``SendStream`` plays them): a flow shop of identical jobs whose servers are the stages *and* the
  boundaries, so a send slower than every stage's action paces the pipeline instead of the slowest stage
  (makespan of identical jobs = Σ of their times + (m−1)·the slowest server). A boundary whose sends are posted
  before their receives (``serial_cf`` / ``serial_cb``, :mod:`simulator.receive_first`: the receiver posts after its
  previous action, then waits the whole price) is no server of its own: it joins the receiving stage's,
  ``F_{k+1} + c̄_k`` (:func:`gpipe_servers`). Exact against the DES for v = 1; with v > 1 several boundaries share
  one rank's stream and this is a lower bound.
- 1F1B family (rank r runs d_r forwards, then one forward one backward; PipeDream-Flush has
  d_r = min(p − r, m)): ``T = max_r (Σ_{s<r} (w_s + cf_s + cb_s) + m·w_r + gain_r)``, the longest of
  these paths through the list schedule: fill to rank r, rank r's own actions in order, drain back;
  any window of rank r's actions from forward i to backward i may instead be a *round trip* of
  micro-batch i to the last stage and back, ``R_r = Σ_{s≥r} w_s + Σ_{k≥r} (cf_k + cb_k)``. The
  window holds ``d·F_r + B_r`` for i = 0, ``F_r + d·B_r`` for i = m − 1 (d = min(d_r, m)) and
  ``d_r·w_r`` in the steady state, where windows i, i + d_r, … are adjacent; so, if m − 1 ≥ d_r,
  ``gain_r = (R_r − d·F_r − B_r)⁺ + (R_r − F_r − d·B_r)⁺ + (⌊(m−1)/d_r⌋ − 1)·(R_r − d_r·w_r)⁺``, else
  only one of the first two fits. (The former single period ``P = max_r R_r/(p − r)`` counted
  fractional round trips, and one on a rank whose p − r = m never makes one: p = 2, m = 2 gave
  3w + 3c for the true 3w + 2c.) Each term is a real path, so T never exceeds
  :func:`simulator.schedule_dry_run.dry_run`; it equals it without p2p for stages within ±10 % of each
  other (B = 2F), and is within ~1.5 % below it with p2p up to a tenth of a forward (tests). Paths
  that cross several ranks' windows (rank r+1 entered from rank r's round trips) are not in the
  family: stages several times heavier than others can put the truth ~12 % higher.
- Interleaved (v > 1): ``T = m·max W + (Σ_r W_r − max W)/v + C``: bubble (p−1)/(v·m) of the
  ideal time for equal stages (Narayanan et al. SC'21 §2.2).
- k runs of a schedule of m micro-batches chained per step (:func:`simulator.schedules.chained`, gradient
  accumulation over k ``schedule.step()`` calls): ``k·T(m)``. Rank 0's last action of a run (its first chunk's
  last backward) ends the run, and the next run's work reaches rank r only after rank 0 starts it and the fill
  to r, when rank r's drain of the previous run is over: the runs do not overlap, each with its fill and drain.
- 1F1B family and interleaved: at least ``max_r (head_r + m·S_r + rest_r)``
  (:func:`simulator.analytical_send_stream.stream_floor`): rank r's sends one after another on its p2p stream
  (``S_r`` per micro-batch, :func:`send_stream_s`), after the path to its first send and before the path its
  last send feeds; the paths above treat a send as a delay, so a pipeline whose sends outlast its actions
  (gloo's per-call cost against a tiny model's micro-batch) is paced by that stream instead: interleaving
  multiplies a rank's sends by v.

GPipe is exact against :func:`simulator.schedule_dry_run.dry_run`; interleaved is exact for equal stages
without p2p, and within ~1 % with p2p latency or edge-heavy stages (tests). Which formula a
candidate gets is read from its schedule's action lists (:mod:`simulator.schedule_shape`).

After the pipeline, rank r's last backward (of its first chunk) ends at ``T − D_r`` with
``D_r = Σ_{k<r} (B_k + cb_k)``. Its gradient buckets start when ready (bucket j at fraction
``sync_f[j]`` of that last backward) on one communication stream, in order:
``end_j = max(ready_j, end_{j−1}) + d_j``. What runs past the backward is exposed; then the
optimizer, then the after-step calls. The step ends when the last rank does; a data read
slower than the step (prefetched) adds the difference as a stall.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.analytical_send_stream import send_stream_s, stream_floor  # noqa: F401 - send_stream_s: re-exported
from simulator.results import Category, slowest_index
from simulator.schedule_shape import PipelineFamily, ScheduleShape

EXPOSED_KINDS = (Category.DP, Category.PS, Category.ZERO, Category.OFFLOAD)
PART_KINDS = (Category.FORWARD, Category.BACKWARD, Category.RECOMPUTE, Category.TP, Category.ZERO, Category.OFFLOAD,
              Category.EP)
"""What a chunk's action time is made of, in the order of :attr:`StepArrays.parts`' last axis: compute,
blocking TP and EP calls, exposed ZeRO gathers or offload fetches."""
"""Categories a gradient-sync or after-step call can be charged to (index = kind code)."""


@dataclass
class StepArrays:
    """Numbers of N candidates that share p and v (see the module docstring)."""

    p: int
    v: int
    F: np.ndarray
    """(N, n) forward action seconds per chunk."""
    B: np.ndarray
    """(N, n) backward action seconds per chunk (recompute included)."""
    parts: np.ndarray
    """(N, n, len(PART_KINDS)) per chunk: seconds of each of :data:`PART_KINDS`."""
    cf: np.ndarray
    """(N, n−1) forward p2p seconds per boundary."""
    cb: np.ndarray
    """(N, n−1) backward p2p seconds per boundary."""
    tail: np.ndarray
    """(N, p) gradient-sync seconds past each rank's last backward (:func:`sync_exposure`)."""
    sync_exposed: np.ndarray
    """(N, p, len(EXPOSED_KINDS)) those seconds by category."""
    opt: np.ndarray
    """(N, p) optimizer seconds."""
    after: np.ndarray
    """(N, p, len(EXPOSED_KINDS)) after-step seconds by category."""
    data: np.ndarray
    """(N,) data read seconds of one step."""
    stream_cf: np.ndarray | None = None
    """(N, n−1) a forward send's seconds on its rank's p2p stream where they exceed ``cf`` (a send held until its
    receive is posted, :mod:`simulator.receive_first`); None: ``cf``."""
    stream_cb: np.ndarray | None = None
    """(N, n−1) the same for ``cb``."""
    serial_cf: np.ndarray | None = None
    """(N, n−1) of ``cf``, the seconds its receiving chunk waits after posting the receive (a send posted before its
    receive moves only then, :func:`simulator.receive_first.expected_prices`): part of chunk k+1's server in the
    GPipe flow shop; None: 0."""
    serial_cb: np.ndarray | None = None
    """(N, n−1) the same for ``cb`` (received by chunk k)."""


def sync_exposure(b_last: np.ndarray, d: np.ndarray, f: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tail, exposed by category) of gradient buckets: ``b_last`` (..., ) seconds of gradient-producing
    work in the last backward (:func:`simulator.analytical.gradient_work_s`), ``d``,
    ``f``, ``k`` (..., J) durations, ready fractions, category codes. Times are relative to the end of the
    last backward, so they do not depend on the pipeline: bucket j is ready at ``(f_j − 1)·b_last`` and
    ``end_j = max(ready_j, end_{j−1}) + d_j = Σ_{i≤j} d_i + max_{i≤j}(ready_i − Σ_{i'<i} d_i')``."""
    kinds = np.zeros(b_last.shape + (len(EXPOSED_KINDS),))
    if d.shape[-1] == 0:
        return np.zeros(b_last.shape), kinds
    ready = (f - 1.0) * b_last[..., None]
    cum = np.cumsum(d, axis=-1)
    end = cum + np.maximum.accumulate(ready - (cum - d), axis=-1)
    exposed = np.maximum(0.0, end - np.maximum(end - d, 0.0))
    for code in range(len(EXPOSED_KINDS)):
        kinds[..., code] = (exposed * (k == code)).sum(axis=-1)
    return np.maximum(0.0, end.max(axis=-1)), kinds


@dataclass(frozen=True)
class PipelineArrays:
    """The schedules of N candidates (:class:`~simulator.schedule_shape.ScheduleShape` stacked by :func:`stack`)."""

    m: np.ndarray
    """(N,) micro-batches."""
    forwards_first: np.ndarray
    """(N,) bool: the GPipe formula applies (:attr:`PipelineFamily.ALL_FORWARDS_FIRST`)."""
    in_flight: np.ndarray
    """(N, p) the forwards each rank runs before its first backward (1F1B family: d_r)."""
    schedules: np.ndarray | None = None
    """(N,) runs of the schedule chained per step (:attr:`ScheduleShape.schedules`; ``m`` is one run's); None: 1."""

    def take(self, index: np.ndarray) -> "PipelineArrays":
        """Rows ``index`` (a candidate per row)."""
        return PipelineArrays(m=self.m[index], forwards_first=self.forwards_first[index],
                              in_flight=self.in_flight[index],
                              schedules=None if self.schedules is None else self.schedules[index])


def stack(shapes: Sequence[ScheduleShape]) -> PipelineArrays:
    """One row per shape; all share p and v (the interleaved family is told by v > 1)."""
    runs = np.array([s.schedules for s in shapes], dtype=float)
    return PipelineArrays(m=np.array([s.m for s in shapes], dtype=float),
                          forwards_first=np.array([s.family is PipelineFamily.ALL_FORWARDS_FIRST for s in shapes]),
                          in_flight=np.array([s.in_flight for s in shapes], dtype=float).reshape(len(shapes), -1),
                          schedules=None if (runs == 1).all() else runs)


def _one_f_one_b(a: StepArrays, m: np.ndarray, d_all: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, p2p seconds on that path) of the 1F1B family: the longest of the paths of the module docstring."""
    w, c = a.F + a.B, a.cf + a.cb
    zero = np.zeros((len(w), 1))
    fill = np.concatenate([zero, np.cumsum(a.F[:, :-1] + a.B[:, :-1] + c, axis=1)], axis=1)
    hops_before = np.concatenate([zero, np.cumsum(c, axis=1)], axis=1)                       # (N, p)
    trip = np.cumsum((w[:, ::-1])[:, :-1] + c[:, ::-1], axis=1)[:, ::-1]                 # Σ_{s>r} w + Σ_{k≥r} c
    trip = np.concatenate([trip, zero], axis=1) + w                                       # R_r
    trip_hops = hops_before[:, -1:] - hops_before
    best, best_hops = np.zeros(len(w)), np.zeros(len(w))
    for r in range(a.p):
        F, B, R, d = a.F[:, r], a.B[:, r], trip[:, r], d_all[:, r]
        dm = np.minimum(d, m)
        g0, g_last, g = R - (dm * F + B), R - (F + dm * B), R - d * (F + B)
        both = m - 1 >= d
        middle = np.where(both, np.floor((m - 1) / np.maximum(d, 1)) - 1, 0.0)
        taken0, taken_last, taken_mid = g0 > 0, g_last > 0, g > 0
        one = np.maximum(g0, g_last) > 0  # only one of the two fits
        gain = np.where(both, np.maximum(g0, 0) + np.maximum(g_last, 0) + middle * np.maximum(g, 0),
                        np.maximum(np.maximum(g0, g_last), 0))
        trips = np.where(both, taken0 * 1.0 + taken_last + middle * taken_mid, one * 1.0)
        path = fill[:, r] + m * w[:, r] + gain
        hops = hops_before[:, r] + trips * trip_hops[:, r]
        better = path > best
        best, best_hops = np.where(better, path, best), np.where(better, hops, best_hops)
    return best, best_hops


def gpipe_servers(a: StepArrays) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((slowest forward stage server, its p2p seconds), (the same for backward)), each (N,): a chunk's server is
    its action plus the serial seconds of the transfer into it (``serial_cf`` / ``serial_cb``: a send posted before
    its receive, which the receiver waits for in full after posting; DES ``_p2p``)."""
    out = []
    for acts, serial, into in ((a.F, a.serial_cf, slice(1, None)), (a.B, a.serial_cb, slice(None, -1))):
        wait = np.zeros_like(acts)
        if serial is not None:
            wait[:, into] = serial
        top = np.argmax(acts + wait, axis=1)[:, None]
        out.append((np.take_along_axis(acts + wait, top, axis=1)[:, 0], np.take_along_axis(wait, top, axis=1)[:, 0]))
    return out[0], out[1]


def pipeline_time(a: StepArrays, pipe: PipelineArrays) -> tuple[np.ndarray, np.ndarray]:
    """(T, p2p-on-critical-path seconds) of the pipeline part, per candidate."""
    p, v, m = a.p, a.v, pipe.m
    w = a.F + a.B
    hops = a.cf.sum(axis=1) + a.cb.sum(axis=1)
    send_f, send_b = a.cf.max(axis=1, initial=0.0), a.cb.max(axis=1, initial=0.0)  # a send stream is a stage too
    (stage_f, wait_f), (stage_b, wait_b) = gpipe_servers(a)
    paced_f = np.where(send_f > stage_f, send_f, wait_f)  # the sends pace the (m − 1) steps
    paced_b = np.where(send_b > stage_b, send_b, wait_b)
    gpipe = w.sum(axis=1) + (m - 1) * (np.maximum(stage_f, send_f) + np.maximum(stage_b, send_b)) + hops
    gpipe_hops = hops + (m - 1) * (paced_f + paced_b)
    floor, floor_hops = stream_floor(a, m)  # no schedule ends before a send stream has sent (its own module)
    if v > 1:
        W = w.reshape(len(w), v, p).sum(axis=1)
        inter = m * W.max(axis=1) + (W.sum(axis=1) - W.max(axis=1)) / v + hops
        inter_hops = np.where(floor > inter, floor_hops, hops)
        inter = np.maximum(inter, floor)
        return np.where(pipe.forwards_first, gpipe, inter), np.where(pipe.forwards_first, gpipe_hops, inter_hops)
    one, one_hops = _one_f_one_b(a, m, pipe.in_flight)
    one_hops, one = np.where(floor > one, floor_hops, one_hops), np.maximum(one, floor)
    return np.where(pipe.forwards_first, gpipe, one), np.where(pipe.forwards_first, gpipe_hops, one_hops)


def evaluate(a: StepArrays, pipe: PipelineArrays, prefetch: np.ndarray) -> dict[str, np.ndarray]:
    """Step time, per-rank finish, and the per-rank breakdown ``(N, p, len(Category))``."""
    p, m = a.p, pipe.m
    T, crit_pp = pipeline_time(a, pipe)
    if pipe.schedules is not None:  # k runs back to back: each rank's first action of run i + 1 follows its run i
        T, crit_pp, m = T * pipe.schedules, crit_pp * pipe.schedules, m * pipe.schedules
    Bfirst = a.B[:, :p]
    drain = np.concatenate([np.zeros((len(T), 1)), np.cumsum(Bfirst[:, :-1] + a.cb[:, :p - 1], axis=1)], axis=1)
    last_end = T[:, None] - drain                                                   # (N, p)
    tail = a.tail
    finish = last_end + tail + a.opt + a.after.sum(axis=2)
    step0 = finish.max(axis=1)
    stall = np.where(prefetch > 0, np.maximum(0.0, a.data - step0), a.data)
    step = step0 + stall
    cats = list(Category)
    out = np.zeros((len(T), p, len(cats)))
    k = len(PART_KINDS)
    per_rank = a.parts.reshape(len(T), a.v, p, k).sum(axis=1) * m[:, None, None]   # (N, p, k)
    for i, cat in enumerate(PART_KINDS):
        out[:, :, cats.index(cat)] += per_rank[:, :, i]
    for k, cat in enumerate(EXPOSED_KINDS):
        out[:, :, cats.index(cat)] += a.sync_exposed[:, :, k] + a.after[:, :, k]
    out[:, :, cats.index(Category.OPTIMIZER)] = a.opt
    idle = last_end - per_rank.sum(axis=2)
    out[:, :, cats.index(Category.PP)] = np.minimum(np.maximum(idle, 0.0), crit_pp[:, None])
    out[:, :, cats.index(Category.DATA)] = stall[:, None]
    residual = step[:, None] - out.sum(axis=2)
    rounding = np.abs(residual) <= 1e-12 * step[:, None]   # float noise of the subtraction (a -5e-17 s bubble)
    out[:, :, cats.index(Category.BUBBLE)] = np.where(rounding, 0.0, residual)
    slowest = slowest_index(out)
    return {"step_time_s": step, "finish_s": finish, "breakdown": out, "slowest": slowest, "pipeline_s": T}
