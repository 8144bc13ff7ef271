"""The generic text-to-text format: one tab-separated pair per line.

``source<TAB>target`` (more tab-separated targets are further references of the same
source); ``*.gz`` files are read compressed. A line without a target is a source to
generate from (kept by `tablegen generate`, rejected by training with "missing text").
On valid/test splits, lines sharing one source merge into one multi-reference example.
"""

from __future__ import annotations

import os
from typing import Iterator, List

from tablegen_tf.readers.base import FormatReader, Parsed, RawText, Rejection, file_or_files_in, open_maybe_gzip

_EXTENSIONS = (".tsv", ".tsv.gz", ".txt", ".txt.gz")


class TextPairsReader(FormatReader):
    name = "text-pairs"
    example_form = "text"

    def input_units(self, path: str, split: str) -> List[str]:
        return file_or_files_in(path, _EXTENSIONS)

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        stem = os.path.basename(unit).split(".")[0]
        with open_maybe_gzip(unit) as handle:
            for line, raw in enumerate(handle, 1):
                if raw.strip():
                    yield _row(raw, line, unit, f"text-pairs:{split}:{stem}:{line}")


def _row(raw: bytes, line: int, path: str, example_id: str) -> Parsed:
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as error:
        return Rejection(path, line, f"not UTF-8: {error}", raw.decode("utf-8", "replace"))
    source, *targets = [column.strip() for column in text.split("\t")]
    if not source:
        return Rejection(path, line, "empty source (first tab-separated column)", text)
    if any(not t for t in targets):
        return Rejection(path, line, "an empty target column", text)
    return RawText(example_id=example_id, source=f"{path}:{line}", source_text=source, texts=targets,
                   group_key=source)
