"""Whether the main network's contended windows repeat from stage to stage, to the bit, per GPU count.

The step of ``bench_des.measure`` (GPT-3 175B, tp 8 × pp 8, 96 micro-batches, full recompute), each size in a fresh
process. From 512 nodes the flows the main network plays are the tree calls that a pipeline send (a stage's last
backward input gradient, with its dp − 1 replicas batched) or the tied all-reduce shares NIC 0 with
(``bench_des_parts.py``, docs/engine.md). Here every flow launch on the main network is logged as (instant, flows,
bytes of the first), and cut into *windows*, each starting at a launch of exactly dp − 1 flows with a non-zero
latency (the send and its replicas). A window is the sequence of its launches as (instant − the window's start,
flows, bytes). Where two windows share a prefix of equal entries, a joint fold of the send and the calls it
contends with (memoised per signature, binade and parity, as shortcut 10's replays are) could play that prefix
once: :func:`own_flows` counts what would be left to play, the ceiling of such a fold.

Run by hand: ``python benchmarks/bench_des_windows.py [--gpus 32768 65536]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def own_flows(windows: list[list[tuple[float, int, float]]]) -> list[int]:
    """Per window, the flows of its launches after its longest prefix equal to the prefix of an earlier window
    (entries compared exactly: offset, flows, bytes)."""
    out = []
    for k, window in enumerate(windows):
        shared = max((_common_prefix(window, earlier) for earlier in windows[:k]), default=0)
        out.append(sum(flows for _, flows, _ in window[shared:]))
    return out


def _common_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def windows_of(launches: list[tuple[float, int, float, float]], dp: int) -> list[list[tuple[float, int, float]]]:
    """``launches`` (instant, flows, bytes of the first, latency of the first) cut at each launch of ``dp − 1`` flows
    with a non-zero latency; launches before the first such one are left out."""
    starts = [i for i, (_, n, _, latency) in enumerate(launches) if n == dp - 1 and latency > 0]
    out = []
    for k, i in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(launches)
        t0 = launches[i][0]
        out.append([(t - t0, n, nbytes) for t, n, nbytes, _ in launches[i:end]])
    return out


def measure(gpus: int) -> dict:
    """Simulate ``bench_des``'s step at ``gpus`` GPUs with the main network's launches logged."""
    from bench_des import MICRO_BATCHES, PP, TP
    from simulator.cluster.presets import load_preset
    from simulator.compile import compile_step
    from simulator.engine import network
    from simulator.engine.step import simulate
    from simulator.strategy import Recompute, Strategy
    from simulator.workload.presets import get_preset

    dp = gpus // (TP * PP)
    cluster = load_preset("dgx-a100").with_nodes(gpus // 8)
    strategy = Strategy(global_batch=MICRO_BATCHES * dp, tp=TP, pp=PP, recompute=Recompute.FULL)
    work = compile_step(cluster, get_preset("gpt3-175b"), strategy)
    nets: list = []
    made, launch = network.FlowNetwork.__init__, network.FlowNetwork._launch
    network.FlowNetwork.__init__ = lambda self, env: (made(self, env), nets.append(self))[0]
    launches: list = []

    def logged_launch(self, checked, single):
        if self is nets[0] and checked[0]:
            launches.append((self.env.now, len(checked[0]), checked[1][0], checked[2][0]))
        return launch(self, checked, single)

    network.FlowNetwork._launch = logged_launch
    res = simulate(work, cluster, trace=False)
    windows = windows_of(launches, dp)
    return {"gpus": gpus, "step_s": res.step_time_s, "launched": sum(n for _, n, _, _ in launches),
            "windows": [sum(n for _, n, _ in w) for w in windows], "own": own_flows(windows),
            "window_starts_s": [t for t, n, _, latency in launches if n == dp - 1 and latency > 0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[32768, 65536])
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    print("| GPUs | flows launched | windows (start s: flows, own flows) | in windows | own |")
    print("|---:|---:|---|---:|---:|")
    for gpus in args.gpus:
        out = subprocess.run([sys.executable, __file__, "--child", str(gpus)], check=True, capture_output=True,
                             text=True).stdout
        r = json.loads(out)
        cells = "; ".join(f"{t:.4f}: {w:,}, {o:,}" for t, w, o in zip(r["window_starts_s"], r["windows"], r["own"]))
        print(f"| {gpus:,} | {r['launched']:,} | {cells} | {sum(r['windows']):,} | {sum(r['own']):,} |", flush=True)


if __name__ == "__main__":
    main()
