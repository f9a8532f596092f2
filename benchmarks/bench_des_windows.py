"""Whether the main network's contended windows repeat from stage to stage, to the bit, per GPU count.

The step of ``bench_des.measure`` (GPT-3 175B, tp 8 × pp 8, 96 micro-batches, full recompute), each size in a fresh
process. From 512 nodes the flows the main network plays are the tree calls that a pipeline send (a stage's last
backward input gradient, with its dp − 1 replicas batched) or the tied all-reduce shares NIC 0 with
(``bench_des_parts.py``, docs/engine.md). Here every flow launch on the main network is logged as (instant,
``LAUNCH``, flows, bytes of the first) and every re-rating as (instant, ``RATING``, flows, a digest of their sorted
(rate, bytes left, bytes) after it), and the log is cut into *windows*, each starting at a launch of exactly dp − 1
flows with a non-zero latency (the send and its replicas). A window is the sequence of its entries with instants
taken relative to its start. Where two windows share a prefix of equal entries (the same launches and the same
rates and bytes left at the same relative instants), a joint fold of the send and the calls it contends with
(memoised per signature, binade and parity, as shortcut 10's replays are) could play that prefix once:
:func:`own_flows` counts the launched flows that would be left to play, the ceiling of such a fold.

Run by hand: ``python benchmarks/bench_des_windows.py [--gpus 32768 65536]``.
"""

from __future__ import annotations

import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


LAUNCH, RATING = "launch", "rating"
"""Kinds of log entries."""


def own_flows(windows: list[list[tuple[float, str, int, object]]]) -> list[int]:
    """Per window, the flows launched after its longest prefix equal to the prefix of an earlier window (entries
    compared exactly)."""
    out = []
    for k, window in enumerate(windows):
        shared = max((_common_prefix(window, earlier) for earlier in windows[:k]), default=0)
        out.append(sum(n for _, kind, n, _ in window[shared:] if kind == LAUNCH))
    return out


def _common_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def windows_of(log: list[tuple[float, str, int, object, float]], dp: int) -> list[list[tuple[float, str, int, object]]]:
    """``log`` (instant, kind, flows, value, latency of a launch's first flow) cut at each launch of ``dp − 1`` flows
    with a non-zero latency, instants relative to that launch; entries before the first such one are left out."""
    starts = [i for i, (_, kind, n, _, latency) in enumerate(log) if kind == LAUNCH and n == dp - 1 and latency > 0]
    out = []
    for k, i in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(log)
        t0 = log[i][0]
        out.append([(t - t0, kind, n, value) for t, kind, n, value, _ in log[i:end]])
    return out


def _digest(flows) -> str:
    """The sorted (rate, bytes left, bytes) of re-rated flows, hashed (equal states, equal digests)."""
    return hashlib.sha1(repr(sorted((f.rate, f.remaining, f.nbytes) for f in flows)).encode()).hexdigest()


def measure(gpus: int) -> dict:
    """Simulate ``bench_des``'s step at ``gpus`` GPUs with the main network's launches logged."""
    from bench_des import PP, TP, step_case
    from simulator.compile import compile_step
    from simulator.engine import network
    from simulator.engine.step import simulate

    dp = gpus // (TP * PP)
    cluster, model, strategy = step_case(gpus)
    work = compile_step(cluster, model, strategy)
    nets: list = []
    made, launch, rate = network.FlowNetwork.__init__, network.FlowNetwork._launch, network.FlowNetwork._rate
    network.FlowNetwork.__init__ = lambda self, env: (made(self, env), nets.append(self))[0]
    log: list = []

    def logged_launch(self, checked, single):
        if self is nets[0] and checked[0]:
            log.append((self.env.now, LAUNCH, len(checked[0]), checked[1][0], checked[2][0]))
        return launch(self, checked, single)

    def logged_rate(self, now, flows):
        rate(self, now, flows)
        if self is nets[0] and flows:
            log.append((now, RATING, len(flows), _digest(flows), 0.0))

    network.FlowNetwork._launch, network.FlowNetwork._rate = logged_launch, logged_rate
    res = simulate(work, cluster, trace=False)
    windows = windows_of(log, dp)
    return {"gpus": gpus, "step_s": res.step_time_s, "launched": sum(e[2] for e in log if e[1] == LAUNCH),
            "windows": [sum(n for _, kind, n, _ in w if kind == LAUNCH) for w in windows], "own": own_flows(windows),
            "ratings": [sum(1 for e in w if e[1] == RATING) for w in windows],
            "window_starts_s": [e[0] for e in log if e[1] == LAUNCH and e[2] == dp - 1 and e[4] > 0]}


def main() -> None:
    from bench_des import child_measure, sizes_or_child

    sizes = sizes_or_child(measure, [32768, 65536])
    if sizes is None:
        return
    print("| GPUs | flows launched | windows (start s: flows launched, re-ratings, flows left to play) "
          "| in windows | left |")
    print("|---:|---:|---|---:|---:|")
    for gpus in sizes:
        r = child_measure(__file__, gpus)
        cells = "; ".join(f"{t:.4f}: {w:,}, {q:,}, {o:,}"
                          for t, w, q, o in zip(r["window_starts_s"], r["windows"], r["ratings"], r["own"]))
        print(f"| {gpus:,} | {r['launched']:,} | {cells} | {sum(r['windows']):,} | {sum(r['own']):,} |", flush=True)


if __name__ == "__main__":
    main()
