"""The order of a pipeline's postings in the executor's own pipeline: which side of each transfer posts first, by
how much, and what a send-first transfer costs the receiver, from ``benchmarks/pipeline_p2p_stamps.py``'s stamps.

- :func:`send_first_split`: send-first transfers apart by whether the receiver waited at once after posting its
  receive (GPipe: every receive is posted right before the action that needs it) or computed in between (1F1B's
  activations, posted one action ahead);
- :func:`order_report`: per transfer, the margin (receive posting − send posting) in the run beside the one
  :func:`simulator.receive_first.walk_transfers` gives on the run's own medians, the margins' spread over steps, and
  per boundary the send-first share in the run against Φ(walk margin / spread)
  (:func:`simulator.receive_first.send_first_share`).

Printed by ``PYTHONPATH=. python benchmarks/pipeline_p2p_stamps.py``; results: docs/validation.md (pipe21).
"""

from __future__ import annotations

import statistics

from benchmarks.pipeline_p2p_stamps import ARRIVED_NS, _pct, _walk_inputs


def send_first_split(ranks: list) -> dict[str, list[float]]:
    """Send-first transfers' latencies, µs, apart by what the receiver did between posting the receive and waiting on
    it: ``blocked`` (nothing: it waited at once, its core free), from the *start* of the receive's posting to the end
    of the wait, so that a transfer which completes while the receiver is still inside its posting (gloo's pair lock,
    seen at load 16 in pipe21) is counted; ``computing`` (a forward or backward in between), the wait alone (what the
    transfer left exposed after the receiver's own work). Receive-first transfers and waits whose data was already
    there (< ``ARRIVED_NS``) are left out."""
    out: dict[str, list[float]] = {"blocked": [], "computing": []}
    for k in range(len(ranks[0])):
        sends, recvs, waits = {}, {}, {}
        computes = []
        for r in ranks:
            for tag, s, mb, t0, t1 in r[k][2]:
                if tag in ("postSF", "postSB"):
                    sends[(tag[-1], s + (1 if tag[-1] == "F" else -1), mb)] = t0
                elif tag in ("postRF", "postRB"):
                    recvs[(tag[-1], s, mb)] = (t0, t1)
                elif tag in ("waitRF", "waitRB"):
                    waits[(tag[-1], s, mb)] = (t0, t1)
                elif tag in ("F", "B"):
                    computes.append((s, t0, t1))
        for key, (w0, w1) in waits.items():
            if key not in sends or key not in recvs or w1 - w0 < ARRIVED_NS or recvs[key][1] <= sends[key]:
                continue
            (r0, r1), stage = recvs[key], key[1]
            busy = any(c[0] % len(ranks) == stage % len(ranks) and r1 <= c[1] and c[2] <= w0 for c in computes)
            out["computing" if busy else "blocked"].append((w1 - (w0 if busy else r0)) / 1e3)
    return out


def margins(ranks: list) -> dict[tuple[str, int, int], list[float]]:
    """Per transfer (``"F"``/``"B"``, sending stage, micro-batch), its margin in each timed step, µs: the end of its
    receive's posting − the start of its send's posting (positive: send first), what
    :func:`simulator.receive_first.send_first_share` reads against ``host.pipeline_order_spread_us``."""
    out: dict[tuple[str, int, int], list[float]] = {}
    for k in range(len(ranks[0])):
        sends, recvs = {}, {}
        for r in ranks:
            for tag, s, mb, t0, t1 in r[k][2]:
                if tag in ("postSF", "postSB"):
                    sends[(tag[-1], s, mb)] = t0
                elif tag in ("postRF", "postRB"):
                    recvs[(tag[-1], s - 1 if tag[-1] == "F" else s + 1, mb)] = t1
        for key, t_send in sends.items():
            if key in recvs:
                out.setdefault(key, []).append((recvs[key] - t_send) / 1e3)
    return dict(sorted(out.items()))


def spread_us(values: list[float]) -> float:
    """A normal's standard deviation from its p10..p90 (2.563 σ wide): robust to the few stalled steps."""
    return (_pct(values, .9) - _pct(values, .1)) / 2.563


def order_report(kind: str, v: int, ranks: list) -> str:
    """Per transfer after micro-batch 0: the run's margins (median, p10..p90) beside the model's walk on the run's
    medians, then the median spread over those transfers (``host.pipeline_order_spread_us``) and, per boundary, the
    share of send-first postings run vs Φ(walk margin / that spread)."""
    from simulator.receive_first import send_first_share

    run = {key: m for key, m in margins(ranks).items() if key[2] > 0}
    walk = model_walk(kind, v, ranks)
    spread = statistics.median(spread_us(m) for m in run.values()) if run else 0.0
    lines = ["    margins us, run median (p10..p90) / walk: " + "; ".join(
        f"{d}{s}.{mb} {statistics.median(m):.0f} ({_pct(m, .1):.0f}..{_pct(m, .9):.0f}) / "
        f"{walk[(d, s, mb)].margin_s * 1e6:.0f}" for (d, s, mb), m in run.items() if (d, s, mb) in walk)]
    bounds: dict[tuple[str, int], list] = {}
    for key, m in run.items():
        if key in walk:
            bounds.setdefault(key[:2], []).append((sum(x > 0 for x in m) / len(m),
                                                   send_first_share(walk[key].margin_s, spread * 1e-6)))
    lines.append(f"    spread (median over transfers) {spread:.0f} us; send-first share run / Phi(walk / spread): "
                 + "; ".join(f"{d}{s} {statistics.fmean(x[0] for x in xs):.2f} / "
                             f"{statistics.fmean(x[1] for x in xs):.2f}" for (d, s), xs in sorted(bounds.items())))
    return "\n".join(lines)


def model_walk(kind: str, v: int, ranks: list) -> dict:
    """The model's walk (:func:`simulator.receive_first.walk_transfers`) on this run's own medians, as
    :func:`model_shares`, keyed as :func:`margins`."""
    from simulator.receive_first import walk_transfers
    from simulator.schedules import ActionKind

    schedule, fwd, bwd, full, first = _walk_inputs(kind, v, ranks)
    n = schedule.n_stages
    keys = [(s, ActionKind.F) for s in range(n - 1)] + [(s, ActionKind.B) for s in range(1, n)]
    walked = walk_transfers(schedule, fwd, bwd, {k: full for k in keys}, {k: first for k in keys})
    return {(key[1].value, key[0], key[2]): w for key, w in walked.items()}
