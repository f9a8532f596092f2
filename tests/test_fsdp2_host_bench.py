"""The FSDP2 per-module probe (executor/fsdp2_host_bench.py): why it runs on a fake multi-rank group (torch 2.13's
FSDP2 skips the all-gather and its copies on one rank: ``FSDPParamGroup.unshard``'s ``if world_size == 1``), and
the terms' formula on the returned timings."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from executor.fsdp2_host_bench import fake_group, time_fsdp2_modules
from executor.host_bench import one_rank_group
from executor.model import build_gpt
from executor.compute_grid import tiny_model
from simulator.workload import DtypePolicy, load_model

GPT_TINY = tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32)


def _all_gathers_per_forward(monkeypatch, group) -> int:
    """``foreach_all_gather`` calls in one forward of the tiny GPT under FSDP2 (every block and the root) on
    ``group`` (a context manager giving the default group)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg

    calls = []
    real = pg.foreach_all_gather
    monkeypatch.setattr(pg, "foreach_all_gather", lambda *a, **k: calls.append(1) or real(*a, **k))
    with group:
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        model = build_gpt(GPT_TINY, seed=0)
        for block in model.layers:
            fully_shard(block, mesh=mesh, reshard_after_forward=True)
        fully_shard(model, mesh=mesh, reshard_after_forward=True)
        x = torch.randint(0, GPT_TINY.vocab, (2, GPT_TINY.seq_len))
        model(x, x)
    return len(calls)


def test_one_rank_skips_the_all_gather_path_a_fake_pair_takes_it(monkeypatch):
    assert _all_gathers_per_forward(monkeypatch, one_rank_group()) == 0
    assert _all_gathers_per_forward(monkeypatch, fake_group(2)) == GPT_TINY.layers + 1


def test_probe_formula_on_its_timings():
    t = time_fsdp2_modules(GPT_TINY, 2, repeats=5, warmup=1)
    assert (t.modules, t.dp) == (GPT_TINY.layers + 1, 2) and not dist.is_initialized()
    fwd = max(0.0, (t.fsdp2_forward.p10_s - t.plain_forward.p10_s) / t.modules * 1e6)
    assert t.forward_module_us == pytest.approx(fwd, rel=1e-12)
    assert t.backward_module_us == pytest.approx(max(0.0, (t.fsdp2_step.p10_s - t.plain_step.p10_s) / t.modules * 1e6
                                                     - fwd), rel=1e-12, abs=1e-9)


def test_fake_group_refuses_a_second_default_group():
    with one_rank_group():
        with pytest.raises(RuntimeError, match="fake"):
            with fake_group(2):
                pass


def _all_gathers_in_backward(monkeypatch, reshard_after_forward: bool) -> int:
    """``foreach_all_gather`` calls in one backward of the tiny GPT under FSDP2 on the fake pair."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg

    calls = []
    real = pg.foreach_all_gather
    monkeypatch.setattr(pg, "foreach_all_gather", lambda *a, **k: calls.append(1) or real(*a, **k))
    with fake_group(2):
        mesh = init_device_mesh("cpu", (2,))
        model = build_gpt(GPT_TINY, seed=0)
        for block in model.layers:
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
        x = torch.randint(0, GPT_TINY.vocab, (2, GPT_TINY.seq_len))
        loss = model(x, x)
        forward = len(calls)
        loss.backward()
    return len(calls) - forward


def test_zero2_backward_does_not_re_gather_so_it_has_its_own_term(monkeypatch):
    """Why ZeRO-2 has its own backward term (``host.fsdp2_zero2_backward_module_us``): with
    ``reshard_after_forward=True`` (ZeRO-3) the backward all-gathers every ``fully_shard`` module again (the
    blocks and the root), with False (ZeRO-2) it gathers none; the probe times each wrapping and says which it
    ran."""
    assert _all_gathers_in_backward(monkeypatch, True) == GPT_TINY.layers + 1
    assert _all_gathers_in_backward(monkeypatch, False) == 0
    t = time_fsdp2_modules(GPT_TINY, 2, repeats=3, warmup=1, reshard_after_forward=False)
    assert not t.reshard_after_forward and t.modules == GPT_TINY.layers + 1 and not dist.is_initialized()


def test_optimizer_probe_formula_and_what_it_writes():
    """The DTensor surcharge per AdamW call: (median CPU of the FSDP2 step − the plain one's) / (10 · 28 tensors),
    written as ``device.dtensor_call_overhead_us`` by the compute calibration; FSDP2's shards cost more per call than
    plain tensors (a DTensor dispatch per operator), so the figure is positive."""
    from dataclasses import replace

    from executor.calibrate_host import HostTerms, with_dtensor_calls
    from executor.compute_bench import threads
    from executor.fsdp2_host_bench import time_fsdp2_optimizer
    from simulator.cluster.io import load_cluster

    with threads(1):  # as the calibration runs it (one thread per rank): no intra-op pool spinning on the clock
        t = time_fsdp2_optimizer(GPT_TINY, 2, repeats=8, warmup=2)
    assert (t.tensors, t.calls) == (28, 280) and not dist.is_initialized()
    assert t.dtensor_call_us == pytest.approx(max(0.0, t.fsdp2_cpu_s - t.plain_cpu_s) / 280 * 1e6, rel=1e-12)
    assert t.fsdp2_cpu_s > t.plain_cpu_s
    device = load_cluster("localhost-cpu").device
    terms = HostTerms(tp=None, ddp=None, adamw=None, checkpoint=None, fsdp2=None, pipeline=None, fsdp2_optimizer=t)
    assert with_dtensor_calls(device, terms).dtensor_call_overhead_us == t.dtensor_call_us
    assert with_dtensor_calls(device, replace(terms, fsdp2_optimizer=None)) == device
    assert with_dtensor_calls(device, None) == device


@pytest.mark.parametrize("reshard_after_forward", [True, False])
def test_every_timed_call_starts_resharded_so_the_step_gathers(monkeypatch, reshard_after_forward):
    """A training step starts with its parameters sharded. Under ZeRO-2 a bare forward leaves them gathered, so without
    a reshard after each timed call the probe's forward + backward would gather nothing and ``step − forward`` would
    miss one gather's host work per module. Both wrappings: every timed forward and every timed step's forward
    gathers each ``fully_shard`` module (warm-up and repeats: (2, or 3 with ZeRO-3's re-gather) · 3 · modules)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg

    calls = []
    real = pg.foreach_all_gather
    monkeypatch.setattr(pg, "foreach_all_gather", lambda *a, **k: calls.append(1) or real(*a, **k))
    time_fsdp2_modules(GPT_TINY, 2, repeats=2, warmup=1, reshard_after_forward=reshard_after_forward)
    passes = 3 if reshard_after_forward else 2  # forward, step's forward, and (ZeRO-3) the step's re-gather
    assert len(calls) == passes * (1 + 2) * (GPT_TINY.layers + 1)
