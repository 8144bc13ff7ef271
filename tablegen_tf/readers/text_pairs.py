"""The generic text-to-text format: one tab-separated pair per line.

``source<TAB>target`` (more tab-separated targets are further references of the same
source); ``*.gz`` files are read compressed. A line without a target is a source to
generate from (kept by `tablegen generate`, rejected by training with "missing text").
On valid/test splits, lines sharing one source merge into one multi-reference example.
"""

from __future__ import annotations

from tablegen_tf.readers.base import LineFormatReader, Parsed, RawText, Rejection, decode_line


class TextPairsReader(LineFormatReader):
    name = "text-pairs"
    example_form = "text"
    extensions = (".tsv", ".tsv.gz", ".txt", ".txt.gz")

    def parse_line(self, raw: bytes, line: int, path: str, example_id: str) -> Parsed:
        text = decode_line(raw, line, path)
        if isinstance(text, Rejection):
            return text
        source, *targets = [column.strip() for column in text.split("\t")]
        if not source:
            return Rejection(path, line, "empty source (first tab-separated column)", text)
        if any(not t for t in targets):
            return Rejection(path, line, "an empty target column", text)
        return RawText(example_id=example_id, source=f"{path}:{line}", source_text=source, texts=targets,
                       group_key=source)
