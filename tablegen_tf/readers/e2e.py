"""E2E NLG challenge (Novikova et al. 2017): tokenized/aligned files and the official CSV.

Both readers name fields with :func:`normalise_field`, so one model or
vocabulary serves either form ("customer rating" == "customerrating").
The group key is the canonical MR (:func:`mr_key`): on valid/test the shared
job merges rows with equal keys into one multi-reference example.
"""

from __future__ import annotations

import csv
import itertools
import os
import re
from typing import Iterable, Iterator, List, Optional, Tuple

from tablegen_tf.readers.base import (
    FormatReader,
    InputError,
    Parsed,
    RawItem,
    RawTable,
    Rejection,
    require_exists,
)

_NOT_FIELD_CHAR = re.compile(r"[^a-z0-9_]+")
# One MR item "name[value]" and its separator; values may hold commas.
_MR_ITEM = re.compile(r"\s*([^\[\],]*?)\s*\[([^\]]*)\]\s*(?:,|\Z)")
_EOS = "<eos>|||"
_SPLIT_NAMES = {"valid": ("valid", "dev", "validation"), "train": ("train",), "test": ("test",)}
_CSV_NAMES = {
    "train": ("trainset.csv",),
    "valid": ("devset.csv",),
    "test": ("testset_w_refs.csv", "testset.csv"),
}


def normalise_field(name: str) -> str:
    """Lower-case, keep [a-z0-9_]: "customer rating", "customerRating" -> "customerrating"."""
    return _NOT_FIELD_CHAR.sub("", name.lower())


def mr_key(items: Iterable[RawItem]) -> str:
    """Order-independent MR string: the rows of one MR share it."""
    return ", ".join(f"{field}[{value}]" for field, value in sorted((i.field, i.value) for i in items))


def _item(field: str, value: str) -> Tuple[Optional[RawItem], str]:
    name, value = normalise_field(field), " ".join(value.split())
    if not name:
        return None, f"field name {field!r} has no letter, digit or '_'"
    if not value:
        return None, f"empty value for field {field!r}"
    return RawItem(name, value), ""


# ---------------------------------------------------------------- aligned


def parse_aligned_mr(line: str) -> Tuple[List[RawItem], str]:
    """``__start_F__ tokens __end_F__ ...`` -> (items, "") or ([], reason)."""
    items: List[RawItem] = []
    field: Optional[str] = None
    tokens: List[str] = []
    for token in line.split():
        if token.startswith("__start_") and token.endswith("__") and len(token) > 10:
            if field is not None:
                return [], f"{token} inside field {field!r} (missing __end_{field}__)"
            field, tokens = token[8:-2], []
        elif token.startswith("__end_") and token.endswith("__") and len(token) > 8:
            if token[6:-2] != field:
                return [], f"unexpected {token}" + (f" inside field {field!r}" if field else "")
            item, error = _item(field, " ".join(tokens))
            if error:
                return [], error
            items.append(item)
            field = None
        elif field is None:
            return [], f"token {token!r} outside __start_FIELD__ ... __end_FIELD__"
        else:
            tokens.append(token)
    if field is not None:
        return [], f"field {field!r} not closed (missing __end_{field}__)"
    return items, ""


def _decoded(raw: bytes) -> Optional[str]:
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return None


class E2EAlignedReader(FormatReader):
    """``src_{split}.txt`` (MR) + ``{split}.txt`` (``text <eos>|||alignments``).

    The alignments are ignored: the shared job computes the copy alignment
    from value equality, the same way for every corpus.
    """

    name = "e2e-aligned"

    def input_units(self, path: str, split: str) -> List[str]:
        require_exists(path)
        if os.path.isdir(path):
            names = [f"src_{name}.txt" for name in _SPLIT_NAMES.get(split, (split,))]
            found = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
            if not found:
                raise InputError(f"E2E aligned directory {path} has no {' / '.join(names)}")
            path = found[0]
        folder, base = os.path.split(path)
        src = path if base.startswith("src_") else os.path.join(folder, "src_" + base)
        for needed in (src, _target_path(src)):
            if not os.path.isfile(needed):
                raise InputError(f"E2E aligned input {path}: missing {needed}")
        return [src]

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        target = _target_path(unit)
        with open(unit, "rb") as src_f, open(target, "rb") as tgt_f:
            for index, (src, tgt) in enumerate(itertools.zip_longest(src_f, tgt_f)):
                yield self._row(index, src, tgt, unit, target, split)

    @staticmethod
    def _row(index: int, src_raw, tgt_raw, src_path: str, tgt_path: str, split: str) -> Parsed:
        line = index + 1
        decoded = []
        for raw, path, other in ((src_raw, src_path, tgt_path), (tgt_raw, tgt_path, src_path)):
            if raw is None:  # the other file is longer
                shown = (src_raw or tgt_raw).decode("utf-8", "replace").rstrip("\r\n")
                return Rejection(other, line, f"no line {line} in {path}", shown)
            decoded.append(_decoded(raw))
            if decoded[-1] is None:
                return Rejection(path, line, "invalid UTF-8", raw.decode("utf-8", "replace"))
        src, tgt = decoded
        items, error = parse_aligned_mr(src)
        if error or not items:
            return Rejection(src_path, line, error or "empty table", src)
        text, eos, _alignments = tgt.partition(_EOS)
        if not eos:
            return Rejection(tgt_path, line, f"missing {_EOS!r} after the text", tgt)
        if not text.strip():
            return Rejection(tgt_path, line, "missing text", tgt)
        return RawTable(
            example_id=f"e2e-aligned:{split}:{index}",
            source=f"{src_path}:{line}",
            items=items,
            texts=[text.strip()],
            group_key=mr_key(items),
            pretokenized=True,
        )


