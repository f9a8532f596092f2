"""A real torch model as the simulator's generic layer list (:class:`LayerListWorkload`).

One forward pass on ``sample_input`` (batch first) with hooks on every leaf module (a module without
children) measures, per leaf and divided by the batch size:

- ``params``: the leaf's own parameters (a parameter shared by several leaves counts at its first user);
- ``fwd_flops``: FLOPs counted by ``torch.utils.flop_counter.FlopCounterMode`` (2 per multiply-add,
  matmuls and convolutions only — element-wise ops count 0; in torch 2.13 the CPU kernel of
  ``scaled_dot_product_attention`` has no FLOP formula either, so attention scores count 0 on CPU)
  between the leaf's pre- and post-hook;
- ``activation_bytes``: storage bytes autograd saves for backward while the leaf runs
  (``torch.autograd.graph.saved_tensors_hooks``); parameter storages are excluded, and a storage already
  saved by an earlier leaf is not counted again (e.g. ReLU's output that the next Linear saves as input);
- ``output_bytes``: bytes of the leaf's output tensors.

Work done outside leaves (functional calls in a parent's ``forward``, residual adds, a tied head via
``F.linear``) goes to one extra layer named ``(outside leaf modules)`` so totals stay complete.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from simulator.errors import SpecError
from simulator.workload.layers import LayerListWorkload, LayerSpec
from simulator.workload.transformer import DtypePolicy

OUTSIDE = "(outside leaf modules)"


def _tensors(value) -> list[torch.Tensor]:
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def layer_list(model: nn.Module, sample_input: torch.Tensor, *, name: str | None = None,
               dtype: DtypePolicy = DtypePolicy.FP32) -> LayerListWorkload:
    """Leaf modules of ``model`` in execution order, with per-sample params, FLOPs and activation bytes."""
    if not torch.is_tensor(sample_input) or sample_input.dim() < 1 or sample_input.shape[0] < 1:
        raise SpecError("sample_input", "must be a tensor with a batch dimension first")
    batch = sample_input.shape[0]
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    order: list[str] = []
    stats: dict[str, dict[str, float]] = {}
    active: list[str] = []
    saved: set[int] = set()
    counted_params: set[int] = set()
    counter = FlopCounterMode(display=False)

    def entry(key: str) -> dict[str, float]:
        if key not in stats:
            order.append(key)
            stats[key] = {"params": 0, "flops": 0.0, "act": 0, "out": 0, "flops_at_start": 0.0}
        return stats[key]

    def pre_hook(module_name: str, module: nn.Module) -> None:
        rec = entry(module_name)
        for p in module.parameters(recurse=False):
            if id(p) not in counted_params:
                counted_params.add(id(p))
                rec["params"] += p.numel()
        rec["flops_at_start"] = counter.get_total_flops()
        active.append(module_name)

    def post_hook(module_name: str, output) -> None:
        rec = stats[module_name]
        rec["flops"] += counter.get_total_flops() - rec["flops_at_start"]
        rec["out"] += sum(t.untyped_storage().nbytes() for t in _tensors(output))
        active.pop()

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in param_storages and ptr not in saved:
            saved.add(ptr)
            entry(active[-1] if active else OUTSIDE)["act"] += t.untyped_storage().nbytes()
        return t

    handles = []
    for module_name, module in model.named_modules():
        if next(module.children(), None) is None:
            handles.append(module.register_forward_pre_hook(
                lambda mod, args, n=module_name: pre_hook(n, mod)))
            handles.append(module.register_forward_hook(lambda mod, args, out, n=module_name: post_hook(n, out)))
    try:
        with counter, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(sample_input)
    finally:
        for h in handles:
            h.remove()
    leaf_flops = sum(rec["flops"] for rec in stats.values())
    outside_flops = counter.get_total_flops() - leaf_flops
    if outside_flops > 0:
        entry(OUTSIDE)["flops"] += outside_flops
    layers = tuple(LayerSpec(name=key, params=int(stats[key]["params"]), fwd_flops=stats[key]["flops"] / batch,
                             activation_bytes=int(stats[key]["act"] // batch),
                             output_bytes=int(stats[key]["out"] // batch)) for key in order)
    return LayerListWorkload(name=name or type(model).__name__, layers=layers, dtype=dtype,
                             source="measured by executor.layers.layer_list (torch forward hooks)")
