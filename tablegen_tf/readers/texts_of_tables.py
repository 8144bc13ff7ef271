"""The texts of a table corpus, as sentences: ``--format F-texts`` for any table format F.

Language models (backbone-lm, seq-lm) and auto-encoders learn from text alone; this lets
them train on the references of E2E, WebNLG, WikiBio, ... without an export step. Each
reference of each table becomes one text example (source = target = the reference), so a
WebNLG entry with three lexicalisations gives three sentences and nothing is merged on
valid/test. Rejections of the underlying reader pass through unchanged (dead letters).
"""

from __future__ import annotations

from typing import Iterator, List

from tablegen_tf.readers.base import FormatReader, Parsed, RawTable, RawText

SUFFIX = "-texts"


class TextsOfTables(FormatReader):
    example_form = "text"

    def __init__(self, tables: FormatReader):
        if tables.example_form != "table":
            raise ValueError(f"{tables.name!r} is not a table format")
        self.tables = tables
        self.name = tables.name + SUFFIX

    def input_units(self, path: str, split: str) -> List[str]:
        return self.tables.input_units(path, split)

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        for parsed in self.tables.read(unit, split):
            if not isinstance(parsed, RawTable):
                yield parsed
                continue
            for index, text in enumerate(parsed.texts):
                # The table's input rows are counted once, on its first text (read/written balance).
                yield RawText(example_id=f"{parsed.example_id}:{index}", source=parsed.source, source_text=text,
                              texts=[text], rows=parsed.rows if index == 0 else 0)
