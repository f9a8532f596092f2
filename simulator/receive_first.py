"""Pipeline transfers whose receive was posted before their send: no wait for a core.

On a loopback node (gloo over TCP between processes of one machine) every blocking call is charged the expected wait
for a core, ``W`` (:meth:`simulator.collectives.cost.Env.blocking_wait_s`), measured on back-to-back collectives. A
pipeline's p2p transfer does not always wait so. gloo's tcp pair is a rendezvous: a send whose receive is already
posted is written by the sending thread at once; a send posted first waits until the receive is posted, and then the
*sender's* device thread writes it, which needs a core while the sender's main thread computes [src: gloo-tcp-pair].
In the executor's own pipeline on 2 gloo processes the two cases differ by an order of magnitude: a blocked
receiver waited 73-123 µs (median) after a send whose receive was posted first, 737-915 µs after one posted first
[src: own-pipeline-p2p-latency-2026-11-25]. So a transfer whose receive was posted at or before its send starts
costs the call without ``W``, on a node that runs no more processes than it has cores (a blocked receiver's core is
then free for its transfer; with more processes other ranks take it, and the pair's measured wait stands):
:func:`receive_first_time_s`, put on the call as ``CommCall.receive_first_time_s``.

When torch's runtime posts each receive is data, not timing: ``_add_send_recv`` (torch 2.13,
``torch/distributed/pipelining/schedules.py`` lines 1406-1520) walks the ranks' compute lists in lock step (ranks
in order, each placing its next compute action once its input's receive or producing action is in its list) and,
as it places a sending action, appends the matching receive to the receiving rank's list, after whatever that rank
has placed so far [src: torch-pipelining]. :func:`receive_posts` replays that walk: per rank and compute action,
the receives posted right before it, i.e. when the rank's previous compute action (and its send) ended. The DES
stamps those posts as it plays the lists (:mod:`simulator.engine.rank`); the analytical engine prices each boundary
at the mean over its micro-batches of the two prices, classified by :func:`expected_prices`' list walk.

Which side posts first is decided by margins (receive posting − send posting) often far below the spread of the
actions before them (docs/validation.md, pipe19: the executor's 1F1B and interleaved runs post a boundary's
transfers send first in 13-79 % of the steps where the walk says 0 or 1). :func:`send_first_share` is the
probability ``Φ(m / σ)`` of a send-first posting for a walk margin ``m`` whose run-to-run spread is ``σ``;
``benchmarks/pipeline_p2p_stamps.py`` checks it against a run's shares (:func:`walk_transfers` gives the margins).
Pricing each transfer at that share in both engines was tried and reverted (docs/validation.md, pipe21): the
shares it gives miss 1F1B's measured ones, 1F1B and interleaved stay low at every spread (1F1B lower still up to
0.5 ms), and the engines part on GPipe as the spread grows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from simulator.schedules import Action, ActionKind, PipelineSchedule

TransferKey = tuple[int, ActionKind, int]
"""(sending stage, F activations or B gradients, micro-batch): one p2p transfer of a step."""


def receive_first_time_s(cluster, time_s: float, wait_s: float) -> float | None:
    """A p2p call's seconds when its receive was posted first (module docstring): ``time_s − wait_s`` (``wait_s`` the
    core wait the call's ``time_s`` holds) on a node whose processes do not outnumber its cores; None otherwise or
    without a wait (then the call costs ``time_s`` either way)."""
    from simulator.host_overhead import core_share

    if wait_s <= 0 or core_share(cluster, cluster.node.gpus_per_node) > 1.0:
        return None
    return max(0.0, time_s - wait_s)


def send_first_share(margin_s: float, spread_s: float) -> float:
    """Probability that a transfer's send is posted before its receive, ``Φ(margin_s / spread_s)`` (``margin_s`` =
    receive posting − send posting, positive: send first; module docstring); ``spread_s`` 0: 1 if ``margin_s > 0``
    else 0 (a tie is receive first, as gloo pairs a send with an already posted receive)."""
    if spread_s <= 0:
        return 1.0 if margin_s > 0 else 0.0
    return 0.5 * (1.0 + math.erf(margin_s / (spread_s * math.sqrt(2.0))))


def _transfer_of(act: Action, n_stages: int, rank_of) -> tuple[int, TransferKey] | None:
    """(receiving rank, transfer) that ``act`` sends, or None (last stage forward, first stage backward, or a
    neighbour on the same rank)."""
    if act.kind is ActionKind.W:
        return None
    forward = act.kind is ActionKind.F
    dst = act.stage + 1 if forward else act.stage - 1
    if not 0 <= dst < n_stages or rank_of(dst) == rank_of(act.stage):
        return None
    return rank_of(dst), (act.stage, ActionKind.F if forward else ActionKind.B, act.microbatch)


def _input_of(act: Action, n_stages: int) -> TransferKey | None:
    """The transfer ``act`` waits for (None: the first stage's forward, the last stage's backward, a split W); a
    backward's input is the next stage's B or I (keyed B, as the DES keys it)."""
    if act.kind is ActionKind.F:
        return (act.stage - 1, ActionKind.F, act.microbatch) if act.stage > 0 else None
    if act.kind is ActionKind.W or act.stage == n_stages - 1:
        return None
    return act.stage + 1, ActionKind.B, act.microbatch


def _made_here(need: TransferKey, placed: set) -> bool:
    """Whether the action producing ``need`` is among ``placed`` (a neighbour stage on the same rank)."""
    kinds = (ActionKind.F,) if need[1] is ActionKind.F else (ActionKind.B, ActionKind.I)
    return any(Action(need[0], k, need[2]) in placed for k in kinds)


def receive_posts(schedule: PipelineSchedule) -> tuple[tuple[tuple[TransferKey, ...], ...], ...]:
    """Per rank, per compute action of its list: the transfers whose receives torch's runtime posts right before
    it (module docstring). A ``ValueError`` if the lists cannot be walked (a malformed schedule)."""
    n, rank_of = schedule.n_stages, schedule.rank_of
    left = [list(acts) for acts in schedule.ranks]
    placed: list[set] = [set() for _ in left]          # compute actions and posted receives, per rank
    pending: list[list[TransferKey]] = [[] for _ in left]
    out: list[list[tuple[TransferKey, ...]]] = [[] for _ in left]
    while any(left):
        progress = False
        for r, acts in enumerate(left):
            if not acts:
                continue
            act, need = acts[0], _input_of(acts[0], n)
            if need is not None and need not in placed[r] and not _made_here(need, placed[r]):
                continue
            out[r].append(tuple(pending[r]))
            pending[r] = []
            placed[r].add(act)
            sent = _transfer_of(act, n, rank_of)
            if sent is not None:
                dst, key = sent
                pending[dst].append(key)
                placed[dst].add(key)
            acts.pop(0)
            progress = True
        if not progress:
            raise ValueError("the schedule's lists cannot be walked: a rank waits for an input never sent")
    return tuple(tuple(x) for x in out)


def expected_prices(schedule: PipelineSchedule, fwd_s: Sequence[float], bwd_s: Sequence[float],
                    full_s: dict[tuple, float], first_s: dict[tuple, float]) -> dict[tuple, tuple[float, float, float]]:
    """Per boundary and direction ``(chunk, kind)``, the mean over micro-batches of (1) its transfers' prices:
    ``first_s`` if its receive was posted at or before its send, else ``full_s`` (keyed by sending chunk and kind, one
    price per boundary); (2) their seconds from send to arrival, which wait for the receive's posting as the DES's do
    (gloo's rendezvous: what the send holds its rank's stream); and (3) the share of its transfers after micro-batch
    0's that are *serial*, sent before their receive was posted. Such a transfer moves only once its receiver posts
    the receive, right after the receiver's previous compute action, so the receiver then waits its whole price: in
    a flow shop the boundary is part of the receiving stage's server, not a server of its own (the DES's ``_p2p``).
    The closed form's paths already space a rank's actions by a send that paces them, so only the price enters them;
    the stream's floor reads the second, the GPipe formula the third. The walk times each rank's list as early as its
    inputs allow (each compute action ``fwd_s`` / ``bwd_s`` of its chunk, sends as delays without a stream), a
    receive posted when the rank's compute action before it ended (:func:`receive_posts`)."""
    prices: dict[tuple, list[tuple]] = {}
    for key, walked in walk_transfers(schedule, fwd_s, bwd_s, full_s, first_s).items():
        prices.setdefault(key[:2], []).append(walked)
    return {k: (sum(x.price_s for x in v) / len(v), sum(x.held_s for x in v) / len(v),
                sum(x.share for x in v[1:]) / (len(v) - 1) if len(v) > 1 else 0.0) for k, v in prices.items()}


