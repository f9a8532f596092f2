"""The closed form's reading of a stage's gradient buckets (:func:`simulator.analytical.summarize_stages`): each
bucket's seconds, category code, whether it takes SMs and its ready fraction, as arrays read once per bucket tuple;
then per last backward the buckets' tail and exposed seconds (:func:`simulator.analytical_formula.sync_exposure`)
and the stretch of that backward by the buckets inside it (:func:`sync_stretch`, :mod:`simulator.interference`).
"""

from __future__ import annotations

import math

import numpy as np

from simulator.analytical_formula import EXPOSED_KINDS
from simulator.work import CommCall, CommKind, StageWork, Transport

KIND_CODE = {CommKind.DP: 0, CommKind.PS: 1, CommKind.ZERO: 2, CommKind.OFFLOAD: 3}


def sync_stretch(b_last: float, calls: tuple[CommCall, ...], fractions, sm_fraction: float) -> np.ndarray:
    """Per gradient bucket, ``f`` × its seconds inside the last backward (the closed form's bucket times,
    :func:`simulator.analytical_formula.sync_exposure`; end of the backward at 0): what it stretches
    that backward by (:mod:`simulator.interference`). :func:`stretch_prefix` of the calls' seconds and transports,
    the buckets after it 0."""
    out = np.zeros(len(calls))
    if sm_fraction <= 0 or not calls:
        return out
    prefix = stretch_prefix(b_last, [c.time_s for c in calls], [c.transport is Transport.COLLECTIVE for c in calls],
                            fractions, sm_fraction)
    out[:len(prefix)] = prefix
    return out


def stretch_prefix(b_last: float, times, takes_sms, fractions, sm_fraction: float) -> list[float]:
    """:func:`sync_stretch` of the buckets up to the first that ends at or after the end of the backward (every later
    bucket, of seconds ≥ 0, starts at or after that end: no overlap, 0), from their seconds, whether each takes SMs
    (:func:`simulator.interference.takes_sms`) and their ready fractions, as sequences of Python values (a bucketed
    sync's kept lists, :func:`sync_arrays`: no call's attributes read per bucket)."""
    out = []
    end, lo = -np.inf, -b_last
    # max(a, b) and min(a, b) of two floats written as the conditionals Python's own evaluate (``b if b > a else a``,
    # ``b if b < a else a``: the first argument on ties and NaNs), so the same float, signed zeros included
    for t, takes, f in zip(times, takes_sms, fractions):
        ready = (f - 1.0) * b_last
        end = (end if end > ready else ready) + t  # max(ready, end) + t
        if takes:  # overlap_s(end - t, end, -b_last, 0.0) inlined
            start = end - t
            inside = (0.0 if 0.0 < end else end) - (lo if lo > start else start)  # min(end, 0) - max(start, lo)
            out.append(sm_fraction * (inside if inside > 0.0 else 0.0))  # max(0, inside)
        else:
            out.append(0.0)
        if end >= 0.0:
            break
    return out


class Exposure:
    """:func:`simulator.analytical_formula.sync_exposure` of one bucket tuple: its operations that do not read the
    backward and cost most done once (the cumulative sum, which categories have buckets), the others per backward
    (:meth:`at`), the same numpy operations on the same values, so the same floats (tests/test_stage_sync_prefix.py).
    When the exposed seconds sum to a finite number (so each is finite and ≥ 0), a category without buckets keeps its
    0 (its masked sum would add +0.0 only) and a tuple of one category is that sum (its mask multiplies by 1.0)."""

    def __init__(self, d: np.ndarray, f: np.ndarray, k: np.ndarray) -> None:
        self.d, self.f, self.k = d, f, k
        self.cum = np.cumsum(d, axis=-1)  # kept: ~8 B a bucket (cum − d and f − 1 are not: two more arrays as long)
        self.codes = np.unique(k).tolist()

    def at(self, b_last: float) -> tuple[np.ndarray, np.ndarray]:
        """``sync_exposure(np.array(b_last), d, f, k)`` (:func:`simulator.analytical_formula.sync_exposure`)."""
        b = np.array(b_last)
        kinds = np.zeros(len(EXPOSED_KINDS))
        if self.d.shape[-1] == 0:
            return np.zeros(()), kinds
        end = self.cum + np.maximum.accumulate((self.f - 1.0) * b[..., None] - (self.cum - self.d), axis=-1)
        exposed = np.maximum(0.0, end - np.maximum(end - self.d, 0.0))
        total = exposed.sum(axis=-1)
        if not math.isfinite(total):
            codes = range(len(EXPOSED_KINDS))
        elif len(self.codes) == 1:
            kinds[self.codes[0]] = total
            codes = ()
        else:
            codes = self.codes
        for code in codes:
            kinds[code] = (exposed * (self.k == code)).sum(axis=-1)
        return np.maximum(0.0, end.max(axis=-1)), kinds


