"""A collective the executor replays step by step (a plan naming an all-reduce algorithm under DDP) costs its
algorithm's estimate plus ``S · comm.replay_step_us · share``, on a node that time-shares its cores each step at the
share of the processes busy in it (simulator/collectives/replayed.py)."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from presets_once import cluster as preset_cluster
from simulator.cluster.io import load_cluster, save_cluster
from simulator.collectives.base import Op
from simulator.collectives.registry import build_schedule, estimate
from simulator.collectives.replayed import (replay_extra_s, replay_steps, schedule_replay_time_s, step_weights,
                                          weighted_steps)
from simulator.compile.costs import CostCache
from simulator.compile.grad_sync import replays_grad_sync
from simulator.errors import SpecError
from simulator.strategy import Strategy, ZeroStage
from simulator.strategy.sync import AllReduceAlgorithm, AllReduceSync

_CPU = load_cluster("localhost-cpu")


def _cpu(p: int, replay_step_us: float):
    return replace(_CPU, node=replace(_CPU.node, gpus_per_node=p),
                   comm=replace(_CPU.comm, replay_step_us=replay_step_us))


@pytest.mark.parametrize("p, steps", [(2, 2), (3, 4), (4, 6)])
def test_ring_all_reduce_replay_hand_worked(p, steps):
    """Ring all-reduce: 2(p−1) steps; localhost-cpu has 2 cores, so share = max(1, p/2); 1000 µs per step:
    2 ranks 2 ms, 3 ranks 4 × 1.5 = 6 ms, 4 ranks 6 × 2 = 12 ms on top of the native ring's estimate."""
    cluster = _cpu(p, 1000.0)
    ranks = tuple(range(p))
    assert replay_steps(cluster, ranks, Op.ALL_REDUCE, 1 << 20, "ring") == steps
    extra = {2: 2e-3, 3: 6e-3, 4: 12e-3}[p]
    assert replay_extra_s(cluster, ranks, Op.ALL_REDUCE, 1 << 20, "ring") == pytest.approx(extra, rel=1e-12)
    native = estimate(cluster, ranks, Op.ALL_REDUCE, 1 << 20, "ring").time_s
    t, algorithm = CostCache(cluster).collective(ranks, Op.ALL_REDUCE, 1 << 20, "ring", replayed=True)
    # a time-shared node (p > 2) times the replayed schedule itself, whose 1 MiB / 3 slices move whole elements
    # (replay.py: the largest slice sets a step) where the closed form takes n/p exactly: 1e-6 apart
    assert t == pytest.approx(native + extra, rel=1e-5) and algorithm.value == "ring"


def test_not_replayed_or_auto_or_unmeasured_costs_nothing_more():
    cluster = _cpu(4, 1000.0)
    ranks, n = (0, 1, 2, 3), 1 << 20
    cache = CostCache(cluster)
    assert cache.collective(ranks, Op.ALL_REDUCE, n, "ring")[0] == estimate(cluster, ranks, Op.ALL_REDUCE, n, "ring").time_s
    assert cache.collective(ranks, Op.ALL_REDUCE, n, "auto", replayed=True)[0] == cache.collective(ranks, Op.ALL_REDUCE, n)[0]
    unmeasured = _cpu(2, 0.0)  # 2 processes on 2 cores: no time-sharing, the closed form exactly
    assert CostCache(unmeasured).collective((0, 1), Op.ALL_REDUCE, n, "tree", replayed=True)[0] == \
        estimate(unmeasured, (0, 1), Op.ALL_REDUCE, n, "tree").time_s


def test_tree_replay_counts_its_schedules_steps():
    cluster = _cpu(4, 500.0)
    ranks, n = (0, 1, 2, 3), 1 << 20
    steps = replay_steps(cluster, ranks, Op.ALL_REDUCE, n, "tree")
    assert steps >= 4  # up the tree and down again, at least two levels each way on 4 ranks
    schedule = build_schedule(cluster, list(ranks), Op.ALL_REDUCE, n, "tree")
    busy = weighted_steps(cluster, schedule)
    assert busy < steps  # the chain's ends idle in some steps
    assert replay_extra_s(cluster, ranks, Op.ALL_REDUCE, n, "tree") == pytest.approx(busy * 500e-6 * 2, rel=1e-12)


