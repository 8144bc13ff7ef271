"""The model-family registry: ``@register_model("name", ...)`` on a model class.

A family is one folder under ``tablegen_tf/models/`` (or any importable module named
in ``TABLEGEN_PLUGINS`` or the ``tablegen.model_families`` entry-point group): its
model class (a :class:`~tablegen_tf.models.base.GenerationModel`), its config dataclass
(the ``model:`` section: the single source of its defaults) and the featurizer of the
example form it reads. Trainer, evaluate, generate, export, serve and the TFX Trainer
find everything here; nothing outside the family's folder names it.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
import pkgutil
from typing import Any, Dict, List, Mapping, Optional, Tuple

PLUGINS_ENV = "TABLEGEN_PLUGINS"  # comma-separated modules that register families
ENTRY_POINT_GROUP = "tablegen.model_families"


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    name: str
    model_class: type
    config_class: type  # dataclass with a `name` field; its defaults are the family's
    featurizer_class: type
    fixed: Tuple[Tuple[str, Any], ...] = ()  # constructor arguments fixed by the name
    description: str = ""

    @property
    def example_form(self) -> str:
        return self.featurizer_class.example_form

    def kinds(self) -> List[str]:
        """The config kinds a corpus file may tune under ``models:`` (general first)."""
        return [k.KIND for k in reversed(self.config_class.__mro__) if getattr(k, "KIND", None)
                and "KIND" in vars(k)]

    def default_config(self):
        return self.config_class(name=self.name)

    def build_model(self, config, vocab_sizes: Mapping[str, int]):
        """The family's Keras model for a full Config and the vocabulary sizes."""
        return self.model_class.from_config_sections(self, config, dict(vocab_sizes))

    def featurizer(self, vocabs, config):
        return self.featurizer_class(vocabs, config)


_FAMILIES: Dict[str, ModelFamily] = {}
_discovered = False


def register_model(name: str, *, config: type, featurizer: type, fixed: Optional[Mapping[str, Any]] = None,
                   description: str = ""):
    """Class decorator registering a model family (stack it for named variants)."""
    from tablegen_tf.models.base import check_contract

    def decorate(model_class):
        check_contract(model_class)
        if not dataclasses.is_dataclass(config) or "name" not in {f.name for f in dataclasses.fields(config)}:
            raise TypeError(f"model family {name!r}: config must be a dataclass with a `name` field")
        previous = _FAMILIES.get(name)
        if previous is not None and previous.model_class.__qualname__ != model_class.__qualname__:
            raise ValueError(f"model family {name!r} is registered twice ({previous.model_class} and {model_class})")
        _FAMILIES[name] = ModelFamily(name, model_class, config, featurizer, tuple(sorted((fixed or {}).items())),
                                      description or (model_class.__doc__ or "").strip().split("\n")[0])
        return model_class

    return decorate


def _discover() -> None:
    """Imports the built-in family folders, plugin modules and entry points (once)."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    here = os.path.dirname(os.path.abspath(__file__))
    for module in pkgutil.iter_modules([here]):
        if module.ispkg:
            importlib.import_module(f"tablegen_tf.models.{module.name}")
    for name in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        importlib.import_module(name)
    from importlib.metadata import entry_points

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        entry.load()


def family_names() -> List[str]:
    _discover()
    return sorted(_FAMILIES)


def get_family(name: str) -> ModelFamily:
    _discover()
    if name not in _FAMILIES:
        close = difflib.get_close_matches(str(name), list(_FAMILIES), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise _config_error(f"unknown model {name!r}{hint} (known: {', '.join(sorted(_FAMILIES))})")
    return _FAMILIES[name]


def _config_error(message: str) -> Exception:
    from tablegen_tf.config import ConfigError

    return ConfigError(message)


def build_model(name: Optional[str] = None, model_values: Optional[Mapping] = None,
                vocab_sizes: Optional[Mapping[str, int]] = None, data_values: Optional[Mapping] = None):
    """A model of family ``name`` from ``model:`` values over the family defaults (strict),
    ``data:`` values and vocabulary sizes {"words", "fields", "entities", "groups"}."""
    from tablegen_tf.config import build_config

    model_values = dict(model_values or {})
    model_values["name"] = name or model_values.get("name")
    config = build_config({"model": model_values, "data": dict(data_values or {})})
    return get_family(config.model.name).build_model(config, vocab_sizes or {})
