"""The attention kernel as a strategy field (``attention_backend``) and the executor telling the simulator which
kernel torch's SDPA picked (executor/sdpa.py).

- The field overrides the framework's rule; None keeps it (Megatron cuDNN on Hopper, torch FA2).
- On the H200 the two kernels' measured rates differ (docs/hardware_measured.md): the 1.3B run's attention is
  timed faster with cuDNN, and the step with it.
- ``with_sdpa_backend``: a CUDA rank whose SDPA picks cuDNN (SDPBackend 3) names it in the run plan, with a note
  when the framework's rule said otherwise; FA2 (1) where the rule says FA2 changes nothing but the field; the
  CPU, eager attention and backends without rates leave the plan alone.
"""

import pytest

from simulator.analytical import estimate
from simulator.attention_efficiency import AttentionBackend
from simulator.cluster.io import load_cluster
from simulator.plan_file import Plan
from simulator.plan_scale import Scale, ScaledPlan, ScaleKind
from simulator.strategy import Framework
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import load_model

from executor.sdpa import SDPA_CUDNN_ATTENTION, SDPA_FLASH_ATTENTION, with_sdpa_backend

H200 = 9.0


def test_the_field_overrides_the_frameworks_rule():
    torch_s = strategy_from_flat({"global_batch": 8})
    assert torch_s.resolved_attention_backend(H200) is AttentionBackend.FLASH_ATTENTION_2
    assert strategy_from_flat({"global_batch": 8, "framework": "megatron"}).resolved_attention_backend(H200) \
        is AttentionBackend.CUDNN
    given = strategy_from_flat({"global_batch": 8, "attention_backend": "cudnn"})
    assert given.resolved_attention_backend(H200) is AttentionBackend.CUDNN
    assert Framework.TORCH_DDP.attention_backend(H200) is AttentionBackend.FLASH_ATTENTION_2


def test_cudnn_times_the_h200_run_faster():
    cluster, model = load_cluster("hgx-h200", nodes=1), load_model("gpt3-1.3b")
    times = {b: estimate(cluster, model, strategy_from_flat({"global_batch": 64, "micro_batch": 8,
                                                              "attention_backend": b})).step_time_s
             for b in ("flash-attention-2", "cudnn")}
    assert times["cudnn"] < times["flash-attention-2"]


def _scaled(flat: dict) -> ScaledPlan:
    plan = Plan(model=load_model("gpt3-1.3b"), cluster=load_cluster("hgx-h200"), gpus=8,
                strategy=strategy_from_flat({"global_batch": 64, "micro_batch": 8, **flat}))
    return ScaledPlan(planned=plan, run=plan, scale=Scale(ScaleKind.AS_PLANNED), notes=())


def test_a_cuda_rank_names_the_kernel_sdpa_picked():
    out = with_sdpa_backend(_scaled({}), "cuda", choice=lambda spec, device: SDPA_CUDNN_ATTENTION)
    assert out.run.strategy.attention_backend is AttentionBackend.CUDNN
    assert out.notes == ("attention backend flash-attention-2 → cudnn: torch's SDPA picks it on this GPU",)
    same = with_sdpa_backend(_scaled({}), "cuda", choice=lambda spec, device: SDPA_FLASH_ATTENTION)
    assert same.run.strategy.attention_backend is AttentionBackend.FLASH_ATTENTION_2 and same.notes == ()


@pytest.mark.parametrize("device, flat, choice", [
    ("cpu", {}, SDPA_CUDNN_ATTENTION),                 # the CPU's kernels have no rates
    ("cuda", {"attention": "eager"}, SDPA_CUDNN_ATTENTION),  # no fused kernel at all
    ("cuda", {}, 2),                                   # memory-efficient attention: no rates, plan unchanged
])
def test_what_the_simulator_cannot_time_leaves_the_plan_alone(device, flat, choice):
    scaled = _scaled(flat)
    assert with_sdpa_backend(scaled, device, choice=lambda spec, d: choice) is scaled
