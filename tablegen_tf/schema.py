"""The one record schema of tablegen, shared by every corpus.

A table is a sequence of records; a record is one value token of one field
(Lebret et al. 2016): ``field``, ``value``, ``pos_start`` (p+, 1-based
position of the token from the start of its field value), ``pos_end`` (p-,
from the end), ``entity`` (player/team/subject the record is about, "" if
none) and ``group`` (home/away side, "" if none).

Storage: one ``tf.train.Example`` per example in gzip TFRecord shards, the
record characteristics as *parallel variable-length features*.  We chose flat
``tf.train.Example`` over ``SequenceExample`` because TFX's StatisticsGen /
SchemaGen / ExampleValidator (TFDV) compute value-count, vocabulary and
presence statistics per flat feature, while SequenceExample feature lists get
much poorer statistics and validation.  The copy alignment (a list of record
indices per target token) is ragged; it is stored as flat values plus row
lengths, which ``tf.io.RaggedFeature`` reassembles.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence

import tensorflow as tf

# Feature keys (the contract between beam_jobs, the reader and TFX).
EXAMPLE_ID = "example_id"
SOURCE = "source"
RECORD_FIELD = "record_field"
RECORD_VALUE = "record_value"
RECORD_POS_START = "record_pos_start"
RECORD_POS_END = "record_pos_end"
RECORD_ENTITY = "record_entity"
RECORD_GROUP = "record_group"
TARGET_TOKENS = "target_tokens"
COPY_INDICES = "copy_indices"
COPY_ROW_LENGTHS = "copy_row_lengths"
CONTENT_PLAN = "content_plan"
REFERENCES = "references"
REFERENCE_TOKENS = "reference_tokens"

RECORD_STRING_KEYS = (RECORD_FIELD, RECORD_VALUE, RECORD_ENTITY, RECORD_GROUP)
RECORD_INT_KEYS = (RECORD_POS_START, RECORD_POS_END)


@dataclasses.dataclass
class Record:
    field: str
    value: str
    pos_start: int = 1
    pos_end: int = 1
    entity: str = ""
    group: str = ""


@dataclasses.dataclass
class TableExample:
    """One example: a table, its target tokens and metadata."""

    example_id: str
    source: str  # "path:line" of the input row(s)
    records: List[Record]
    target_tokens: List[str] = dataclasses.field(default_factory=list)
    # copy_alignment[t] = indices of the records whose value equals target token t
    copy_alignment: List[List[int]] = dataclasses.field(default_factory=list)
    content_plan: List[int] = dataclasses.field(default_factory=list)
    references: List[str] = dataclasses.field(default_factory=list)  # raw texts
    reference_tokens: List[str] = dataclasses.field(default_factory=list)  # space-joined

    def to_tf_example(self) -> tf.train.Example:
        def _bytes(values: Sequence[str]) -> tf.train.Feature:
            return tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[v.encode("utf-8") for v in values])
            )

        def _ints(values: Sequence[int]) -> tf.train.Feature:
            return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

        records = self.records
        feature = {
            EXAMPLE_ID: _bytes([self.example_id]),
            SOURCE: _bytes([self.source]),
            RECORD_FIELD: _bytes([r.field for r in records]),
            RECORD_VALUE: _bytes([r.value for r in records]),
            RECORD_POS_START: _ints([r.pos_start for r in records]),
            RECORD_POS_END: _ints([r.pos_end for r in records]),
            RECORD_ENTITY: _bytes([r.entity for r in records]),
            RECORD_GROUP: _bytes([r.group for r in records]),
            TARGET_TOKENS: _bytes(self.target_tokens),
            COPY_INDICES: _ints([i for row in self.copy_alignment for i in row]),
            COPY_ROW_LENGTHS: _ints([len(row) for row in self.copy_alignment]),
            CONTENT_PLAN: _ints(self.content_plan),
            REFERENCES: _bytes(self.references),
            REFERENCE_TOKENS: _bytes(self.reference_tokens),
        }
        return tf.train.Example(features=tf.train.Features(feature=feature))

    def serialize(self) -> bytes:
        return self.to_tf_example().SerializeToString()

    @classmethod
    def from_tf_example(cls, example: tf.train.Example) -> "TableExample":
        feature = example.features.feature

        def _strings(key: str) -> List[str]:
            return [v.decode("utf-8") for v in feature[key].bytes_list.value]

        def _ints(key: str) -> List[int]:
            return list(feature[key].int64_list.value)

        fields = _strings(RECORD_FIELD)
        values = _strings(RECORD_VALUE)
        starts, ends = _ints(RECORD_POS_START), _ints(RECORD_POS_END)
        entities, groups = _strings(RECORD_ENTITY), _strings(RECORD_GROUP)
        records = [
            Record(f, v, s, e, n, g)
            for f, v, s, e, n, g in zip(fields, values, starts, ends, entities, groups)
        ]
        flat, lengths = _ints(COPY_INDICES), _ints(COPY_ROW_LENGTHS)
        alignment, offset = [], 0
        for length in lengths:
            alignment.append(flat[offset : offset + length])
            offset += length
        return cls(
            example_id=_strings(EXAMPLE_ID)[0],
            source=_strings(SOURCE)[0],
            records=records,
            target_tokens=_strings(TARGET_TOKENS),
            copy_alignment=alignment,
            content_plan=_ints(CONTENT_PLAN),
            references=_strings(REFERENCES),
            reference_tokens=_strings(REFERENCE_TOKENS),
        )

    @classmethod
    def parse(cls, serialized: bytes) -> "TableExample":
        return cls.from_tf_example(tf.train.Example.FromString(serialized))


def copy_alignment(records: Sequence[Record], target_tokens: Sequence[str]) -> List[List[int]]:
    """For each target token, the indices of the records whose value equals it."""
    positions: Dict[str, List[int]] = {}
    for index, record in enumerate(records):
        positions.setdefault(record.value, []).append(index)
    return [positions.get(token, []) for token in target_tokens]


def field_records(
    field: str, value_tokens: Sequence[str], entity: str = "", group: str = ""
) -> List[Record]:
    """Records of one field value: one per token with Lebret's p+ and p-."""
    n = len(value_tokens)
    return [
        Record(field, token, i + 1, n - i, entity, group)
        for i, token in enumerate(value_tokens)
    ]


