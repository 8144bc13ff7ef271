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
import json
from typing import Dict, List, Optional, Sequence

import tensorflow as tf

# Feature keys (the contract between the readers, beam_jobs, the input pipeline and TFX).
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
# The text-to-text form (TextExample): a source sentence instead of a table.
SOURCE_TEXT = "source_text"
SOURCE_TOKENS = "source_tokens"
LABELS = "labels"
# Optional dependency parse of the source tokens (`tablegen syntax`, tablegen_tf/syntax.py): per
# token its label id (syntax.DEP_LABELS) and its head's index (itself for the root); training
# targets of the compression family's syntactic scaffold, never model inputs.
DEP_LABELS = "dep_labels"
DEP_HEADS = "dep_heads"

EXAMPLE_FORMS = ("table", "text")

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
    """One example: a table (stored column-wise for speed), its target and metadata."""

    form = "table"

    example_id: str
    source: str  # "path:line" of the input row(s)
    fields: List[str] = dataclasses.field(default_factory=list)
    values: List[str] = dataclasses.field(default_factory=list)
    pos_start: List[int] = dataclasses.field(default_factory=list)
    pos_end: List[int] = dataclasses.field(default_factory=list)
    entities: List[str] = dataclasses.field(default_factory=list)
    groups: List[str] = dataclasses.field(default_factory=list)
    target_tokens: List[str] = dataclasses.field(default_factory=list)
    # copy_alignment[t] = indices of the records whose value equals target token t
    copy_alignment: List[List[int]] = dataclasses.field(default_factory=list)
    content_plan: List[int] = dataclasses.field(default_factory=list)
    references: List[str] = dataclasses.field(default_factory=list)  # raw texts
    reference_tokens: List[str] = dataclasses.field(default_factory=list)  # space-joined

    def add_field(self, field: str, value_tokens: Sequence[str], entity: str = "", group: str = "") -> None:
        """Appends one record per value token with Lebret's p+ and p-."""
        n = len(value_tokens)
        self.fields.extend([field] * n)
        self.values.extend(value_tokens)
        self.pos_start.extend(range(1, n + 1))
        self.pos_end.extend(range(n, 0, -1))
        self.entities.extend([entity] * n)
        self.groups.extend([group] * n)

    @property
    def records(self) -> List[Record]:
        return [
            Record(*columns)
            for columns in zip(self.fields, self.values, self.pos_start, self.pos_end, self.entities, self.groups)
        ]

    @classmethod
    def from_records(cls, example_id: str, source: str, records: Sequence[Record], **kwargs) -> "TableExample":
        example = cls(example_id, source, **kwargs)
        for r in records:
            example.fields.append(r.field)
            example.values.append(r.value)
            example.pos_start.append(r.pos_start)
            example.pos_end.append(r.pos_end)
            example.entities.append(r.entity)
            example.groups.append(r.group)
        return example

    def to_tf_example(self) -> tf.train.Example:
        example = tf.train.Example()
        feature = example.features.feature
        strings = {
            EXAMPLE_ID: [self.example_id],
            SOURCE: [self.source],
            RECORD_FIELD: self.fields,
            RECORD_VALUE: self.values,
            RECORD_ENTITY: self.entities,
            RECORD_GROUP: self.groups,
            TARGET_TOKENS: self.target_tokens,
            REFERENCES: self.references,
            REFERENCE_TOKENS: self.reference_tokens,
        }
        ints = {
            RECORD_POS_START: self.pos_start,
            RECORD_POS_END: self.pos_end,
            COPY_INDICES: [i for row in self.copy_alignment for i in row],
            COPY_ROW_LENGTHS: [len(row) for row in self.copy_alignment],
            CONTENT_PLAN: self.content_plan,
        }
        for key, values in strings.items():
            feature[key].bytes_list.value.extend([v.encode("utf-8") for v in values])
        for key, values in ints.items():
            feature[key].int64_list.value.extend(values)
        return example

    def serialize(self) -> bytes:
        return self.to_tf_example().SerializeToString(deterministic=True)  # same bytes in every process

    @classmethod
    def from_tf_example(cls, example: tf.train.Example) -> "TableExample":
        feature = example.features.feature

        def _strings(key: str) -> List[str]:
            return [v.decode("utf-8") for v in feature[key].bytes_list.value]

        def _ints(key: str) -> List[int]:
            return list(feature[key].int64_list.value)

        flat, lengths = _ints(COPY_INDICES), _ints(COPY_ROW_LENGTHS)
        alignment, offset = [], 0
        for length in lengths:
            alignment.append(flat[offset : offset + length])
            offset += length
        return cls(
            example_id=_strings(EXAMPLE_ID)[0],
            source=_strings(SOURCE)[0],
            fields=_strings(RECORD_FIELD),
            values=_strings(RECORD_VALUE),
            pos_start=_ints(RECORD_POS_START),
            pos_end=_ints(RECORD_POS_END),
            entities=_strings(RECORD_ENTITY),
            groups=_strings(RECORD_GROUP),
            target_tokens=_strings(TARGET_TOKENS),
            copy_alignment=alignment,
            content_plan=_ints(CONTENT_PLAN),
            references=_strings(REFERENCES),
            reference_tokens=_strings(REFERENCE_TOKENS),
        )

    @classmethod
    def parse(cls, serialized: bytes) -> "TableExample":
        return cls.from_tf_example(tf.train.Example.FromString(serialized))

    def serving_input(self) -> str:
        """The JSONL table form the SavedModel's ``tables`` input takes (one item per
        field value: a record with p+ = 1 starts a value, its tokens re-joined)."""
        items = []
        for field, value, pos_start, entity, group in zip(
            self.fields, self.values, self.pos_start, self.entities, self.groups
        ):
            if pos_start == 1 or not items:
                items.append({"field": field, "value": value, "entity": entity, "group": group})
            else:
                items[-1]["value"] += " " + value
        return json.dumps({"table": items}, ensure_ascii=False)

    def all_references(self) -> List[str]:
        return self.references or [" ".join(self.target_tokens)]


