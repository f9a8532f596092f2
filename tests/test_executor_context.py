"""Context-parallel attention cores (executor/context.py) against one process's causal SDPA.

On 2 and 4 gloo ranks, random Q, K, V of one (b, heads, s, d) problem (grouped-query: 4 query heads,
2 key/value heads) are split by the cp token index; each rank runs its shard through the ring
(balanced and contiguous splits) or the all-to-all core, and the outputs and the gradients of
Q, K, V (of a random linear function of the output) are put back in sequence order and compared
with ``F.scaled_dot_product_attention(is_causal=True)`` on the whole sequence. Tolerance 1e-5:
the same float32 sums in another order (the online-softmax merge rescales by exp of lse differences).
A wrong mask, a block merged twice, a dK/dV accumulator that misses its last hop home, or a
position error in the split moves these by O(1).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from executor.context import ContextCore, CpGroup, token_index
from executor.launch import run
from simulator.workload.context import ContextKind, ContextSplit

pytestmark = pytest.mark.multiproc

B, H, KV, S, D = 2, 4, 2, 16, 8


def _problem():
    g = torch.Generator().manual_seed(0)
    q, k, v, w = (torch.randn(B, h, S, D, generator=g) for h in (H, KV, KV, H))
    return q, k, v, w


def _reference():
    q, k, v, w = (t.clone().requires_grad_() for t in _problem())
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    (out * w).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


def _rank(rank: int, world: int, splits: tuple) -> list:
    import torch.distributed as dist

    group = dist.new_group(list(range(world)))
    cp = CpGroup(ranks=tuple(range(world)), index=rank, group=group)
    results = []
    for split in splits:
        idx = token_index(S, split, rank)
        q, k, v, w = (t[:, :, idx] for t in _problem())
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        out = ContextCore(cp, split, S)(q, k, v)
        (out * w).sum().backward()
        results.append([t.tolist() for t in (idx, out.detach(), q.grad, k.grad, v.grad)])  # no shared memory
    return results


SPLITS = {2: (ContextSplit(2, ContextKind.RING, True), ContextSplit(2, ContextKind.RING, False),
              ContextSplit(2, ContextKind.ALL_TO_ALL, False)),
          4: (ContextSplit(4, ContextKind.RING, True), ContextSplit(4, ContextKind.RING, False),
              ContextSplit(4, ContextKind.ALL_TO_ALL, False))}


@pytest.mark.parametrize("cp", [2, 4])
def test_context_cores_match_whole_sequence_attention(cp):
    expected = _reference()
    per_rank = run(_rank, cp, args=(SPLITS[cp],), timeout_s=300.0)
    for n, split in enumerate(SPLITS[cp]):
        got = [torch.zeros_like(t) for t in expected]
        for rank_results in per_rank:
            idx, *tensors = rank_results[n]
            for whole, part in zip(got, tensors):
                whole[:, :, idx] = torch.tensor(part)
        for name, g, e in zip(("output", "dQ", "dK", "dV"), got, expected):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, msg=f"{split}: {name}")


def test_balanced_split_gives_rank_r_chunks_r_and_2cp_minus_1_minus_r():
    split = ContextSplit(4, ContextKind.RING, True)  # 16 tokens in 8 chunks of 2
    assert token_index(16, split, 0).tolist() == [0, 1, 14, 15]
    assert token_index(16, split, 3).tolist() == [6, 7, 8, 9]
    unbalanced = ContextSplit(4, ContextKind.RING, False)
    assert token_index(16, unbalanced, 1).tolist() == [4, 5, 6, 7]
    every = torch.cat([token_index(16, split, r) for r in range(4)]).sort().values
    assert every.tolist() == list(range(16))


# --- whole runs: every cp shape trains the same model as one process -------------------------------

CP_BASE = {"global_batch": 8, "micro_batch": 2}
CP_VARIANTS = {  # name: (ranks, flat strategy keys)
    "cp2-ring-balanced-ddp": (2, {"cp": 2}),
    "cp2-ring-contiguous-ddp": (2, {"cp": 2, "cp_balanced": False}),
    "cp2-all-to-all-ddp": (2, {"cp": 2, "cp_kind": "all-to-all"}),
    "cp2-ring-fsdp2-zero3-recompute": (2, {"cp": 2, "zero": 3, "recompute": "full"}),
    "cp2-ring-selective-recompute": (2, {"cp": 2, "recompute": "selective"}),
    "cp4-ring-balanced-zero1": (4, {"cp": 4, "zero": 1}),
    "cp2-dp2-ring-balanced-ddp": (4, {"cp": 2, "dp": 2}),
    "cp2-dp2-ring-contiguous-fsdp2-zero2": (4, {"cp": 2, "dp": 2, "zero": 2, "cp_balanced": False}),
    "cp2-dp2-all-to-all-ddp": (4, {"cp": 2, "dp": 2, "cp_kind": "all-to-all"}),
}


def _cp_plan(model: str, ranks: int, changes: dict):
    from simulator.cluster.io import load_cluster
    from simulator.plan_file import Plan
    from simulator.plan_scale import Scale, scale_plan
    from simulator.strategy.flat import strategy_from_flat
    from simulator.workload import get_preset

    plan = Plan(model=get_preset(model), cluster=load_cluster("dgx-h100"), gpus=ranks,
                strategy=strategy_from_flat(CP_BASE | changes))
    return scale_plan(plan, Scale.parse("tiny"), ranks).run


CP_MODELS = ("llama3-8b", "gpt3-125m")
"""llama3 is rotary + grouped-query, gpt3 learned positions."""


@pytest.fixture(scope="module")
def cp_runs():
    """Per rank count, one launch (``distributed_losses``) trains every cp shape of both models: each plan is
    built and trained on its own in the ranks, so sharing the launch changes no comparison and saves the
    start-up of a second set of processes (torch import, about 2 s of CPU per rank).
    Returns {ranks: {model: [(name, plan, (losses, grad norms))]}}."""
    from executor.equivalence import distributed_losses

    out = {}
    for ranks in (2, 4):
        names = [n for n, (r, _) in CP_VARIANTS.items() if r == ranks]
        runs = [(model, name, _cp_plan(model, ranks, CP_VARIANTS[name][1])) for model in CP_MODELS for name in names]
        got = distributed_losses([plan for _, _, plan in runs], nproc=ranks, steps=3)
        out[ranks] = {model: [(name, plan, g) for (m, name, plan), g in zip(runs, got) if m == model]
                      for model in CP_MODELS}
    return out


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("model", CP_MODELS)
def test_every_cp_shape_matches_the_single_process_run(cp_runs, model, ranks):
    """Loss and gradient norm of 3 AdamW steps per cp shape against executor.reference (same tolerances as
    tests/test_execute_equivalence.py)."""
    from executor.reference import reference_run

    runs = cp_runs[ranks][model]
    assert [name for name, _, _ in runs] == [n for n, (r, _) in CP_VARIANTS.items() if r == ranks]
    for _, plan, _ in runs:
        assert plan.layout().cp > 1 and plan.model.seq_len % (2 * plan.layout().cp) == 0
    references = {}  # tiny all-to-all plans have 2·cp heads (simulator.plan_scale): a model of their own
    for _, plan, _ in runs:
        if plan.model not in references:
            references[plan.model] = reference_run(plan.model, seed=0, steps=3,
                                                   global_batch_size=CP_BASE["global_batch"])
    for name, plan, (losses, grad_norms) in runs:
        reference, norms = references[plan.model]
        assert losses == pytest.approx(reference, rel=1e-5, abs=1e-6), name
        assert grad_norms == pytest.approx(norms, rel=1e-5), name
        assert reference[0] != reference[1]


def test_execute_records_the_cp_shape_and_validate_reads_it(tmp_path, capfd):
    """`trainplan execute` on a cp plan (2 gloo ranks, tiny) writes a complete results file naming the cp
    shape it ran; `trainplan validate` re-simulates those shapes on localhost-cpu."""
    import json

    from simulator.run_results import RunStatus, load_results
    from trainplan.__main__ import main

    plan, out = tmp_path / "plan.json", tmp_path / "results.json"
    assert main(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "4", "--gbs", "4",
                 "--seq", "32768", "--cp", "2", "--tp", "1", "--pp", "1", "--out", str(plan)]) == 0
    assert main(["execute", str(plan), "--nproc", "2", "--scale", "tiny", "--steps", "2", "--warmup", "1",
                 "--precision", "fp32", "--out", str(out)]) == 0
    assert "cp 2 kept" in capfd.readouterr().out
    results = load_results(out)
    assert results.status is RunStatus.COMPLETE and len(results.ranks) == 2
    layout = results.run.plan.layout()
    assert (layout.dp, layout.cp) == (1, 2) and results.plan.layout().cp == 2
    assert results.run.components["context parallel"].startswith("cp=2 ring, 8 of 16 tokens per rank, balanced")
    assert main(["validate", str(out), "--cluster", "localhost-cpu", "--json"]) == 0
    report = json.loads(capfd.readouterr().out)
    assert report["step_time_error"] is not None


def test_cp_with_tp_or_pp_is_refused_in_one_line(tmp_path, capsys):
    from simulator.cluster.io import load_cluster
    from simulator.plan_file import Plan
    from simulator.strategy.flat import strategy_from_flat
    from simulator.workload import get_preset
    from trainplan.__main__ import main

    path = tmp_path / "plan.json"
    Plan(model=get_preset("llama3-8b"), cluster=load_cluster("dgx-h100"), gpus=4,
         strategy=strategy_from_flat(dict(global_batch=4, micro_batch=1, tp=2, cp=2))).save(path)
    assert main(["execute", str(path), "--scale", "tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert "plan.strategy.cp: 2: this executor runs context parallelism with tp = pp = 1 only" in err, err
    assert len(err.splitlines()) == 1
