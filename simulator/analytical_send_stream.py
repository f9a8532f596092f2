"""Each rank's p2p send stream in the analytical engine's pipeline: its load and the floor it puts under the step.

The DES sends a rank's p2p transfers one at a time on its stream (``simulator/engine/rank.py`` ``_p2p``), in the
order of the rank's action list. Where the sends outlast the stages' actions (gloo on CPUs: ~1 ms per send against
~0.3 ms per micro-batch of the tiny model) that stream, not the compute, paces the pipeline. Per rank r with
``S_r`` seconds of sends per micro-batch (:func:`send_stream_s`) the stream's m·S_r seconds cannot start before its
first send's action has run, and what depends on its last send runs after it. So for the 1F1B family and
interleaved 1F1B:

    T ≥ max_r (head_r + m·S_r + rest_r)

- ``head_r``: the shortest path to the end of rank r's first sending action. Every rank starts with the forward of
  micro-batch 0 through its first chunk r: ``Σ_{c≤r} F_c + Σ_{k<r} cf_k`` when chunk r sends forward (r < n − 1);
  on the last rank of a pipeline with one chunk per rank (r = n − 1) the first send is its first backward's,
  ``Σ_c F_c + Σ_k cf_k + B_{n−1}``.
- ``rest_r``: the shortest path after rank r's last send, i.e. through what that send feeds. A rank's list ends
  with the backward of its first chunk r, which sends backward when r > 0: ``Σ_{c<r} B_c + Σ_{k<r−1} cb_k``. Rank 0's
  first chunk sends nothing backward: with one chunk per rank its last send is its last forward's,
  ``Σ_{c>0} F_c + Σ_{k>0} cf_k + Σ_c B_c + Σ_k cb_k``; with v > 1 it is the backward of chunk p (the last group of
  the cool-down before chunk 0's), ``Σ_{c<p} B_c + Σ_{k<p−1} cb_k``. :func:`first_send` and :func:`last_send` name
  these actions; ``tests/test_pipeline_send_stream.py`` checks them against the built schedules' lists.

Each term is a real path (the stream is one server, its first send waits for ``head_r``, ``rest_r`` waits for its
last), so the floor never exceeds the DES's step for the same inputs; the former floor ``m·max_r S_r`` left out
``head_r`` and ``rest_r`` (pp-dp of the CPU suite, 1F1B p = 2, m = 2, 4.25 ms sends: 8.49 ms against the DES's
16.08 ms pipeline, the 11 points between the two engines).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.schedules import ActionKind

if TYPE_CHECKING:
    from simulator.analytical_formula import StepArrays


def send_stream_s(a: StepArrays) -> np.ndarray:
    """(N, p) seconds of sends per micro-batch on each rank's p2p stream: the forward send of boundary k
    (chunk k → k+1) leaves rank k mod p, its backward send rank (k+1) mod p. The stream sends one at a time
    (the DES's ``SendStream``), so the m micro-batches' sends take m times this, whatever the schedule."""
    p = a.p
    cf = a.cf if a.stream_cf is None else a.stream_cf  # a send held until its receive is posted occupies the stream
    cb = a.cb if a.stream_cb is None else a.stream_cb
    out = np.zeros((cf.shape[0], p))
    for k in range(cf.shape[1]):
        out[:, k % p] += cf[:, k]
        out[:, (k + 1) % p] += cb[:, k]
    return out


def first_send(p: int, v: int, r: int) -> tuple[int, ActionKind]:
    """(chunk, kind) of rank r's first action that sends, in the 1F1B family and interleaved 1F1B (p > 1)."""
    return (r, ActionKind.F) if r < p * v - 1 else (r, ActionKind.B)


def last_send(p: int, v: int, r: int) -> tuple[int, ActionKind]:
    """(chunk, kind) of rank r's last action that sends, in the 1F1B family and interleaved 1F1B (p > 1)."""
    if r > 0:
        return r, ActionKind.B
    return (0, ActionKind.F) if v == 1 else (p, ActionKind.B)


def _until(a: StepArrays, chunk: int, kind: ActionKind) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, of which p2p) of the shortest path to the end of micro-batch 0's ``kind`` through ``chunk``."""
    if kind is ActionKind.F:
        hops = a.cf[:, :chunk].sum(axis=1)
        return a.F[:, :chunk + 1].sum(axis=1) + hops, hops
    hops = a.cf.sum(axis=1) + a.cb[:, chunk:].sum(axis=1)
    return a.F.sum(axis=1) + a.B[:, chunk:].sum(axis=1) + hops, hops


def _after(a: StepArrays, chunk: int, kind: ActionKind) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, of which p2p) of the shortest path after ``kind`` through ``chunk`` has sent (its send excluded)."""
    if kind is ActionKind.F:
        hops = a.cf[:, chunk + 1:].sum(axis=1) + a.cb.sum(axis=1)
        return a.F[:, chunk + 1:].sum(axis=1) + a.B.sum(axis=1) + hops, hops
    hops = a.cb[:, :max(chunk - 1, 0)].sum(axis=1)
    return a.B[:, :chunk].sum(axis=1) + hops, hops


def stream_floor(a: StepArrays, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N,) ``max_r (head_r + m·S_r + rest_r)`` (module docstring) and the p2p seconds on that path; zeros
    without boundaries (p = 1)."""
    n_rows = a.F.shape[0]
    best, best_hops = np.zeros(n_rows), np.zeros(n_rows)
    if a.p < 2:
        return best, best_hops
    stream = m[:, None] * send_stream_s(a)
    for r in range(a.p):
        head, head_hops = _until(a, *first_send(a.p, a.v, r))
        rest, rest_hops = _after(a, *last_send(a.p, a.v, r))
        path = head + stream[:, r] + rest
        better = path > best
        best = np.where(better, path, best)
        best_hops = np.where(better, head_hops + stream[:, r] + rest_hops, best_hops)
    return best, best_hops