@dataclasses.dataclass
class TextExample:
    """The text-to-text form: a source sentence, its target(s) and optional per-source-token
    labels (e.g. deletion labels of sentence compression: 1 = token kept)."""

    form = "text"

    example_id: str
    source: str  # "path:line"
    source_text: str = ""  # raw source, the serving input
    source_tokens: List[str] = dataclasses.field(default_factory=list)
    target_tokens: List[str] = dataclasses.field(default_factory=list)
    labels: List[int] = dataclasses.field(default_factory=list)
    references: List[str] = dataclasses.field(default_factory=list)
    reference_tokens: List[str] = dataclasses.field(default_factory=list)
    dep_labels: List[int] = dataclasses.field(default_factory=list)
    dep_heads: List[int] = dataclasses.field(default_factory=list)

    def to_tf_example(self) -> tf.train.Example:
        example = tf.train.Example()
        feature = example.features.feature
        strings = {
            EXAMPLE_ID: [self.example_id], SOURCE: [self.source], SOURCE_TEXT: [self.source_text],
            SOURCE_TOKENS: self.source_tokens, TARGET_TOKENS: self.target_tokens,
            REFERENCES: self.references, REFERENCE_TOKENS: self.reference_tokens,
        }
        for key, values in strings.items():
            feature[key].bytes_list.value.extend([v.encode("utf-8") for v in values])
        feature[LABELS].int64_list.value.extend(self.labels)
        if self.dep_labels:  # only when parsed: unparsed examples keep their bytes
            feature[DEP_LABELS].int64_list.value.extend(self.dep_labels)
            feature[DEP_HEADS].int64_list.value.extend(self.dep_heads)
        return example

    def serialize(self) -> bytes:
        return self.to_tf_example().SerializeToString(deterministic=True)  # same bytes in every process

    @classmethod
    def parse(cls, serialized: bytes) -> "TextExample":
        feature = tf.train.Example.FromString(serialized).features.feature

        def strings(key: str) -> List[str]:
            return [v.decode("utf-8") for v in feature[key].bytes_list.value]

        return cls(
            example_id=strings(EXAMPLE_ID)[0], source=strings(SOURCE)[0], source_text=(strings(SOURCE_TEXT) or [""])[0],
            source_tokens=strings(SOURCE_TOKENS), target_tokens=strings(TARGET_TOKENS),
            labels=list(feature[LABELS].int64_list.value), references=strings(REFERENCES),
            reference_tokens=strings(REFERENCE_TOKENS),
            dep_labels=list(feature[DEP_LABELS].int64_list.value), dep_heads=list(feature[DEP_HEADS].int64_list.value),
        )

    def serving_input(self) -> str:
        return self.source_text

    def all_references(self) -> List[str]:
        return self.references or [" ".join(self.target_tokens)]