class Walked(NamedTuple):
    """One transfer as :func:`walk_transfers` times it."""
    price_s: float
    """Its price: the receive-first one if its receive was posted at or before its send, else the full one."""
    held_s: float
    """Send posting to arrival: what it holds its sender's stream."""
    share: float
    """1 if it was posted send first, else 0 (:func:`send_first_share` without a spread)."""
    margin_s: float
    """Receive posting − send posting in the walk (positive: send first)."""


def walk_transfers(schedule: PipelineSchedule, fwd_s: Sequence[float], bwd_s: Sequence[float],
                   full_s: dict[tuple, float], first_s: dict[tuple, float]) -> dict[TransferKey, Walked]:
    """Per transfer, in the order its receivers take them (micro-batch 0's first on each boundary), how the list walk
    of :func:`expected_prices` times it."""
    n, posts = schedule.n_stages, receive_posts(schedule)
    free = [0.0] * len(schedule.ranks)
    nxt = [0] * len(schedule.ranks)
    posted: dict[TransferKey, float] = {}
    sent_at: dict[TransferKey, float] = {}
    arrive: dict[TransferKey, float] = {}
    out: dict[TransferKey, Walked] = {}
    while any(i < len(acts) for i, acts in zip(nxt, schedule.ranks)):
        progress = False
        for r, acts in enumerate(schedule.ranks):
            if nxt[r] >= len(acts):
                continue
            act, need = acts[nxt[r]], _input_of(acts[nxt[r]], n)
            for key in posts[r][nxt[r]]:
                posted.setdefault(key, free[r])
            if need is not None and schedule.rank_of(need[0]) != r:
                if need not in sent_at:
                    continue
                if need not in arrive:
                    if need not in posted:  # its receive is posted later in this rank's own list: not yet timed
                        continue
                    bound, margin = (need[0], need[1]), posted[need] - sent_at[need]
                    p = send_first_share(margin, 0.0)
                    price = (full_s if p else first_s)[bound]
                    arrive[need] = max(sent_at[need], posted[need]) + price
                    out[need] = Walked(price, arrive[need] - sent_at[need], p, margin)
                start = max(free[r], arrive[need])
            else:
                start = free[r]
            share = 1.0 if act.kind in (ActionKind.F, ActionKind.B) else 0.5
            free[r] = start + share * (fwd_s[act.stage] if act.kind is ActionKind.F else bwd_s[act.stage])
            if act.kind is not ActionKind.W:
                sent_at[(act.stage, ActionKind.F if act.kind is ActionKind.F else ActionKind.B, act.microbatch)] = free[r]
            nxt[r] += 1
            progress = True
        if not progress:
            raise ValueError("the schedule's lists cannot be walked: a rank waits for an input never sent")
    return out


