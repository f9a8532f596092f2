"""Helpers shared by the cluster-file reader (:mod:`.io`), the schema (:mod:`._schema`) and the preset
registry (:mod:`.presets`): strict YAML parsing, the node-count override and the presets' texts. A module
below all three, so that the reader and the schema can resolve a preset name and the registry can parse
its YAML without importing each other."""

from __future__ import annotations

from collections.abc import Hashable
from importlib import resources
from typing import Any

import yaml

from simulator.checks import positive_int
from simulator.cluster.spec import Cluster
from simulator.errors import SpecError

__all__ = ["parse_yaml", "preset_names", "preset_text", "with_nodes"]

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


def with_nodes(cluster: Cluster, nodes: int | None) -> Cluster:
    """``cluster`` with ``nodes`` nodes (``--nodes N``); ``None`` keeps the file's count."""
    if nodes is None:
        return cluster
    return cluster.with_nodes(positive_int("nodes", nodes))


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (plain YAML keeps the last silently)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, Hashable):  # a list or mapping as a key (``? [a, b]``, ``{[1]: 2}``)
            raise yaml.constructor.ConstructorError(None, None, f"a {type(key).__name__} cannot be a key",
                                                    key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice (first at line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text → Python data; errors become SpecError(``where``, "invalid YAML at line N ...").

    Besides syntax errors, PyYAML fails with a RecursionError on deep nesting, a ValueError on an
    impossible date (``2024-13-45``) or an integer over Python's 4300-digit limit: each is one SpecError."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except RecursionError:
        raise SpecError(where, "invalid YAML: nested too deeply") from None
    except ValueError as err:
        raise SpecError(where, f"invalid YAML: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(where, f"invalid YAML{line}: {problem}") from None
