"""Registry of the embedded cluster presets: one YAML file per hardware kind in ``presets/``.

A preset describes one node type and its network; the node count is a parameter
(``load_preset("dgx-h100", nodes=16)``, ``--nodes 16``), never a separate preset. Each file cites
the source of every number in comments. Adding a ``presets/NAME.yaml`` adds preset ``NAME``.
"""

from __future__ import annotations

from importlib import resources

from simulator.cluster._files import parse_yaml, with_nodes
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.spec import Cluster
from simulator.errors import SpecError

_PACKAGE = "simulator.cluster"
_FOLDER = "presets"
_SUFFIX = ".yaml"


def _folder():
    return resources.files(_PACKAGE).joinpath(_FOLDER)


def preset_names() -> list[str]:
    """Names of the embedded presets, sorted."""
    return sorted(entry.name[: -len(_SUFFIX)] for entry in _folder().iterdir()
                  if entry.name.endswith(_SUFFIX) and not entry.name.startswith("_"))


def preset_text(name: str) -> str:
    """The YAML text of preset ``name`` (with its source comments)."""
    names = preset_names()
    if name not in names:
        raise SpecError("cluster", f"unknown preset {name!r}; known: {', '.join(names)} "
                        "(or give a .yaml/.json file path)")
    return _folder().joinpath(name + _SUFFIX).read_text(encoding="utf-8")


def load_preset(name: str, nodes: int | None = None) -> Cluster:
    """Preset ``name`` as a validated :class:`Cluster`; ``nodes`` overrides its node count (default 1)."""
    text = preset_text(name)
    data = parse_yaml(text, f"preset {name}")
    if not isinstance(data, dict):
        raise SpecError(f"preset {name}", "the preset file must hold one mapping")
    return with_nodes(cluster_from_dict(data), nodes)
