"""Framework profiles: the cited defaults, overrides, and the registry's errors."""

import pytest

from simulator.cluster.presets import load_preset
from simulator.errors import SpecError
from simulator.profiles import PROFILES, apply_profile, get_profile, profile_names
from simulator.strategy import (AllReduceAlgorithm, AllReduceSync, ParamServerMode, ParamServerSync, PlacementOrder,
                                ZeroStage, build_layout)
from simulator.units import MiB
from simulator.workload import get_preset



def test_profile_names():
    assert profile_names() == ["ddp", "horovod", "deepspeed", "megatron", "tf-mirrored", "tf-multiworker", "tf-ps"]


def test_every_default_has_a_source_and_builds():
    for profile in PROFILES.values():
        assert profile.defaults, profile.name
        for key, default in profile.defaults.items():
            assert len(default.source) > 15, (profile.name, key)
        strategy = apply_profile(profile.name, global_batch=64)
        assert strategy.profile == profile.name


@pytest.mark.parametrize("name,check", [
    # PyTorch DDP bucket_cap_mb=25 (torch docs; Li et al. VLDB 2020), MiB
    ("ddp", lambda s: s.dp_sync.bucket_bytes == 25 * MiB and s.dp_sync.overlap_grad_reduce),
    # Horovod ≥ 0.21: HOROVOD_FUSION_THRESHOLD 128 MB, HOROVOD_CYCLE_TIME 1 ms
    ("horovod", lambda s: s.dp_sync.bucket_bytes == 128 * MiB and s.dp_sync.fusion_cycle_s == 1e-3),
    # DeepSpeed reduce_bucket_size / allgather_bucket_size 5e8 elements, overlap_comm false
    ("deepspeed", lambda s: s.dp_sync.bucket_params == 5e8 and s.dp_sync.allgather_bucket_params == 5e8
     and not s.dp_sync.overlap_grad_reduce),
    # Megatron-Core: order tp-cp-ep-dp-pp, bucket max(40e6, 1e6·dp) params, distributed optimizer
    ("megatron", lambda s: s.placement is PlacementOrder.TP_DP_PP and s.dp_sync.bucket_params == 40_000_000
     and s.zero is ZeroStage.ZERO1),
    # NcclAllReduce(num_packs=1): one pack of all gradients
    ("tf-mirrored", lambda s: s.dp_sync.bucket_bytes is None and s.dp_sync.bucket_params is None),
    # ParameterServerStrategy: asynchronous, unbounded staleness
    ("tf-ps", lambda s: isinstance(s.dp_sync, ParamServerSync) and s.dp_sync.mode is ParamServerMode.ASYNC
     and s.dp_sync.staleness_steps is None),
])
def test_cited_defaults(name, check):
    assert check(apply_profile(name, global_batch=32))


def test_every_field_stays_overridable():
    s = apply_profile("horovod", global_batch=32, allreduce_algorithm="hierarchical", fusion_cycle_s=0.005,
                      bucket_bytes="64MiB", zero=1)
    assert s.dp_sync.algorithm is AllReduceAlgorithm.HIERARCHICAL
    assert (s.dp_sync.bucket_bytes, s.dp_sync.fusion_cycle_s, s.zero) == (64 * MiB, 0.005, ZeroStage.ZERO1)
    # a byte override replaces a profile's element-count bucket (and the other way round)
    assert apply_profile("deepspeed", global_batch=8, bucket_bytes=4096).dp_sync.bucket_params is None
    assert apply_profile("ddp", global_batch=8, bucket_params=1000).dp_sync.bucket_bytes is None
    # switching the sync kind drops the other kind's defaults
    assert isinstance(apply_profile("tf-ps", global_batch=8, dp_sync="all-reduce").dp_sync, AllReduceSync)
    ps = apply_profile("ddp", global_batch=8, dp_sync="param-server", ps_mode="async", staleness_steps=2)
    assert ps.dp_sync.staleness_steps == 2


def test_errors():
    with pytest.raises(SpecError, match="^profile: unknown profile 'horovd'; known: ddp, horovod, deepspeed"):
        get_profile("horovd")
    with pytest.raises(SpecError, match="^global_batch: a profile sets no batch size"):
        apply_profile("ddp")
    with pytest.raises(SpecError, match="^ps_shards: applies to a parameter server, not to all-reduce"):
        apply_profile("ddp", global_batch=8, ps_shards=2)


def test_megatron_profile_on_a_cluster():
    lay = build_layout(apply_profile("megatron", global_batch=64, tp=8, pp=2), load_preset("dgx-h100").with_nodes(4),
                       get_preset("llama2-7b"))
    assert lay.sequence_parallel and lay.pp_groups[0] == (0, 16)
    assert lay.bucket_bytes == 40_000_000 * 4  # 40M elements of bf16 models' gradients, reduced in fp32 by Megatron


def test_tf_ps_needs_a_server_node():
    with pytest.raises(SpecError, match="^ps_server_nodes: 1 server nodes leave no workers in 1 nodes"):
        build_layout(apply_profile("tf-ps", global_batch=8), load_preset("dgx-h100"), get_preset("llama2-7b"))