def _no_replay(cluster):
    return replace(cluster, comm=replace(cluster.comm, replay_step_us=0.0))


def _strategy(**kw) -> Strategy:
    base = dict(global_batch=8, micro_batch=2, dp=4)
    base.update(kw)
    return Strategy(**base)


@pytest.mark.parametrize("kw, replayed", [
    (dict(dp_sync=AllReduceSync(algorithm=AllReduceAlgorithm.RING)), True),
    (dict(dp_sync=AllReduceSync(algorithm=AllReduceAlgorithm.TREE), zero=ZeroStage.ZERO1), True),
    (dict(), False),  # auto: dist.all_reduce
    (dict(dp_sync=AllReduceSync(algorithm=AllReduceAlgorithm.RING), zero=ZeroStage.ZERO2), False),  # FSDP2
    (dict(dp=2, tp=2, dp_sync=AllReduceSync(algorithm=AllReduceAlgorithm.RING)), False),  # tensor family
])
def test_which_plans_the_executor_replays(kw, replayed):
    from simulator.strategy.layout import build_layout
    from simulator.workload import get_preset

    s = _strategy(**kw)
    layout = build_layout(s, load_cluster("dgx-h100"), get_preset("gpt3-125m"), gpus=s.dp * s.tp)
    assert replays_grad_sync(layout) is replayed


def test_the_suite_ring_case_moves_with_the_replay_cost():
    """ddp-ring's recorded run (4 processes, ring replay): its estimate grows by the replayed buckets' steps ×
    replay_step_us × share, and a cluster without the field keeps the old estimate."""
    from pathlib import Path

    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate

    data = Path(__file__).parent / "data" / "suite_default"
    results = load_results(data / "ddp-ring.results.json")
    base = run_cluster(results, str(data / "cluster.yaml"))
    with_replay = replace(base, comm=replace(base.comm, replay_step_us=1000.0))
    before, after = (validate(results, c).row("step_time_s") for c in (base, with_replay))
    # one bucket (the tiny model's gradients fit DDP's 25 MiB), 6 ring steps, share 2: +12 ms, both engines
    assert after.analytical - before.analytical == pytest.approx(12e-3, rel=1e-6)
    assert after.des - before.des == pytest.approx(12e-3, rel=1e-6)


def test_cluster_file_round_trip_and_bad_value(tmp_path):
    cluster = _cpu(2, 812.5)
    path = save_cluster(cluster, tmp_path / "c.yaml")
    assert load_cluster(str(path)).comm.replay_step_us == 812.5
    text = path.read_text().replace("replay_step_us: 812.5", "replay_step_us: -1")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SpecError, match="replay_step_us"):
        load_cluster(str(bad))


def test_a_replay_is_the_schedule_built_on_the_plans_cluster():
    """The executor builds a replayed schedule on the plan's cluster (ReplayHook: build_schedule(plan.cluster,
    …)); estimated on another cluster, that schedule is timed there and its own steps are counted. dgx-h100's
    4-rank tree for 1 MiB has a handful of steps; localhost with a hop latency of 0 would cut the same bucket into
    1,024 chunks (over a thousand steps) and charge each a replayed step."""
    from simulator.collectives.replay import schedule_time_s
    from simulator.collectives.replayed import replayed_time_s

    plan = load_cluster("dgx-h100")
    cpu = _cpu(4, 1000.0)
    free_hops = replace(cpu, node=replace(cpu.node, intra_link=replace(cpu.node.intra_link, latency_us=0.0)))
    ranks, n = (0, 1, 2, 3), 1 << 20
    ran = build_schedule(plan, list(ranks), Op.ALL_REDUCE, n, "tree")
    assert ran.num_steps < 20 < replay_steps(free_hops, ranks, Op.ALL_REDUCE, n, "tree")
    expected = schedule_replay_time_s(free_hops, ran)
    # its replay part: its steps at their busy processes' share (test_tree_steps_at_their_busy_share) × 1 ms × 2
    busy = weighted_steps(free_hops, ran)
    assert busy < ran.num_steps
    assert expected - schedule_replay_time_s(_no_replay(free_hops), ran) == pytest.approx(busy * 2e-3, rel=1e-12)
    assert expected < schedule_time_s(free_hops, ran) + ran.num_steps * 1000e-6 * 2  # the uniform share's price
    assert replayed_time_s(free_hops, ranks, Op.ALL_REDUCE, n, "tree", plan) == pytest.approx(expected, rel=1e-12)
    t, algorithm = CostCache(free_hops, replays_built_on=plan).collective(ranks, Op.ALL_REDUCE, n, "tree",
                                                                          replayed=True)
    assert t == pytest.approx(expected, rel=1e-12) and algorithm.value == "tree"
    old = CostCache(free_hops).collective(ranks, Op.ALL_REDUCE, n, "tree", replayed=True)[0]
    assert old > 10 * t  # counting the validation cluster's own schedule over-prices it by its chunk count


