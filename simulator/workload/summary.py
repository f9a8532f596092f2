"""What ``trainplan model show`` prints for each workload kind: a JSON-able summary and its text form.

Transformer: shapes, parameter counts (:mod:`simulator.workload.transformer`) and matmul FLOPs per
token (:mod:`simulator.workload.flops`); layer list: its layers; parameter count: the count alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.workload.flops import (Recompute, fwd_flops_per_token, layer_fwd_flops_per_token,
                                      train_flops_per_token)

if TYPE_CHECKING:
    from simulator.workload.layers import LayerListWorkload, ParamCountModel
    from simulator.workload.transformer import TransformerSpec

__all__ = ["describe_layer_list", "describe_param_count", "describe_transformer", "layer_list_summary",
           "param_count_summary", "transformer_summary"]


def transformer_summary(spec: TransformerSpec) -> dict:
    """Shapes, parameter counts and FLOPs per token of a spec (the ``--json`` output of ``show``)."""
    last = spec.layers - 1  # a MoE block when the model has experts (DeepSeek-style dense layers come first)
    return {
        "name": spec.name, "source": spec.source,
        "shape": {"layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads, "kv_heads": spec.n_kv_heads,
                  "head_dim": spec.d_head, "ffn": spec.ffn_size, "vocab": spec.vocab, "seq_len": spec.seq_len,
                  "activation": spec.activation.value, "norm": spec.norm.value, "position": spec.position.value,
                  "bias": spec.bias.value, "tied_embeddings": spec.tied_embeddings, "dtype": spec.dtype.value},
        "params": {"total": spec.params, "per_layer": spec.block_params(last), "attention_per_layer": spec.attention_params,
                   "mlp_per_layer": spec.block_params(last) - spec.attention_params - 2 * spec.norm_params,
                   "embedding": spec.embedding_params, "head": spec.head_params,
                   "non_embedding": spec.non_embedding_params, "active": spec.active_params,
                   "experts": spec.expert_params},
        "moe": spec.moe.summary() if spec.moe is not None else None,
        "flops_per_token": {
            "forward": fwd_flops_per_token(spec),
            "forward_per_layer": layer_fwd_flops_per_token(spec, moe_layer=spec.is_moe_layer(last)),
            "train": train_flops_per_token(spec, Recompute.NONE),
            "train_selective_recompute": train_flops_per_token(spec, Recompute.SELECTIVE),
            "train_full_recompute": train_flops_per_token(spec, Recompute.FULL),
            "six_n": 6.0 * spec.active_params,
        },
    }


def describe_transformer(spec: TransformerSpec) -> str:
    """The text form of :func:`transformer_summary`."""
    s = transformer_summary(spec)
    shape, params, flops = s["shape"], s["params"], s["flops_per_token"]
    lines = [
        f"{s['name']}  ({s['source']})",
        f"  layers {shape['layers']}, hidden {shape['hidden']}, heads {shape['heads']} (kv {shape['kv_heads']}, "
        f"head dim {shape['head_dim']}), ffn {shape['ffn']} {shape['activation']}, vocab {shape['vocab']}, "
        f"seq {shape['seq_len']}",
        f"  {shape['norm']}, {shape['position']} positions, biases: {shape['bias']}, "
        f"{'tied' if shape['tied_embeddings'] else 'untied'} embeddings, dtype {shape['dtype']}",
        f"  params        {params['total']:>18,}  ({params['total'] / 1e9:.3f}B)",
        f"    per layer   {params['per_layer']:>18,}  (attention {params['attention_per_layer']:,}, "
        f"mlp {params['mlp_per_layer']:,})",
        f"    embedding   {params['embedding']:>18,}",
        f"    head        {params['head']:>18,}",
        *_moe_lines(s),
        "  FLOPs per token",
        f"    forward     {flops['forward']:>18.4g}",
    ]
    lines += [f"      {op:<10}{value:>18.4g}  per layer" for op, value in flops["forward_per_layer"].items()]
    lines += [f"    train       {flops['train']:>18.4g}  (6N = {flops['six_n']:.4g})",
              f"    + selective {flops['train_selective_recompute']:>18.4g}",
              f"    + full      {flops['train_full_recompute']:>18.4g}"]
    return "\n".join(lines)


def _moe_lines(s: dict) -> list[str]:
    moe = s["moe"]
    if moe is None:
        return []
    shared = (f", {moe['shared_experts']} shared of {moe['shared_ffn']}" if moe["shared_experts"] else "")
    dense = f", dense layers {moe['dense_layers']}" if moe["dense_layers"] else ""
    return [f"  experts       {moe['experts']} of {moe['expert_ffn']}, top-{moe['top_k']}{shared}{dense}",
            f"    active      {s['params']['active']:>18,}  ({s['params']['active'] / 1e9:.3f}B per token)",
            f"    routed      {s['params']['experts']:>18,}  (sharded by ep)"]


def layer_list_summary(workload: LayerListWorkload) -> dict:
    """The layer list's file form plus its parameter count."""
    return workload.to_dict() | {"params": workload.params}


def describe_layer_list(workload: LayerListWorkload) -> str:
    lines = [f"{workload.name}: {workload.params:,} params, {workload.fwd_flops_per_sample:.4g} forward FLOPs/sample"]
    lines += [f"  {layer.name:<20} {layer.params:>14,} params {layer.fwd_flops:>12.4g} FLOPs"
              for layer in workload.layers]
    return "\n".join(lines)


def param_count_summary(model: ParamCountModel) -> dict:
    return {"name": model.name, "params": model.params, "dtype": model.dtype.value}


def describe_param_count(model: ParamCountModel) -> str:
    return f"{model.name}: {model.params:,} params (a bare count: model-state questions only)"