def feature_spec() -> Dict[str, object]:
    """``tf.io`` parsing spec of a serialized example (used by the reader)."""
    spec: Dict[str, object] = {
        EXAMPLE_ID: tf.io.FixedLenFeature([], tf.string),
        SOURCE: tf.io.FixedLenFeature([], tf.string, default_value=""),
        TARGET_TOKENS: tf.io.RaggedFeature(tf.string),
        CONTENT_PLAN: tf.io.RaggedFeature(tf.int64),
        REFERENCES: tf.io.RaggedFeature(tf.string),
        REFERENCE_TOKENS: tf.io.RaggedFeature(tf.string),
        COPY_INDICES: tf.io.RaggedFeature(
            tf.int64,
            value_key=COPY_INDICES,
            partitions=[tf.io.RaggedFeature.RowLengths(COPY_ROW_LENGTHS)],
        ),
    }
    for key in RECORD_STRING_KEYS:
        spec[key] = tf.io.RaggedFeature(tf.string)
    for key in RECORD_INT_KEYS:
        spec[key] = tf.io.RaggedFeature(tf.int64)
    return spec


def validate(example: TableExample) -> Optional[str]:
    """Returns why an example is unusable, or None."""
    if not example.records:
        return "empty table: no records"
    if not example.target_tokens and not example.references:
        return "missing text: no target tokens"
    if len(example.copy_alignment) != len(example.target_tokens):
        return "copy alignment length differs from target length"
    return None
