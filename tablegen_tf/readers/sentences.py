"""Plain text, one sentence per line (unlabelled text: language models, auto-encoders).

A file (``*.gz`` read compressed) or a directory of ``*.txt``/``*.gz`` files. Each
non-blank line is one text example whose source and only target are the sentence
itself; a family that learns from unlabelled text reads either side.

``sentences-hashed``: the same, for a corpus that comes without splits. A sentence
belongs to one split by a hash of its text (whitespace-collapsed, case-folded), so the
split is fixed, independent of file order, and duplicates never cross splits:
sha1(text) mod 20 == 0 -> test, == 1 -> valid, else train (90 / 5 / 5 %). Run
``tablegen prepare`` once per split with ``--split``; the other splits' sentences are
skipped (not dead letters).
"""

from __future__ import annotations

import hashlib
import os
from typing import Iterator, List

from tablegen_tf.readers.base import LineFormatReader, Parsed, RawText, Rejection, decode_line


class SentencesReader(LineFormatReader):
    name = "sentences"
    example_form = "text"
    extensions = (".txt", ".gz")
    id_prefix = "sentences"  # also for sentences-hashed: its ids name the same sentences

    def parse_line(self, raw: bytes, line: int, path: str, example_id: str) -> Parsed:
        text = decode_line(raw, line, path)
        if isinstance(text, Rejection):
            return text
        text = text.strip()
        if "\t" in text:
            return Rejection(path, line, "a tab in a sentence (tab-separated pairs are --format text-pairs)", text)
        return RawText(example_id=example_id, source=f"{path}:{line}", source_text=text, texts=[text])


HASH_BUCKETS = 20
HASH_SPLITS = {0: "test", 1: "valid"}  # every other bucket is train


def hashed_split(text: str) -> str:
    """The split of a sentence under ``sentences-hashed``."""
    key = " ".join(text.split()).casefold().encode("utf-8")
    bucket = int.from_bytes(hashlib.sha1(key).digest()[:8], "big") % HASH_BUCKETS
    return HASH_SPLITS.get(bucket, "train")


class HashedSentencesReader(SentencesReader):
    name = "sentences-hashed"

    def input_units(self, path: str, split: str) -> List[str]:
        # A corpus directory's README.txt is documentation, not sentences.
        return [u for u in super().input_units(path, split) if not os.path.basename(u).upper().startswith("README")]

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        for parsed in super().read(unit, split):
            if isinstance(parsed, Rejection) or hashed_split(parsed.source_text) == split:
                yield parsed
