"""``trainplan cluster``: list the embedded cluster presets and show one cluster (preset or file).

    trainplan cluster list [--json]
    trainplan cluster show NAME|FILE [--nodes N] [--json]
    trainplan cluster export NAME|FILE [--nodes N] [--out FILE.yaml]
"""

from __future__ import annotations

import argparse

from simulator.cluster.describe import cluster_summary_dict, describe_cluster
from simulator.cluster.io import cluster_to_dict, load_cluster
from simulator.cluster.presets import load_preset, preset_names
from trainplan.cli_common import print_json


def register(subparsers) -> None:
    parser = subparsers.add_parser("cluster", help="list cluster presets; show a cluster's numbers",
                                   description="Cluster presets and cluster files (see docs/clusters.md).")
    sub = parser.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    sub.required = True

    lst = sub.add_parser("list", help="the embedded presets, one line each")
    lst.add_argument("--json", action="store_true", help="print JSON instead of text")
    lst.set_defaults(handler=_list)

    show = sub.add_parser("show", help="a readable summary of a preset or a cluster file")
    show.add_argument("cluster", metavar="NAME|FILE", help="a preset name (see `cluster list`) or a .yaml/.json file")
    show.add_argument("--nodes", type=int, default=None, metavar="N", help="number of nodes (default: the file's)")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.set_defaults(handler=_show)

    export = sub.add_parser("export", help="an editable cluster file (YAML) of a preset or a file, every value "
                                           "explicit; it loads back as the same cluster")
    export.add_argument("cluster", metavar="NAME|FILE", help="a preset name (see `cluster list`) or a .yaml/.json file")
    export.add_argument("--nodes", type=int, default=None, metavar="N", help="number of nodes (default: the file's)")
    export.add_argument("--out", metavar="FILE.yaml", help="write here instead of standard output")
    export.set_defaults(handler=_export)


def _list(args: argparse.Namespace) -> int:
    rows = [(name, load_preset(name).description) for name in preset_names()]
    if args.json:
        print_json([{"name": name, "description": text} for name, text in rows])
        return 0
    width = max(len(name) for name, _ in rows)
    for name, text in rows:
        print(f"{name:<{width}}  {text}")
    return 0


def _show(args: argparse.Namespace) -> int:
    cluster = load_cluster(args.cluster, nodes=args.nodes)
    if args.json:
        print_json(cluster_summary_dict(cluster))
    else:
        print(describe_cluster(cluster))
    return 0


def _export(args: argparse.Namespace) -> int:
    import yaml

    from simulator.jsonio import check_suffix, check_writable

    if args.out:
        check_suffix(args.out, (".yaml", ".yml"), "--out")
        check_writable(args.out, "--out")  # before any work
    cluster = load_cluster(args.cluster, nodes=args.nodes)
    text = f"# exported by `trainplan cluster export {args.cluster}`; edit and load with --cluster FILE\n"
    text += yaml.safe_dump(cluster_to_dict(cluster), sort_keys=False, allow_unicode=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0