def test_built_on_the_same_cluster_a_ring_replay_costs_what_it_did():
    """Built on the cluster it is estimated on, the replay's schedule is the registry's, whose replay equals its
    closed form on sizes that divide evenly (tests/test_collectives_replay.py): nothing moves for a plan
    estimated on its own cluster."""
    cluster = _cpu(4, 1000.0)
    ranks, n = (0, 1, 2, 3), 1 << 20
    new = CostCache(cluster, replays_built_on=cluster).collective(ranks, Op.ALL_REDUCE, n, "ring", replayed=True)[0]
    assert new == pytest.approx(CostCache(cluster).collective(ranks, Op.ALL_REDUCE, n, "ring", replayed=True)[0],
                                rel=1e-9)


def test_the_suite_tree_case_counts_the_plans_tree_steps():
    """ddp-tree's recorded run (4 processes, planned on dgx-h100): with a replay step on a file whose hop latency
    is 0 (the recorded calibration), the estimate grows by the dgx-h100 tree's steps for its one bucket, each at
    its busy processes' share (Σ k_s = 4.5 of 7), × replay_step_us × share 2, not by the thousand-odd steps of
    the tree localhost would choose."""
    from pathlib import Path

    from simulator.compile import compile_step
    from simulator.run_results import load_results
    from simulator.strategy import build_layout
    from simulator.validate import run_cluster, run_workload, validate

    data = Path(__file__).parent / "data" / "suite_default"
    results = load_results(data / "ddp-tree.results.json")
    base = run_cluster(results, str(data / "cluster.yaml"))
    assert base.node.intra_link.latency_us == 0.0
    with_replay = replace(base, comm=replace(base.comm, replay_step_us=1000.0))
    before, after = (validate(results, c).row("step_time_s") for c in (base, with_replay))
    plan, workload = results.run.plan, run_workload(results)
    work = compile_step(base, workload, plan.strategy,
                        layout=build_layout(plan.strategy, base, workload, gpus=plan._layout_gpus()))
    (bucket,) = work.stages[0].grad_sync  # the tiny model's gradients fit one DDP bucket
    steps = build_schedule(plan.cluster, [0, 1, 2, 3], Op.ALL_REDUCE, bucket.nbytes, "tree").num_steps
    assert steps < 20
    busy = weighted_steps(base, build_schedule(plan.cluster, [0, 1, 2, 3], Op.ALL_REDUCE, bucket.nbytes, "tree"))
    assert busy < steps
    assert after.analytical - before.analytical == pytest.approx(busy * 1e-3 * 2, rel=1e-6)
    assert after.des - before.des == pytest.approx(busy * 1e-3 * 2, rel=1e-6)


