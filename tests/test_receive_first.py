"""Pipeline transfers whose receive was posted first (simulator/receive_first.py): torch's posting order, the price,
both engines."""

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.receive_first import (expected_prices, receive_first_time_s, receive_posts, send_first_share,
                                     walk_transfers)
from simulator.schedules import ActionKind, gpipe, interleaved_1f1b, one_f_one_b

DATA = Path(__file__).parent / "data" / "suite_default"
F, B = ActionKind.F, ActionKind.B


def _torch_posts(schedule):
    """The receives torch 2.13's ``_add_send_recv`` puts before each compute action of each rank's list."""
    from torch.distributed.pipelining.schedules import _Action, _add_send_recv

    compute = {r: [_Action.from_str(str(a)) for a in acts] for r, acts in enumerate(schedule.ranks)}
    lists = _add_send_recv(compute, lambda stage: stage % schedule.p, schedule.n_stages)
    out = []
    for r in sorted(lists):
        per, now = [], []
        for a in lists[r]:
            name = a.computation_type.name
            if name in ("FORWARD", "FULL_BACKWARD", "BACKWARD_INPUT", "BACKWARD_WEIGHT"):
                per.append(tuple(now))
                now = []
            elif name == "RECV_F":
                now.append((a.stage_index - 1, F, a.microbatch_index))
            elif name == "RECV_B":
                now.append((a.stage_index + 1, B, a.microbatch_index))
        out.append(tuple(per))
    return tuple(out)


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("m", [2, 4, 8])
def test_receive_posts_are_torchs(p, m):
    schedules = [gpipe(p, m), one_f_one_b(p, m)] + ([interleaved_1f1b(p, m, 2)] if m % p == 0 else [])
    for schedule in schedules:
        assert receive_posts(schedule) == _torch_posts(schedule)


def test_receive_posts_1f1b_by_hand():
    """torch's 1F1B on 2 ranks, m = 2: rank 1 posts micro-batch 1's receive before its first backward (after its
    first forward), rank 0 each gradient's receive right before the backward that needs it."""
    posts = receive_posts(one_f_one_b(2, 2))
    assert posts[0] == ((), (), ((1, B, 0),), ((1, B, 1),))
    assert posts[1] == (((0, F, 0),), ((0, F, 1),), (), ())


def _cluster(processes: int, cores: int = 2, wait_us: float = 1000.0):
    from simulator.cluster.io import load_cluster

    c = load_cluster(str(DATA / "cluster.yaml"))
    return replace(c, node=replace(c.node, gpus_per_node=processes, host=replace(c.node.host, cpu_cores=cores)),
                   comm=replace(c.comm, blocking_wait_us=((2, wait_us), (4, 3 * wait_us))))


def test_price_without_the_wait_only_where_cores_suffice():
    assert receive_first_time_s(_cluster(2), 1.2e-3, 1.0e-3) == pytest.approx(0.2e-3)
    assert receive_first_time_s(_cluster(4), 1.2e-3, 1.0e-3) is None   # 4 processes on 2 cores
    assert receive_first_time_s(_cluster(2), 1.2e-3, 0.0) is None      # no wait to leave out


def test_expected_prices_by_hand():
    """1F1B, p = 2, m = 2, every action 1 s, a send 10 s or, receive first, 1 s. Walked by hand: F0 sent at 1
    (receive posted at 0: 1 s, arrives 2), 1F0 2-3, 1B0 3-4 (rank 1 posts micro-batch 1's receive at 3), 0B0's
    receive posted at 2: 1 s, 0B0 5-6; 0F1 was sent at 2 before its receive (3): 10 s from 3, arrives 13 (held 11 s);
    1F1 13-14, 1B1 14-15, its gradient's receive posted at 6: 1 s."""
    full = {(0, F): 10.0, (1, B): 10.0}
    first = {(0, F): 1.0, (1, B): 1.0}
    got = expected_prices(one_f_one_b(2, 2), [1.0, 1.0], [1.0, 1.0], full, first)
    assert got[(0, F)] == pytest.approx((5.5, 6.0, 1.0))   # micro-batch 1's transfer (the one after 0's) serial
    assert got[(1, B)] == pytest.approx((1.0, 1.0, 0.0))



def test_walk_transfers_gives_each_transfers_margin():
    """The by-hand case above, per transfer: F1's receive posted at 3, 1 s after its send (margin +1 s, send first,
    full price); F0's at 0, 1 s before its send (−1 s); B0's at 2 before its send at 4 (−2 s). The walk's share is
    :func:`send_first_share` without a spread; with one it is Φ(margin / spread)."""
    full, first = {(0, F): 10.0, (1, B): 10.0}, {(0, F): 1.0, (1, B): 1.0}
    walked = walk_transfers(one_f_one_b(2, 2), [1.0, 1.0], [1.0, 1.0], full, first)
    assert [(k, w.margin_s, w.share, w.price_s) for k, w in walked.items() if k[1] is F] == [
        ((0, F, 0), -1.0, 0.0, 1.0), ((0, F, 1), 1.0, 1.0, 10.0)]
    assert walked[(1, B, 0)].margin_s == pytest.approx(-2.0)
    assert send_first_share(0.0, 0.0) == 0.0 and send_first_share(1e-9, 0.0) == 1.0   # a tie is receive first
    assert send_first_share(1.0, 1.0) == pytest.approx(0.841345, abs=1e-6)          # Φ(1)

