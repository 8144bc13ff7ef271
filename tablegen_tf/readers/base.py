"""What every corpus reader produces: raw (untokenized) tables or rejections.

Readers are plain Python (no Beam) so they are easy to test; the Beam job in
``beam_jobs/prepare.py`` runs them in Beam, tokenizes with the one TF tokenizer,
builds ``tablegen_tf.schema.TableExample`` and writes records, dead letters,
vocabularies and statistics.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Iterator, List, Optional, Union

SPLITS = ("train", "valid", "test")


class InputError(ValueError):
    """A problem with the job's input as a whole (missing path, ...): exit non-zero."""


@dataclasses.dataclass
class RawItem:
    """One field of a table with its raw (untokenized) value."""

    field: str
    value: str
    entity: str = ""
    group: str = ""


@dataclasses.dataclass
class RawTable:
    example_id: str
    source: str  # "path:line" of the (first) input row
    items: List[RawItem]
    texts: List[str]  # raw target text(s); several for multi-reference entries
    # Rows whose group_key is equal are merged into one multi-reference
    # example on valid/test splits (E2E: one example per distinct MR).
    group_key: Optional[str] = None
    rows: int = 1  # input rows this table stands for (for the read/written/rejected balance)
    with_content_plan: bool = False


@dataclasses.dataclass
class Rejection:
    file: str
    line: int  # 1-based line (or entry/game index for XML/JSON) in `file`
    reason: str
    content: str = ""
    rows: int = 1

    def to_json(self) -> str:
        return json.dumps(
            {"file": self.file, "line": self.line, "reason": self.reason, "content": self.content[:500]},
            ensure_ascii=False,
        )


Parsed = Union[RawTable, Rejection]


class FormatReader:
    """Base class of the corpus readers."""

    name = ""

    def input_units(self, path: str, split: str) -> List[str]:
        """The independent units to read (files or file prefixes); raises InputError."""
        raise NotImplementedError

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        """Yields one RawTable or Rejection per input row of `unit`, in order."""
        raise NotImplementedError


def infer_split(path: str) -> str:
    """train / valid / test from a path ("devset.csv" -> valid)."""
    name = os.path.basename(os.path.normpath(path)).lower()
    for token in re.split(r"[^a-z]+", name) + re.split(r"[^a-z]+", path.lower())[::-1]:
        if token.startswith("train"):
            return "train"
        if token in ("valid", "validation", "dev", "devset", "val"):
            return "valid"
        if token.startswith("test"):
            return "test"
    return "train"


def require_exists(path: str) -> None:
    if not os.path.exists(path):
        raise InputError(f"input not found: {path} (check --input)")
