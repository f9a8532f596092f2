"""Every data-parallel variant trains the same model as one process: per-step losses agree.

One launch of 2 gloo ranks runs all variants (tiny model: 2 layers, hidden 32, seq 16), 3 AdamW
steps each, fp32; reference: executor.reference (the whole global batch in one forward, same init
and data). Tolerance rtol 1e-5: the same float32 gradients summed in another order (micro-batches,
replicas, ring vs tree vs gloo's all-reduce) differ by a few ulps, which AdamW carries over 3 steps.
The gradient norm before each step is compared too (rtol 1e-4: small norms of float32 sums), because
AdamW's update is blind to a constant gradient scale (a missing 1/dp would not move the loss).
A variant that dropped a micro-batch, double-counted a replica or skipped a sync moves the loss
by far more (the second step's loss depends on the first step's gradients).
"""

from __future__ import annotations

import pytest

from executor.equivalence import distributed_losses
from executor.reference import reference_run
from simulator.cluster.io import load_cluster
from simulator.plan_file import Plan
from simulator.plan_scale import Scale, scale_plan
from simulator.strategy import Strategy
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import get_preset

pytestmark = pytest.mark.multiproc

BASE = {"global_batch": 8, "micro_batch": 2, "dp": 2}
"""dp 2 × 2 micro-batches of 2: gradient accumulation on every variant."""
VARIANTS = {
    "ddp": {},
    "ddp-ring-hook": {"allreduce_algorithm": "ring", "bucket_bytes": 4096},
    "ddp-tree-no-overlap": {"allreduce_algorithm": "tree", "overlap_grad_reduce": False, "bucket_bytes": 4096},
    "ddp-bucket-view": {"gradient_as_bucket_view": True},
    "zero1": {"zero": 1},
    "fsdp2-zero2": {"zero": 2},
    "fsdp2-zero3": {"zero": 3},
    "fsdp2-zero3-offload": {"zero": 3, "offload": "params"},
    "recompute-full": {"recompute": "full", "zero": 3},
    "recompute-selective-eager": {"recompute": "selective", "attention": "eager"},
}


def _plan(model: str, changes: dict) -> Plan:
    strategy = strategy_from_flat(BASE | changes)
    plan = Plan(model=get_preset(model), cluster=load_cluster("dgx-h100"), gpus=2, strategy=strategy)
    return scale_plan(plan, Scale.parse("tiny"), 2).run


@pytest.mark.parametrize("model", ["llama2-7b"])
def test_every_data_parallel_variant_matches_the_single_process_run(model):
    plans = [_plan(model, v) for v in VARIANTS.values()]
    spec = plans[0].model
    reference, norms = reference_run(spec, seed=0, steps=3, global_batch_size=BASE["global_batch"])
    got = distributed_losses(plans, nproc=2, steps=3)
    for name, (losses, grad_norms) in zip(VARIANTS, got):
        assert losses == pytest.approx(reference, rel=1e-5, abs=1e-6), name
        assert grad_norms == pytest.approx(norms, rel=1e-4), name  # AdamW hides a gradient scale error
    assert reference[0] != reference[1]  # the steps train: a stale or missing update would show