_CODE_OF_KIND_ID = {id(kind): KIND_CODE.get(kind, 0) for kind in CommKind}
""":data:`KIND_CODE` by the member's id (an int key: a bucketed sync has thousands of calls)."""


def call_runs(calls: tuple[CommCall, ...]) -> tuple[np.ndarray, list[CommCall]]:
    """``calls`` as runs of one object (a bucketed sync repeats one call per size, ``comm_part.bucketed``):
    each run's length, and its call."""
    n = len(calls)
    ids = np.fromiter(map(id, calls), dtype=np.int64, count=n)
    firsts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    lengths = np.diff(np.concatenate(([0], firsts, [n])))
    return lengths, [calls[0]] + [calls[i] for i in firsts.tolist()]


def times_and_codes(calls: tuple[CommCall, ...], runs=None) -> tuple[np.ndarray, np.ndarray]:
    """Each call's seconds and :data:`KIND_CODE`, as arrays, read once per run of one object (``runs``:
    :func:`call_runs` of ``calls``, if already read)."""
    if not calls:
        return np.zeros(0), np.zeros(0, dtype=int)
    lengths, heads = call_runs(calls) if runs is None else runs
    return (np.repeat(np.array([c.time_s for c in heads], dtype=float), lengths),
            np.repeat(np.array([_CODE_OF_KIND_ID[id(c.kind)] for c in heads], dtype=int), lengths))


def sums_by_code(calls: tuple[CommCall, ...]) -> np.ndarray:
    """Seconds of ``calls`` per :data:`KIND_CODE`, each added in call order (a cumulative sum: no
    pairwise regrouping), as the closed form adds them."""
    out = np.zeros(len(EXPOSED_KINDS))
    if calls:
        times, codes = times_and_codes(calls)
        for code in np.unique(codes).tolist():
            out[code] = np.cumsum(times[codes == code])[-1]
    return out


_TAKES_SMS_OF_ID = {id(t): t is Transport.COLLECTIVE for t in Transport}
""":func:`simulator.interference.takes_sms` by the transport member's id (as :data:`_CODE_OF_KIND_ID`)."""


def sync_arrays(st: StageWork, kept: dict) -> tuple:
    """(seconds, :data:`KIND_CODE`, takes SMs, ready fraction) of each of a stage's gradient buckets as arrays,
    those arrays' bytes (the part of :func:`stage_sync`'s key that is not the backward), the seconds, takes SMs
    and fractions as lists (a slot :func:`stage_sync` fills when it first needs them for :func:`stretch_prefix`) and
    their :class:`Exposure`: read once per pair of
    bucket and fraction tuples in ``kept``, by their ids. The entry holds the tuples, so no other object takes their
    ids while it lives (a search's structures that share a bucketed sync, :func:`simulator.compile.comm_part.bucketed`,
    ask again under every other backward: micro-batch, recompute)."""
    held = (st.grad_sync, st.grad_ready_fraction)
    key = ("sync arrays", id(held[0]), id(held[1]))
    got = kept.get(key)
    if got is None or got[0][0] is not held[0] or got[0][1] is not held[1]:
        runs = call_runs(st.grad_sync) if st.grad_sync else (np.zeros(0, dtype=np.int64), [])
        times, codes = times_and_codes(st.grad_sync, runs)
        fractions = np.array(st.grad_ready_fraction, dtype=float)
        sms = np.repeat(np.array([_TAKES_SMS_OF_ID[id(c.transport)] for c in runs[1]], dtype=bool), runs[0])
        blob = b"".join((times.tobytes(), codes.tobytes(), sms.tobytes(), fractions.tobytes()))
        collective_s = float(times[sms].sum()) if bool((times >= 0).all()) else None  # None: no bound (stage_sync)
        got = kept[key] = (held, times, codes, sms, fractions, blob, [None], Exposure(times, fractions, codes),
                           collective_s)
    return got[1:]