def expected_boundaries(schedule: PipelineSchedule, fwd_s, bwd_s, cf, cb, cf_first, cb_first) -> tuple[list, ...]:
    """The analytical engine's p2p inputs (``cf[k]``, ``cb[k]``: boundary k, chunk k → k + 1, forward and backward)
    at the mean price :func:`expected_prices` gives each boundary's transfers, their streams' seconds
    (``stream_cf``, ``stream_cb``) and their serial seconds (``serial_cf``, ``serial_cb``: the mean price times the
    serial share, :func:`expected_prices`); ``*_first`` the receive-first prices (equal to the full ones where there
    is none)."""
    full = {**{(k, ActionKind.F): cf[k] for k in range(len(cf))}, **{(k + 1, ActionKind.B): cb[k] for k in range(len(cb))}}
    first = {**{(k, ActionKind.F): cf_first[k] for k in range(len(cf))},
             **{(k + 1, ActionKind.B): cb_first[k] for k in range(len(cb))}}
    mean = expected_prices(schedule, fwd_s, bwd_s, full, first)
    f = [mean.get((k, ActionKind.F), (cf[k], cf[k], 0.0)) for k in range(len(cf))]
    b = [mean.get((k + 1, ActionKind.B), (cb[k], cb[k], 0.0)) for k in range(len(cb))]
    serial_f, serial_b = ([x[0] * x[2] for x in side] for side in (f, b))
    return [x[0] for x in f], [x[0] for x in b], [x[1] for x in f], [x[1] for x in b], serial_f, serial_b
