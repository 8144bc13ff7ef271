"""Plain text, one sentence per line (unlabelled text: language models, auto-encoders).

A file (``*.gz`` read compressed) or a directory of ``*.txt``/``*.gz`` files. Each
non-blank line is one text example whose source and only target are the sentence
itself; a family that learns from unlabelled text reads either side.
"""

from __future__ import annotations

import os
from typing import Iterator, List

from tablegen_tf.readers.base import FormatReader, Parsed, RawText, Rejection, open_maybe_gzip, require_exists

_EXTENSIONS = (".txt", ".gz")


class SentencesReader(FormatReader):
    name = "sentences"
    example_form = "text"

    def input_units(self, path: str, split: str) -> List[str]:
        require_exists(path)
        if not os.path.isdir(path):
            return [path]
        return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(_EXTENSIONS))

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        stem = os.path.basename(unit).split(".")[0]
        with open_maybe_gzip(unit) as handle:
            for line, raw in enumerate(handle, 1):
                if raw.strip():
                    yield _sentence(raw, line, unit, f"sentences:{split}:{stem}:{line}")


def _sentence(raw: bytes, line: int, path: str, example_id: str) -> Parsed:
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as error:
        return Rejection(path, line, f"not UTF-8: {error}", raw.decode("utf-8", "replace"))
    if "\t" in text:
        return Rejection(path, line, "a tab in a sentence (tab-separated pairs are --format text-pairs)", text)
    return RawText(example_id=example_id, source=f"{path}:{line}", source_text=text, texts=[text])
