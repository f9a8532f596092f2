"""``trainplan model list`` and ``trainplan model show NAME|config.json``: the workload's shapes,
parameter counts and FLOPs per token."""

from __future__ import annotations

from simulator.workload import (LayerListWorkload, ParamCountModel, Recompute, parse_param_count, TransformerSpec, fwd_flops_per_token,
                                layer_fwd_flops_per_token, load_model, model_names, get_preset,
                                train_flops_per_token)
from trainplan import cli_common


def register(subparsers) -> None:
    parser = subparsers.add_parser("model", help="list model presets or show a model's shapes, params, FLOPs")
    sub = parser.add_subparsers(dest="model_command", metavar="SUBCOMMAND")
    sub.required = True
    lst = sub.add_parser("list", help="list the embedded model presets")
    lst.add_argument("--json", action="store_true", help="print JSON")
    lst.set_defaults(handler=_list)
    show = sub.add_parser("show", help="show a preset or a Hugging Face config.json")
    show.add_argument("model", metavar="NAME|config.json", nargs="?")
    show.add_argument("--params", help="a bare parameter count instead of a model (7.5e9, 7.5B)")
    show.add_argument("--seq", type=int, help="sequence length (default: the model's own)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_show)


def _list(args) -> int:
    rows = [{"name": n, "params": get_preset(n).params, "layers": get_preset(n).layers,
             "hidden": get_preset(n).hidden, "seq_len": get_preset(n).seq_len, "source": get_preset(n).source}
            for n in model_names()]
    if args.json:
        cli_common.print_json(rows)
        return 0
    print(f"{'name':<17} {'params':>9} {'layers':>6} {'hidden':>6} {'seq':>5}  source")
    for r in rows:
        print(f"{r['name']:<17} {r['params'] / 1e9:>8.2f}B {r['layers']:>6} {r['hidden']:>6} {r['seq_len']:>5}  "
              f"{r['source']}")
    return 0


def spec_summary(spec: TransformerSpec) -> dict:
    """Shapes, parameter counts and FLOPs per token of a spec (the ``--json`` output of ``show``)."""
    return {
        "name": spec.name, "source": spec.source,
        "shape": {"layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads, "kv_heads": spec.n_kv_heads,
                  "head_dim": spec.d_head, "ffn": spec.ffn_size, "vocab": spec.vocab, "seq_len": spec.seq_len,
                  "activation": spec.activation.value, "norm": spec.norm.value, "position": spec.position.value,
                  "bias": spec.bias.value, "tied_embeddings": spec.tied_embeddings, "dtype": spec.dtype.value},
        "params": {"total": spec.params, "per_layer": spec.layer_params, "attention_per_layer": spec.attention_params,
                   "mlp_per_layer": spec.mlp_params, "embedding": spec.embedding_params, "head": spec.head_params,
                   "non_embedding": spec.non_embedding_params},
        "flops_per_token": {
            "forward": fwd_flops_per_token(spec),
            "forward_per_layer": layer_fwd_flops_per_token(spec),
            "train": train_flops_per_token(spec, Recompute.NONE),
            "train_selective_recompute": train_flops_per_token(spec, Recompute.SELECTIVE),
            "train_full_recompute": train_flops_per_token(spec, Recompute.FULL),
            "six_n": 6.0 * spec.params,
        },
    }


def _show(args) -> int:
    if (args.model is None) == (args.params is None):
        raise cli_common.UsageError("give a model NAME or config.json, or --params COUNT (one of them)")
    if args.params is not None:
        model = ParamCountModel(params=parse_param_count(args.params))
        if args.json:
            cli_common.print_json({"name": model.name, "params": model.params, "dtype": model.dtype.value})
        else:
            print(f"{model.name}: {model.params:,} params (a bare count: model-state questions only)")
        return 0
    model = load_model(args.model)
    if isinstance(model, LayerListWorkload):
        if args.seq is not None:
            raise cli_common.UsageError("--seq applies to transformers, not layer lists")
        if args.json:
            cli_common.print_json(model.to_dict() | {"params": model.params})
        else:
            print(f"{model.name}: {model.params:,} params, {model.fwd_flops_per_sample:.4g} forward FLOPs/sample")
            for layer in model.layers:
                print(f"  {layer.name:<20} {layer.params:>14,} params {layer.fwd_flops:>12.4g} FLOPs")
        return 0
    spec = model.with_seq(args.seq) if args.seq is not None else model
    summary = spec_summary(spec)
    if args.json:
        cli_common.print_json(summary)
        return 0
    _print_summary(summary)
    return 0


def _print_summary(s: dict) -> None:
    shape, params, flops = s["shape"], s["params"], s["flops_per_token"]
    print(f"{s['name']}  ({s['source']})")
    print(f"  layers {shape['layers']}, hidden {shape['hidden']}, heads {shape['heads']} (kv {shape['kv_heads']}, "
          f"head dim {shape['head_dim']}), ffn {shape['ffn']} {shape['activation']}, vocab {shape['vocab']}, "
          f"seq {shape['seq_len']}")
    print(f"  {shape['norm']}, {shape['position']} positions, biases: {shape['bias']}, "
          f"{'tied' if shape['tied_embeddings'] else 'untied'} embeddings, dtype {shape['dtype']}")
    print(f"  params        {params['total']:>18,}  ({params['total'] / 1e9:.3f}B)")
    print(f"    per layer   {params['per_layer']:>18,}  (attention {params['attention_per_layer']:,}, "
          f"mlp {params['mlp_per_layer']:,})")
    print(f"    embedding   {params['embedding']:>18,}")
    print(f"    head        {params['head']:>18,}")
    print("  FLOPs per token")
    print(f"    forward     {flops['forward']:>18.4g}")
    for op, value in flops["forward_per_layer"].items():
        print(f"      {op:<10}{value:>18.4g}  per layer")
    print(f"    train       {flops['train']:>18.4g}  (6N = {flops['six_n']:.4g})")
    print(f"    + selective {flops['train_selective_recompute']:>18.4g}")
    print(f"    + full      {flops['train_full_recompute']:>18.4g}")
