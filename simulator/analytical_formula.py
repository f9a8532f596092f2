"""The analytical engine's closed form, in numpy over a batch of candidates (leading axis N).

Inputs (:class:`StepArrays`, one row per candidate; n = p·v chunks, p pipeline ranks, J buckets):

- per chunk c, per micro-batch: ``F[c]`` forward action time and ``B[c]`` backward action time
  (compute + blocking TP calls + exposed ZeRO/offload fetches; B includes recomputation);
- per boundary k (chunk k → k+1): ``cf[k]``, ``cb[k]`` the forward and backward p2p times;
- per rank r: its gradient-sync exposure past its last backward (``tail``, from the calls'
  durations and ready fractions by :func:`sync_exposure`), the optimizer ``opt``, the calls after
  the step ``after``.

Pipeline (m micro-batches; w_c = F_c + B_c; W_r = Σ of w over rank r's chunks; C = Σcf + Σcb):

- GPipe: ``T = Σ_c w_c + (m−1)·(max F + max B) + C`` — the longest path through the
  (stage × micro-batch) grid; exact for any stage times (Huang et al. 2019's (m+p−1) steps).
- 1F1B (PipeDream-Flush): ``T = Σ_c w_c + (m−1)·P + C`` with the steady-state period
  ``P = max(max_c w_c, max_r (Σ_{s≥r} w_s + Σ_{k≥r} (cf_k + cb_k)) / (p − r))`` over ranks whose
  p − r in-flight micro-batches fit in m: rank r's forward of a micro-batch must travel to the last
  stage and back before its backward, while it works on p − r micro-batches. With equal stages
  and free p2p this is Narayanan et al. SC'21's (m + p − 1)·(t_f + t_b), bubble (p−1)/m.
- Interleaved (v > 1): ``T = m·max W + (Σ_r W_r − max W)/v + C``: bubble (p−1)/(v·m) of the
  ideal time for equal stages (Narayanan et al. SC'21 §2.2).

GPipe is exact against :func:`simulator.schedules.dry_run`; 1F1B and interleaved are exact for
equal stages without p2p, and within ~1 % with p2p latency or edge-heavy stages (tests).

After the pipeline, rank r's last backward (of its first chunk) ends at ``T − D_r`` with
``D_r = Σ_{k<r} (B_k + cb_k)``. Its gradient buckets start when ready (bucket j at fraction
``sync_f[j]`` of that last backward) on one communication stream, in order:
``end_j = max(ready_j, end_{j−1}) + d_j``. What runs past the backward is exposed; then the
optimizer, then the after-step calls. The step ends when the last rank does; a data read
slower than the step (prefetched) adds the difference as a stall.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.results import Category

EXPOSED_KINDS = (Category.DP, Category.PS, Category.ZERO, Category.OFFLOAD)
"""Categories a gradient-sync or after-step call can be charged to (index = kind code)."""
SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED = 0, 1, 2


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
    """(N, n, 6) per chunk: forward, backward, recompute, TP, exposed ZeRO, exposed offload seconds."""
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


def pipeline_time(a: StepArrays, m: np.ndarray, sched: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, p2p-on-critical-path seconds) of the pipeline part, per candidate."""
    p, v = a.p, a.v
    w = a.F + a.B
    hops = a.cf.sum(axis=1) + a.cb.sum(axis=1)
    sum_w, max_w = w.sum(axis=1), w.max(axis=1)
    gpipe = sum_w + (m - 1) * (a.F.max(axis=1) + a.B.max(axis=1)) + hops
    if v > 1:
        W = w.reshape(len(w), v, p).sum(axis=1)
        inter = m * W.max(axis=1) + (W.sum(axis=1) - W.max(axis=1)) / v + hops
        return np.where(sched == SCHED_GPIPE, gpipe, inter), hops
    c = a.cf + a.cb
    period = max_w.copy()
    for r in range(p):
        cyc = (w[:, r:].sum(axis=1) + c[:, r:].sum(axis=1)) / (p - r)
        period = np.where(p - r <= m, np.maximum(period, cyc), period)
    one = sum_w + (m - 1) * period + hops
    stall = (m - 1) * (period - max_w)
    return np.where(sched == SCHED_GPIPE, gpipe, one), np.where(sched == SCHED_GPIPE, hops, hops + stall)


def evaluate(a: StepArrays, m: np.ndarray, sched: np.ndarray, prefetch: np.ndarray) -> dict[str, np.ndarray]:
    """Step time, per-rank finish, and the per-rank breakdown ``(N, p, len(Category))``."""
    p = a.p
    m = np.asarray(m, dtype=float)
    T, crit_pp = pipeline_time(a, m, sched)
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
    per_rank = a.parts.reshape(len(T), a.v, p, 6).sum(axis=1) * m[:, None, None]   # (N, p, 6)
    for i, cat in enumerate((Category.FORWARD, Category.BACKWARD, Category.RECOMPUTE, Category.TP, Category.ZERO,
                             Category.OFFLOAD)):
        out[:, :, cats.index(cat)] += per_rank[:, :, i]
    for k, cat in enumerate(EXPOSED_KINDS):
        out[:, :, cats.index(cat)] += a.sync_exposed[:, :, k] + a.after[:, :, k]
    out[:, :, cats.index(Category.OPTIMIZER)] = a.opt
    idle = last_end - per_rank.sum(axis=2)
    out[:, :, cats.index(Category.PP)] = np.minimum(np.maximum(idle, 0.0), crit_pp[:, None])
    out[:, :, cats.index(Category.DATA)] = stall[:, None]
    out[:, :, cats.index(Category.BUBBLE)] = step[:, None] - out.sum(axis=2)
    slowest = np.argmax(finish, axis=1)
    return {"step_time_s": step, "finish_s": finish, "breakdown": out, "slowest": slowest, "pipeline_s": T}
