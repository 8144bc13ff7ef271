"""Sentence-level augmentation of E2E-style training tables (Juraska et al. 2018, Slug2Slug).

A multi-sentence reference also teaches one sentence per subset of the table: each sentence
becomes an extra training row whose table holds the slots that sentence realises (our slot
aligner, tablegen_tf.metrics.slot_metrics). The original row stays.

Choices where the paper leaves room:

* a sentence that contradicts a slot, or states one the table lacks, is skipped (it would
  teach the noise that slot reranking then has to undo);
* a sentence realising no slot is skipped; so is a text of one sentence (the row itself);
* the name slot is kept only where the sentence names the venue, so a sentence that says
  "It is ..." keeps the pronoun with a table that has no name (at test time every table
  has one, so this teaches nothing the model will misuse);
* added rows stand for no input row (``rows=0``): the read/written balance is unchanged.
"""

from __future__ import annotations

import dataclasses
import re
from typing import List

from tablegen_tf.metrics.slot_metrics import align, attribute_key, is_e2e_table, table_slots
from tablegen_tf.readers.base import RawTable
from tablegen_tf.readers.e2e import mr_key

# a sentence ends where a word ending in '.', '!' or '?' is followed by space: the same on
# tokenized ("a pub . It") and raw ("a pub. It") text, and "£10.50" stays whole
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str) -> List[str]:
    """Text -> its sentences."""
    return [part for part in _SENTENCE_BREAK.split(text.strip()) if part]


def sentence_tables(table: RawTable) -> List[RawTable]:
    """-> one extra table per faithful sentence of a multi-sentence single-text table;
    [] for anything else (multi-reference, non-E2E, one sentence)."""
    if len(table.texts) != 1:
        return []
    slots = table_slots([item.field for item in table.items], [item.value for item in table.items])
    parts = sentences(table.texts[0])
    if len(parts) < 2 or not is_e2e_table(slots):
        return []
    out = []
    for index, sentence in enumerate(parts):
        alignment = align(slots, sentence)
        if alignment.wrong or alignment.added or not alignment.realised:
            continue
        realised = set(alignment.realised)
        items = [item for item in table.items if attribute_key(item.field) in realised]
        out.append(dataclasses.replace(
            table, example_id=f"{table.example_id}:s{index}", items=items, texts=[sentence],
            group_key=mr_key(items), rows=0))
    return out
