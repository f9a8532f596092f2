"""The planner's refinement shares one CallPlanner between its candidates (planner/refine.py): every result must
be the same, to the bit, as with a planner per candidate, and fewer plans are built."""

import pytest

from planner.refine import refine
from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.engine.call_plan import CallPlanner
from simulator.engine.step import simulate
from simulator.errors import SpecError
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.presets import get_preset

H100 = load_preset("dgx-h100").with_nodes(2)
GPT13 = get_preset("gpt3-1.3b")
BASE = dict(global_batch=16, tp=4, pp=2, placement="tp-dp-pp", zero=1)
CANDIDATES = [strategy_from_flat({**BASE, **extra}) for extra in (
    {}, {"bucket_bytes": 5_000_000}, {"schedule": "interleaved", "virtual_stages": 2, "sequence_parallel": True},
    {"allreduce_algorithm": "tree"}, {"tp": 2, "pp": 4})]


def _facts(result):
    return (result.step_time_s, result.tokens_per_s, result.mfu, sorted((c.value, v) for c, v in result.breakdown.items()),
            result.per_rank.to_dict("list"), result.extras["events"], result.extras["flows"])


def _counting_builds(monkeypatch) -> list:
    built: list = []
    build = CallPlanner._build

    def counted(self, call, group):
        built.append(1)
        return build(self, call, group)

    monkeypatch.setattr(CallPlanner, "_build", counted)
    return built


def test_shared_plans_give_the_same_results_with_fewer_builds(monkeypatch):
    built = _counting_builds(monkeypatch)
    alone = refine(H100, GPT13, CANDIDATES, share_plans=False)
    builds_alone = len(built)
    built.clear()
    shared = refine(H100, GPT13, CANDIDATES, share_plans=True)
    assert [_facts(r) for r in shared] == [_facts(r) for r in alone]
    assert 0 < len(built) < builds_alone


def test_a_reused_planner_changes_no_result():
    """Simulating a candidate again on a planner that others filled gives its own first result."""
    plans = CallPlanner(H100)
    works = [compile_step(H100, GPT13, s, memory=False) for s in CANDIDATES]
    first = [_facts(simulate(w, H100, trace=False, plans=plans)) for w in works]
    again = [_facts(simulate(w, H100, trace=False, plans=plans)) for w in reversed(works)]
    assert again[::-1] == first
    assert first == [_facts(simulate(w, H100, trace=False)) for w in works]


def test_plans_of_another_cluster_or_fusion_are_refused():
    work = compile_step(H100, GPT13, CANDIDATES[0], memory=False)
    with pytest.raises(SpecError, match="plans"):
        simulate(work, H100, plans=CallPlanner(load_preset("dgx-a100").with_nodes(2)))
    with pytest.raises(SpecError, match="fuse"):
        simulate(work, H100, plans=CallPlanner(H100, fuse=False))