def _estimates(case: str, cluster):
    from simulator.run_results import load_results
    from simulator.validate import estimate_run

    return estimate_run(load_results(DATA / f"{case}.results.json"), cluster)


def _run_cluster(case: str, **kw):
    from simulator.run_results import load_results

    res = load_results(DATA / f"{case}.results.json")
    return _cluster(res.run.plan.layout().world_size, **kw)


def test_des_prices_each_send_by_its_receives_posting():
    """1F1B on 2 of 2 cores: micro-batch 0's activations go to a receive posted at the step's start (no wait),
    micro-batch 1's to one posted after rank 1's first forward, later than the send: the full price, from the
    receive's posting on."""
    from simulator.compile import compile_step
    from simulator.compile.costs import CostCache
    from simulator.engine.step import simulate
    from simulator.run_results import load_results
    from simulator.strategy import build_layout
    from simulator.validate import run_workload

    res = load_results(DATA / "pp-1f1b.results.json")
    cluster = _run_cluster("pp-1f1b")
    plan, model = res.run.plan, run_workload(res)
    work = compile_step(cluster, model, plan.strategy, cache=CostCache(cluster),
                        layout=build_layout(plan.strategy, cluster, model, gpus=plan._layout_gpus()))
    call = work.stages[0].chunks[0].p2p_fwd
    assert call.receive_first_time_s == pytest.approx(call.time_s - 1e-3)
    tl = simulate(work, cluster, trace=True).timeline
    sends = tl[tl.name.str.startswith("send 0F")].set_index("name")
    assert sends.loc["send 0F0", "end_s"] - sends.loc["send 0F0", "start_s"] == pytest.approx(call.receive_first_time_s)
    first_forward_end = tl[(tl.name == "1F0")].end_s.iloc[0]
    assert sends.loc["send 0F1", "start_s"] == pytest.approx(first_forward_end)  # waited for the receive's posting
    assert sends.loc["send 0F1", "end_s"] - sends.loc["send 0F1", "start_s"] == pytest.approx(call.time_s)


def _work(case: str, cluster):
    from simulator.compile import compile_step
    from simulator.compile.costs import CostCache
    from simulator.run_results import load_results
    from simulator.strategy import build_layout
    from simulator.validate import run_workload

    res = load_results(DATA / f"{case}.results.json")
    plan, model = res.run.plan, run_workload(res)
    return compile_step(cluster, model, plan.strategy, cache=CostCache(cluster),
                        layout=build_layout(plan.strategy, cluster, model, gpus=plan._layout_gpus()))


@pytest.mark.parametrize("case", ["pp-gpipe", "pp-1f1b", "pp-interleaved"])
def test_analytical_reads_the_mean_price(case, monkeypatch):
    """The closed form prices each boundary at the mean of its transfers' prices in the schedule's order, and its
    send stream at their mean time held; without receive-first prices it reads the calls' own time."""
    from simulator.analytical import summarize
    from simulator.receive_first import expected_boundaries

    work = _work(case, _run_cluster(case))
    arrays = summarize(work)
    chunks = {c.chunk: c for st in work.stages for c in st.chunks}
    n = len(chunks)
    full_f = [chunks[c].p2p_fwd.time_s for c in range(n - 1)]
    full_b = [chunks[c + 1].p2p_bwd.time_s for c in range(n - 1)]
    first_f = [chunks[c].p2p_fwd.receive_first_time_s for c in range(n - 1)]
    first_b = [chunks[c + 1].p2p_bwd.receive_first_time_s for c in range(n - 1)]
    want = expected_boundaries(work.schedule, arrays.F[0], arrays.B[0], full_f, full_b, first_f, first_b)
    assert list(arrays.cf[0]) == pytest.approx(want[0]) and list(arrays.cb[0]) == pytest.approx(want[1])
    assert list(arrays.stream_cf[0]) == pytest.approx(want[2])
    assert min(arrays.cf[0]) < max(full_f)   # some transfer found its receive posted
    import simulator.compile.comm_part as comm_part

    monkeypatch.setattr(comm_part, "receive_first_time_s", lambda *a: None)
    plain = summarize(_work(case, _run_cluster(case)))
    assert list(plain.cf[0]) == pytest.approx(full_f) and plain.stream_cf is None