def _target_path(src: str) -> str:
    folder, base = os.path.split(src)
    return os.path.join(folder, base[len("src_"):])


# ---------------------------------------------------------------- CSV


def parse_mr(mr: str) -> Tuple[List[RawItem], str]:
    """``name[The Eagle], customer rating[low]`` -> (items, "") or ([], reason)."""
    items: List[RawItem] = []
    position = 0
    while position < len(mr):
        match = _MR_ITEM.match(mr, position)
        if not match:
            return [], f"unparsable MR at character {position + 1}: {mr[position:position + 40]!r}"
        item, error = _item(match.group(1), match.group(2))
        if error:
            return [], error
        items.append(item)
        position = match.end()
    return items, ""


class E2ECsvReader(FormatReader):
    """Official CSV with header ``mr,ref``; raw (untokenized) references. On the test split a
    CSV with an ``mr`` column only (the challenge's test set as released, ``testset.csv``)
    gives tables without references: enough for `tablegen generate`; `evaluate` says it needs
    references."""

    name = "e2e"

    def input_units(self, path: str, split: str) -> List[str]:
        require_exists(path)
        if os.path.isdir(path):
            names = _CSV_NAMES.get(split, (f"{split}.csv",))
            found = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
            if not found:
                raise InputError(f"E2E directory {path} has no {' / '.join(names)}")
            path = found[0]
        with _open_csv(path) as f:
            _columns(next(csv.reader(f), []), path, split)
        return [path]

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        with _open_csv(unit) as f:
            reader = csv.reader(f)
            mr_col, ref_col, width = _columns(next(reader, []), unit, split)
            previous, index = reader.line_num, 0
            while True:
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except csv.Error as error:
                    row = error
                line, previous = previous + 1, reader.line_num  # first line of a multi-line row
                if row == []:
                    continue  # blank line: not a row
                yield self._row(index, line, row, mr_col, ref_col, width, unit, split)
                index += 1

    @staticmethod
    def _row(index, line, row, mr_col, ref_col, width, path, split) -> Parsed:
        if isinstance(row, csv.Error):
            return Rejection(path, line, f"CSV error: {row}")
        joined = ",".join(row)
        content = joined.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        if len(row) != width:
            return Rejection(path, line, f"expected {width} columns, got {len(row)}", content)
        if content != joined:  # undecodable bytes, kept as surrogates by _open_csv
            return Rejection(path, line, "invalid UTF-8", content)
        items, error = parse_mr(row[mr_col])
        if error or not items:
            return Rejection(path, line, error or "empty MR", content)
        ref = row[ref_col].strip() if ref_col is not None else None
        if ref == "":  # a `ref` column left empty is a broken row; no column means no references
            return Rejection(path, line, "empty ref", content)
        return RawTable(
            example_id=f"e2e:{split}:{index}",
            source=f"{path}:{line}",
            items=items,
            texts=[ref] if ref else [],
            group_key=mr_key(items),
        )


def _open_csv(path: str):
    # utf-8-sig: tolerate a BOM before the header; surrogateescape: reject
    # undecodable rows one by one instead of failing the whole file.
    return open(path, newline="", encoding="utf-8-sig", errors="surrogateescape")


def _columns(header: List[str], path: str, split: str) -> Tuple[int, Optional[int], int]:
    """(mr column, ref column or None, columns). Only a test split may lack references (the
    challenge's test set as released); for train and valid a missing `ref` is schema drift."""
    names = [h.strip().lower() for h in header]
    if "mr" not in names or ("ref" not in names and split != "test"):
        raise InputError(f"{path}: CSV header must name columns 'mr' and 'ref', got {header} "
                         "(a CSV of MRs only, like the challenge's testset.csv, is read as a test split)")
    return names.index("mr"), names.index("ref") if "ref" in names else None, len(names)
