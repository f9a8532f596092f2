"""Registry of the embedded cluster presets: one YAML file per hardware kind in ``presets/``.

A preset describes one node type and its network; the node count is a parameter
(``load_preset("dgx-h100", nodes=16)``, ``--nodes 16``), never a separate preset. Each file cites
the source of every number in comments. Adding a ``presets/NAME.yaml`` adds preset ``NAME``.
"""

from __future__ import annotations

from simulator.cluster._files import parse_yaml, preset_names, preset_text, with_nodes  # noqa: F401 (re-exported)
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.spec import Cluster
from simulator.errors import SpecError


def load_preset(name: str, nodes: int | None = None) -> Cluster:
    """Preset ``name`` as a validated :class:`Cluster`; ``nodes`` overrides its node count (default 1)."""
    text = preset_text(name)
    data = parse_yaml(text, f"preset {name}")
    if not isinstance(data, dict):
        raise SpecError(f"preset {name}", "the preset file must hold one mapping")
    return with_nodes(cluster_from_dict(data), nodes)
