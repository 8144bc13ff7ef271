"""What every corpus reader produces: raw (untokenized) tables or rejections.

Readers are plain Python (no Beam) so they are easy to test; the Beam job in
``beam_jobs/prepare.py`` runs them in Beam, tokenizes with the one TF tokenizer,
builds ``tablegen_tf.schema.TableExample`` and writes records, dead letters,
vocabularies and statistics.
"""

from __future__ import annotations

import dataclasses
import hashlib
import gzip
import json
import os
import re
from typing import Iterator, List, Optional, Tuple, Union

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
    # texts are pre-tokenized ("family - friendly", "£ 20 - 25"): trained on as they are, but
    # scored as references detokenized, the form our generated text takes (and raw references have)
    pretokenized: bool = False

    def serving_input(self) -> str:
        """The JSONL table form the SavedModel's ``tables`` input takes."""
        records = []
        for item in self.items:
            record = {"field": item.field, "value": item.value}
            record.update({k: v for k, v in (("entity", item.entity), ("group", item.group)) if v})
            records.append(record)
        return json.dumps({"table": records}, ensure_ascii=False)


@dataclasses.dataclass
class RawText:
    """A source sentence (text-to-text example form) with its raw target text(s)."""

    example_id: str
    source: str  # "path:line"
    source_text: str
    texts: List[str]
    group_key: Optional[str] = None  # rows sharing one source merge on valid/test
    rows: int = 1
    labels: Optional[List[int]] = None  # per source token, when the corpus has them
    # Deletion-based targets: the builder derives ``labels`` (1 = source token kept) by
    # aligning the tokenized first target to the source as a subsequence.
    deletion_labels: bool = False

    def serving_input(self) -> str:
        return self.source_text


def merge_key(raw) -> str:
    """Rows with one key merge into one multi-reference example (one E2E MR, one source)."""
    return raw.group_key or raw.example_id


def in_selection(raw, fraction: float) -> bool:
    """The selection split carved from train (`tablegen prepare --selection-fraction`):
    deterministic by MR, so every row of one MR lands on the same side, on any runner,
    and `tablegen evaluate --selection-fraction` finds the same MRs."""
    key = merge_key(raw).encode("utf-8")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") < fraction * 2**64


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


Raw = Union[RawTable, RawText]
Parsed = Union[RawTable, RawText, Rejection]


class FormatReader:
    """Base class of the corpus readers."""

    name = ""
    example_form = "table"  # what the rows become: "table" (RawTable) or "text" (RawText)

    def input_units(self, path: str, split: str) -> List[str]:
        """The independent units to read (files or file prefixes); raises InputError."""
        raise NotImplementedError

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        """Yields one RawTable / RawText or Rejection per input row of `unit`, in order."""
        raise NotImplementedError


class LineFormatReader(FormatReader):
    """A format of one example per non-blank line of each input file (``*.gz`` read compressed)."""

    extensions: Tuple[str, ...] = ()
    id_prefix = ""  # example ids are "<id_prefix>:<split>:<file stem>:<line>"

    def input_units(self, path: str, split: str) -> List[str]:
        return file_or_files_in(path, self.extensions)

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        stem = os.path.basename(unit).split(".")[0]
        with open_maybe_gzip(unit) as handle:
            for line, raw in enumerate(handle, 1):
                if raw.strip():
                    yield self.parse_line(raw, line, unit, f"{self.id_prefix or self.name}:{split}:{stem}:{line}")

    def parse_line(self, raw: bytes, line: int, path: str, example_id: str) -> Parsed:
        raise NotImplementedError


def decode_line(raw: bytes, line: int, path: str) -> Union[str, Rejection]:
    """The line as text without its line break, or the Rejection of a line that is not UTF-8."""
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as error:
        return Rejection(path, line, f"not UTF-8: {error}", raw.decode("utf-8", "replace"))


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


def open_maybe_gzip(path: str):
    """Binary file handle; ``*.gz`` files are decompressed."""
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def require_exists(path: str) -> None:
    if not os.path.exists(path):
        raise InputError(f"input not found: {path} (check --input)")


def file_or_files_in(path: str, extensions: Tuple[str, ...]) -> List[str]:
    """``[path]`` for a file; for a directory, its files ending in one of ``extensions``, sorted."""
    require_exists(path)
    if not os.path.isdir(path):
        return [path]
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(extensions))
