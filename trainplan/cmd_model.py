"""``trainplan model list`` and ``trainplan model show NAME|config.json``: the workload's shapes,
parameter counts and FLOPs per token."""

from __future__ import annotations

from simulator.workload import ParamCountModel, get_preset, load_model, model_names, parse_param_count
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


def _show(args) -> int:
    if (args.model is None) == (args.params is None):
        raise cli_common.UsageError("give a model NAME or config.json, or --params COUNT (one of them)")
    model = ParamCountModel(params=parse_param_count(args.params)) if args.params is not None else \
        load_model(args.model)
    if args.seq is not None:
        model = model.with_seq(args.seq)
    if args.json:
        cli_common.print_json(model.summary())
    else:
        print(model.describe())
    return 0