def text_feature_spec() -> Dict[str, object]:
    """``tf.io`` parsing spec of a serialized TextExample."""
    return {
        EXAMPLE_ID: tf.io.FixedLenFeature([], tf.string),
        SOURCE: tf.io.FixedLenFeature([], tf.string, default_value=""),
        SOURCE_TOKENS: tf.io.RaggedFeature(tf.string),
        TARGET_TOKENS: tf.io.RaggedFeature(tf.string),
        LABELS: tf.io.RaggedFeature(tf.int64),
        DEP_LABELS: tf.io.RaggedFeature(tf.int64),
        DEP_HEADS: tf.io.RaggedFeature(tf.int64),
        REFERENCE_TOKENS: tf.io.RaggedFeature(tf.string),
    }


def copy_alignment(values: Sequence[str], target_tokens: Sequence[str]) -> List[List[int]]:
    """For each target token, the indices of the records whose value equals it."""
    wanted = set(target_tokens)
    positions: Dict[str, List[int]] = {}
    for index, value in enumerate(values):
        if value in wanted:
            positions.setdefault(value, []).append(index)
    return [positions.get(token, []) for token in target_tokens]


def deletion_labels(source_tokens: Sequence[str], target_tokens: Sequence[str]) -> Optional[List[int]]:
    """Per source token 1 (kept) or 0 (deleted) such that the kept tokens, in order, are
    ``target_tokens``; None when the target is not a deletion of the source. Greedy
    leftmost alignment, case-insensitive (a compression capitalises its new first word);
    target tokens left over at the end may only be punctuation (an added final period)."""
    lowered = [token.lower() for token in source_tokens]
    labels, position = [0] * len(source_tokens), 0
    for index, token in enumerate(target_tokens):
        token = token.lower()
        while position < len(lowered) and lowered[position] != token:
            position += 1
        if position == len(lowered):
            rest = target_tokens[index:]
            return labels if all(not any(ch.isalnum() for ch in t) for t in rest) else None
        labels[position] = 1
        position += 1
    return labels


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


def validate(example, needs_text: bool = True) -> Optional[str]:
    """Returns why an example is unusable, or None (``needs_text=False``: generating
    from users' own inputs, which have no reference text)."""
    if isinstance(example, TextExample):
        if not example.source_tokens:
            return "empty source: no tokens"
        if example.labels == [-1]:
            return "the target is not a deletion-based compression (no subsequence of the source tokens)"
        if example.labels and len(example.labels) != len(example.source_tokens):
            return f"{len(example.labels)} labels for {len(example.source_tokens)} source tokens"
        if example.dep_labels and not len(example.dep_labels) == len(example.dep_heads) == len(example.source_tokens):
            return (f"{len(example.dep_labels)} dependency labels and {len(example.dep_heads)} heads for "
                    f"{len(example.source_tokens)} source tokens")
    elif not example.values:
        return "empty table: no records"
    if needs_text and not example.target_tokens:
        return "missing text: no target tokens"
    if isinstance(example, TableExample) and len(example.copy_alignment) != len(example.target_tokens):
        return "copy alignment length differs from target length"
    return None
