"""``with_host_modules`` returns the compute untouched when every host term it adds is 0
(:data:`simulator.framework_host.MODULE_TERMS_US`): checked against the full computation with each ``Host`` time (a
``_us`` field) set alone, on layouts that exercise every term (FSDP2, torch tp, checkpoints, DDP, torch's
pipeline) and on an inline and an async device. Fails if the function starts to read a host field the list does
not name."""

from dataclasses import fields, replace

import pytest

from simulator import framework_host
from simulator.cluster.presets import load_preset
from simulator.cluster.spec import KernelDispatch
from simulator.compile.compute_part import ChunkCompute
from simulator.strategy import Framework, Recompute, Strategy, ZeroStage, build_layout
from simulator.workload import ChunkSlice, get_preset

MODEL = get_preset("gpt3-125m")
LAYOUTS = [
    Strategy(global_batch=16, tp=2, pp=2, recompute=Recompute.FULL, framework=Framework.TORCH_DDP),
    Strategy(global_batch=16, tp=1, pp=2, zero=ZeroStage.ZERO2, framework=Framework.FSDP2,
             recompute=Recompute.SELECTIVE),
    Strategy(global_batch=16, tp=1, pp=1, zero=ZeroStage.ZERO3, framework=Framework.FSDP2),
    Strategy(global_batch=16, tp=2, pp=1, zero=ZeroStage.ZERO1, framework=Framework.DEEPSPEED),
]
COMPUTE = ChunkCompute(fwd_s=1e-9, bwd_s=2e-9, recompute_s=0.0, layer_params=1.0, edge_params=0.0,
                       boundary_bytes=1, blocks=6)


def _host_fields(host) -> list[str]:
    """Every host time (a ``_us`` field, by the project's naming rule)."""
    return [f.name for f in fields(host) if f.name.endswith("_us")]


def _zeroed(host):
    return replace(host, **{name: 0.0 for name in _host_fields(host) if name != "fsdp2_zero2_backward_module_us"},
                   fsdp2_zero2_backward_module_us=None)


@pytest.mark.parametrize("dispatch", [KernelDispatch.INLINE, KernelDispatch.ASYNC])
@pytest.mark.parametrize("strategy", LAYOUTS)
def test_the_early_return_skips_only_hosts_that_add_nothing(strategy, dispatch):
    base = load_preset("dgx-a100", 1)
    base = replace(base, device=replace(base.device, kernel_dispatch=dispatch))
    layout = build_layout(strategy, base, MODEL)
    zero = _zeroed(base.node.host)
    for name in _host_fields(zero):
        host = replace(zero, **{name: 7.0})
        cluster = replace(base, node=replace(base.node, host=host))
        for index in range(layout.pp):
            chunk = ChunkSlice(index=index, count=layout.pp, start=index * 6, layers=6)
            full = framework_host._with_module_terms(host, cluster.device, layout, chunk, COMPUTE, 2.0)
            assert framework_host.with_host_modules(cluster, layout, chunk, COMPUTE, 2.0) == full, name


def test_some_term_changes_the_compute():  # so the property above is not vacuous
    base = load_preset("dgx-a100", 1)
    layout = build_layout(LAYOUTS[0], base, MODEL)
    zero = _zeroed(base.node.host)
    changed = {name for name in framework_host.MODULE_TERMS_US
               if framework_host._with_module_terms(replace(zero, **{name: 7.0}), base.device, layout,
                                                    ChunkSlice(index=0, count=2, start=0, layers=6), COMPUTE,
                                                    1.0) != COMPUTE}
    assert {"tp_forward_module_us", "checkpoint_forward_region_us", "pipeline_action_us"} <= changed
