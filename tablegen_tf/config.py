"""YAML configuration: configs/defaults.yaml <- configs/<corpus>.yaml <- overrides.

Mappings are deep-merged key by key; lists and scalars (and null) replace.
``model.max_position`` is always copied from ``data.max_position`` so the position
embeddings match the data clip.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Dict, Iterable, Mapping, Optional

import yaml

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
CORPORA = ("e2e", "webnlg", "rotowire_sentences", "rotowire", "wikibio")


def deep_merge(base: Mapping, override: Mapping) -> Dict[str, Any]:
    """New dict: ``override`` merged into ``base`` (nested mappings merge, the rest replaces)."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def read_yaml(path: str) -> Dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def config_path(corpus_or_path: str) -> str:
    """A corpus name (``e2e``) or a path to a YAML file."""
    if corpus_or_path.endswith((".yaml", ".yml")) or os.path.sep in corpus_or_path:
        return corpus_or_path
    return os.path.join(CONFIG_DIR, f"{corpus_or_path}.yaml")


def parse_overrides(items: Iterable[str]) -> Dict[str, Any]:
    """["model.hidden_size=128", "train.tbptt={t1: 50, t2: 100}"] -> nested dict (YAML values)."""
    result: Dict[str, Any] = {}
    for item in items:
        dotted, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not key.path=value")
        *parents, leaf = dotted.strip().split(".")
        node = result
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(raw)
    return result


def load_config(corpus_or_path: Optional[str] = None, overrides: Optional[Mapping] = None) -> Dict[str, Any]:
    """Defaults merged with a corpus config and then ``overrides`` (a dict or key=value list)."""
    config = read_yaml(os.path.join(CONFIG_DIR, "defaults.yaml"))
    if corpus_or_path:
        config = deep_merge(config, read_yaml(config_path(corpus_or_path)))
    if overrides:
        if not isinstance(overrides, Mapping):
            overrides = parse_overrides(overrides)
        config = deep_merge(config, overrides)
    config.setdefault("model", {})["max_position"] = config.get("data", {}).get("max_position", 30)
    return config
