"""Whole DES plans built from a collective's local form vs from its explicit schedule, on shared runners: the
check tests/test_ring_local_form.py and tests/test_tree_local_form.py make for their algorithm."""

from __future__ import annotations

from dataclasses import replace

from simulator.cluster.facts import DegradedNic
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.collectives.registry import estimate
from simulator.engine.replay_work import CommRunner
from simulator.engine.shapes import ScheduleCache
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport


def dp_groups() -> list[tuple[int, ...]]:
    """dp groups of a tp 8 × pp 4 × dp 12 layout on 48 nodes (stages 0 and 3, tp indices 0 and 5) and a
    two-GPUs-per-node group (as tests/test_engine_shortcuts.py)."""
    groups = [tuple(t + 8 * s + 32 * d for d in range(12)) for s in (0, 3) for t in (0, 5)]
    return groups + [tuple(r + 8 * n for n in range(0, 48, 4) for r in (2, 6))]


def assert_local_form_plans_equal(algorithm: CollectiveAlgorithm, nbytes: int, sick: bool, monkeypatch) -> None:
    """Fixed delay, steps of (path, bytes, latency), γ and resources of every dp group's all-reduce plan: the same
    values, bit for bit, with the local form and with every schedule localised; a degraded NIC when ``sick``."""
    cluster = load_preset("dgx-a100").with_nodes(48)
    if sick:
        cluster = replace(cluster, degraded_nics=(DegradedNic(node=4, nic=0, bw_fraction=0.02),))
    runners = {}
    for local_form in (False, True):
        monkeypatch.setattr(ScheduleCache, "local_form", local_form)
        runners[local_form] = CommRunner(None, None, cluster, None)
        for g in dp_groups():
            call = CommCall(kind=CommKind.DP, op=Op.ALL_REDUCE, group=g, nbytes=nbytes, transport=Transport.COLLECTIVE,
                            algorithm=algorithm,
                            time_s=estimate(cluster, list(g), Op.ALL_REDUCE, nbytes, algorithm.value).time_s)
            runners[local_form].plan(call, g)
    built, direct = (list(runners[k]._plans.values()) for k in (False, True))
    assert len(built) == len(direct) == len(dp_groups())
    for a, b in zip(built, direct):
        assert (a.pre_s, a.gamma_s, a.resources) == (b.pre_s, b.gamma_s, b.resources)
        assert [[(p, n, lat) for p, n, lat in s] for s in a.steps] == [[(p, n, lat) for p, n, lat in s] for s in b.steps]
    assert all(lo.schedule is None for lo in runners[True]._schedules._shared.values())
    assert all(lo.schedule is not None for lo in runners[False]._schedules._shared.values())
