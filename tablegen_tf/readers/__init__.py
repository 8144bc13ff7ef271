"""Corpus readers by format name (see base.py for the interface)."""

from __future__ import annotations

import importlib
from typing import Dict, List

from tablegen_tf.readers.base import FormatReader
from tablegen_tf.readers.texts_of_tables import SUFFIX as TEXTS_SUFFIX
from tablegen_tf.readers.texts_of_tables import TextsOfTables

# format name -> module holding its reader; imported lazily so a broken
# optional reader never stops the others.
_MODULES = {
    "wikibio": "tablegen_tf.readers.wikibio",
    "e2e": "tablegen_tf.readers.e2e",
    "e2e-aligned": "tablegen_tf.readers.e2e",
    "webnlg": "tablegen_tf.readers.webnlg",
    "rotowire": "tablegen_tf.readers.rotowire",
    "rotowire-sentences": "tablegen_tf.readers.rotowire",
    "jsonl": "tablegen_tf.readers.jsonl",
    "text-pairs": "tablegen_tf.readers.text_pairs",
    "sentences": "tablegen_tf.readers.sentences",
    "sentences-hashed": "tablegen_tf.readers.sentences",
    "compression": "tablegen_tf.readers.compression",
}


# Table formats whose references also read as sentences: ``F-texts`` (texts_of_tables.py).
_TABLE_FORMATS = ("wikibio", "e2e", "e2e-aligned", "webnlg", "rotowire", "rotowire-sentences", "jsonl")


def format_names() -> List[str]:
    return sorted(list(_MODULES) + [name + TEXTS_SUFFIX for name in _TABLE_FORMATS])


def get_reader(name: str) -> FormatReader:
    if name.endswith(TEXTS_SUFFIX) and name[: -len(TEXTS_SUFFIX)] in _TABLE_FORMATS:
        return TextsOfTables(get_reader(name[: -len(TEXTS_SUFFIX)]))
    if name not in _MODULES:
        raise KeyError(f"unknown format {name!r}; choose one of {', '.join(format_names())}")
    module = importlib.import_module(_MODULES[name])
    readers: Dict[str, type] = {
        obj.name: obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, FormatReader) and obj.name
    }
    return readers[name]()