STRETCH_MARGIN = 1e-6
"""Relative margin of :func:`stretch_within`'s bound over the rounding of the stretch's floats (each bucket's
overlap is off by a few ulps of ``b_last + t``; at most :data:`simulator.compile.comm_part.MAX_BUCKETS` = 10⁵
buckets: ~10⁻¹⁰)."""


def stretch_within(b_last: float, sm_fraction: float, collective_s: float | None, tail) -> bool:
    """Whether the stretch of a backward of ``b_last`` seconds by its buckets (:func:`sync_stretch`, summed) is
    certainly at most ``tail``, so that :func:`stage_sync` keeps the exposure's answer without computing it: each
    bucket's stretch is ``f`` × its overlap with the window ``[−b_last, 0]``; the buckets run one after another, so the
    overlaps add up to at most the window and at most the SM-taking buckets' seconds ``collective_s``:
    ``f · (min(b_last, collective_s) + margin · (b_last + collective_s)) < tail`` bounds it with
    :data:`STRETCH_MARGIN` to spare. False (compute it) when a bucket's seconds are negative (``collective_s`` None),
    ``b_last`` is negative, or any of them is not a number (the comparison is then False)."""
    if collective_s is None or not b_last >= 0:
        return False
    return sm_fraction * (min(b_last, collective_s) + STRETCH_MARGIN * (b_last + collective_s)) < tail


def stage_sync(st: StageWork, b_last: float, sm_fraction: float,
               seen: dict[tuple, tuple[float, np.ndarray]], kept: dict | None = None) -> tuple[float, np.ndarray]:
    """(tail, exposed seconds by :data:`KIND_CODE`) of one stage's gradient buckets under its last backward
    of ``b_last`` seconds: :func:`sync_exposure`, then the stretch of that backward by the buckets inside it
    (:func:`sync_stretch`). It reads only the buckets' seconds, codes, transports and ready fractions, so
    stages whose buckets agree on those bit for bit (a pipeline's middle stages) share one answer in ``seen``;
    ``kept``: where the buckets' arrays are remembered between calls (:func:`sync_arrays`; None: nowhere)."""
    times, codes, sms, fractions, blob, lists, exposure, collective_s = sync_arrays(st, {} if kept is None else kept)
    # a pair, not one joined bytes: ``blob`` is the kept entry's own object, whose hash Python computes once and keeps
    # (25 bytes per bucket, thousands of buckets: joined, every ask copied and hashed them again)
    key = (np.array([b_last, sm_fraction]).tobytes(), blob)
    if key in seen:
        return seen[key]
    tail, exposed = exposure.at(b_last)  # sync_exposure(np.array(b_last), times, fractions, codes)
    if sm_fraction > 0 and len(times) and not stretch_within(b_last, sm_fraction, collective_s, tail):
        # sync_stretch: its non-zero prefix, summed over every bucket (the same sum)
        if lists[0] is None:  # read once, for the tuples some backward asks the stretch of (kept: ~40 B a bucket)
            lists[0] = (times.tolist(), sms.tolist(), fractions.tolist())
        prefix = stretch_prefix(b_last, *lists[0], sm_fraction)
        stretch = np.zeros(len(times))
        stretch[:len(prefix)] = prefix
        total = stretch.sum()
        if total > tail:  # the stretched backward ends after the buckets: the excess is theirs (the zeros add +0.0)
            excess = (total - tail) / total
            for j, s in enumerate(stretch[:len(prefix)]):
                exposed[codes[j]] += s * excess
            tail = total
    seen[key] = tail, exposed
    return tail, exposed


def kept_sums_by_code(calls: tuple[CommCall, ...], kept: dict) -> np.ndarray:
    """:func:`sums_by_code`, remembered in ``kept`` per tuple of calls by its id (the entry holds the tuple): a
    ZeRO-1/2 stage's after-step all-gathers are a bucketed tuple shared by a search's structures."""
    key = ("after sums", id(calls))
    got = kept.get(key)
    if got is None or got[0][0] is not calls:
        got = kept[key] = ((calls,), sums_by_code(calls))
    return got[1]
