"""Sentence compression pairs (Filippova & Altun 2013 Google data): ``original<TAB>compressed``.

A TSV with the header ``original<TAB>compressed`` (``*.gz`` read compressed). Each row is
one text example whose target is the compression; the builder derives its per-source-token
deletion labels (1 = kept) by aligning the tokenized compression to the tokenized original
as a subsequence (``schema.deletion_labels``); a row whose compression is not a
subsequence of its original goes to the dead letters.

Train/valid split of one file (deterministic, by position): the LAST ``VALID_ROWS``
(1,025) data rows are ``valid`` and the rows before them ``train`` (the Google file ->
7,975 train rows, 1,025 valid rows, ~1,000 valid examples after dead letters); files of at most 2,000 rows keep their last 10% for valid.
``--split test`` (a held-out test file) reads every row.
"""

from __future__ import annotations

import os
from typing import Iterator, List

from tablegen_tf.readers.base import (
    FormatReader, Parsed, RawText, Rejection, decode_line, file_or_files_in, open_maybe_gzip,
)

HEADER = ("original", "compressed")
VALID_ROWS = 1025  # ~2% of pairs are not deletions (dead letters): >= 1,000 valid examples remain
_EXTENSIONS = (".tsv", ".tsv.gz")


def valid_rows(total: int) -> int:
    """How many trailing data rows of a file of ``total`` rows form the valid split."""
    return VALID_ROWS if total > 2 * VALID_ROWS else total // 10


def split_of_row(index: int, total: int) -> str:
    """``train`` or ``valid`` for data row ``index`` (0-based) of ``total``."""
    return "valid" if index >= total - valid_rows(total) else "train"


class CompressionReader(FormatReader):
    name = "compression"
    example_form = "text"

    def input_units(self, path: str, split: str) -> List[str]:
        return file_or_files_in(path, _EXTENSIONS)

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        stem = os.path.basename(unit).split(".")[0]
        with open_maybe_gzip(unit) as handle:
            lines = handle.read().split(b"\n")
        if lines and not lines[-1].strip():
            lines.pop()
        header = lines[0].decode("utf-8", "replace").rstrip("\r").split("\t") if lines else []
        if tuple(h.strip().lower() for h in header) != HEADER:
            yield Rejection(unit, 1, f"header must be 'original<TAB>compressed', got {header!r}", "\t".join(header))
            return
        total = len(lines) - 1
        for index, raw in enumerate(lines[1:]):
            if split != "test" and split_of_row(index, total) != split:
                continue
            line = index + 2
            if raw.strip():
                yield _row(raw, line, unit, f"compression:{split}:{stem}:{line}")


def _row(raw: bytes, line: int, path: str, example_id: str) -> Parsed:
    text = decode_line(raw, line, path)
    if isinstance(text, Rejection):
        return text
    columns = [c.strip() for c in text.split("\t")]
    if len(columns) != 2:
        return Rejection(path, line, f"expected 2 tab-separated columns (original, compressed), got {len(columns)}",
                         text)
    original, compressed = columns
    if not original:
        return Rejection(path, line, "empty original (column 1)", text)
    if not compressed:
        return Rejection(path, line, "empty compressed (column 2)", text)
    return RawText(example_id=example_id, source=f"{path}:{line}", source_text=original, texts=[compressed],
                   deletion_labels=True)