def test_tree_steps_at_their_busy_share():
    """ddp-tree's bucket (481,392 B) as dgx-h100 builds it for 4 ranks: one node, so a chain 3→2→1→0 and back,
    2 channels of 2 chunks, 7 steps whose busy ranks are {3,2} {3,2,1} {2,1,0} {1,0} {0,1,2} {1,2,3} {2,3}.
    On 4 processes and 2 cores (share 2) step s costs max(1, busy/2)/2 of the node's share: 0.5 for 2 busy, 0.75
    for 3, Σ = 4.5; 1 ms per replayed step adds 4.5 × 1 ms × 2 = 9 ms (the uniform share's 7 × 2 = 14 ms)."""
    schedule = build_schedule(load_cluster("dgx-h100", nodes=1), [0, 1, 2, 3], Op.ALL_REDUCE, 481_392, "tree")
    cpu = _cpu(4, 1000.0)
    assert step_weights(cpu, schedule) == [0.5, 0.75, 0.75, 0.5, 0.75, 0.75, 0.5]
    assert schedule_replay_time_s(cpu, schedule) - schedule_replay_time_s(_no_replay(cpu), schedule) == \
        pytest.approx(9e-3, rel=1e-12)


def _cores(cluster, cores: int):
    return replace(cluster, node=replace(cluster.node, host=replace(cluster.node.host, cpu_cores=cores)))


@settings(max_examples=25, deadline=None)
@given(algorithm=st.sampled_from(["ring", "tree"]), p=st.integers(3, 6), kib=st.integers(1, 4096),
       step_us=st.floats(0.0, 2000.0))
def test_busy_share_bounds(algorithm, p, kib, step_us):
    """A replay on a time-shared node costs at most the uniform share's price (each step's busy share ≤ the
    node's) and at least the price with a core per process (share_s ≥ 1); a ring keeps every rank busy in every
    step, so its price is the uniform one exactly."""
    from simulator.collectives.replay import schedule_time_s
    from simulator.collectives.replayed import steps_extra_s

    cpu = _cpu(p, step_us)
    schedule = build_schedule(preset_cluster("dgx-h100", 1), list(range(p)), Op.ALL_REDUCE, kib * 1024, algorithm)
    uniform = schedule_time_s(cpu, schedule) + steps_extra_s(cpu, schedule.num_steps)
    busy = schedule_replay_time_s(cpu, schedule)
    assert busy <= uniform * (1 + 1e-12)
    own_cores = _cores(cpu, p)
    assert schedule_replay_time_s(own_cores, schedule) <= busy * (1 + 1e-12)
    if algorithm == "ring":
        assert busy == pytest.approx(uniform, rel=1e-12)


def test_tree_waits_at_its_steps_weights():
    """The same tree's wait for a core: the node's measured all-reduce wait W(4) = 4000 µs times the mean of its 7
    steps' busy weights, k̄ = 4.5 / 7 = 9/14: 9/14 × 4000 µs (tree19's probe: a step's wait follows its busy share,
    not the wait of a node of its busy processes); W(2) and W(3) do not enter (tree17's rule read them,
    (3·W(2) + 4·W(3)) / 7 = 11,000 / 7 µs here); the ring keeps all 4 busy, W(4) = 4000 µs; the difference is all
    that moves in the call's price."""
    from simulator.collectives.replayed import replay_wait_s

    plan = load_cluster("dgx-h100", nodes=1)
    cpu = _cpu(4, 0.0)
    tree, ring = (build_schedule(plan, [0, 1, 2, 3], Op.ALL_REDUCE, 481_392, a) for a in ("tree", "ring"))
    for small in ((2, 1000.0), (3, 2000.0)), ((2, 100.0), (3, 3500.0)):
        waits = replace(cpu, comm=replace(cpu.comm, op_wait_us=((Op.ALL_REDUCE, small + ((4, 4000.0),)),)))
        assert replay_wait_s(waits, tree) == pytest.approx(4000e-6 * 9 / 14, rel=1e-12)
        assert replay_wait_s(waits, ring) == pytest.approx(4000e-6, rel=1e-12)
        for schedule, wait_s in ((tree, 4000e-6 * 9 / 14), (ring, 4000e-6)):
            assert schedule_replay_time_s(waits, schedule) - schedule_replay_time_s(cpu, schedule) == \
                pytest.approx(wait_s, rel=1e-9)
