"""E2E slot errors in the graph: ``slot_metrics.align(...).errors`` as TF string ops.

The beam reranker (tablegen_tf.reranking) scores every candidate inside the SavedModel, so
served text equals evaluated text; it needs the aligner without Python.  The paraphrase
patterns are ``slot_metrics.CLASS_PATTERNS`` (one list; they are written to mean the same
under Python ``re`` and RE2, and a parity test checks it on the E2E references).  Names are
per-table patterns, so their check and blanking run row by row (``tf.map_fn``); the
closed-class patterns are constants and run on the whole batch at once.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import tensorflow as tf

from tablegen_tf.metrics.slot_metrics import (CLASS_PATTERNS, NAME_ATTRIBUTES, NOT_EVIDENCE_OF_ADDITION,
                                              VALUE_CLASSES, value_key)

KNOWN_ATTRIBUTES = tuple(NAME_ATTRIBUTES) + tuple(CLASS_PATTERNS)
_RE2_SPECIAL = r"([\\.+*?()|\[\]{}^$])"


def normalise(text: tf.Tensor) -> tf.Tensor:
    """slot_metrics.normalise: casefold, ’ -> ', hyphens as spaces, single spaces."""
    text = tf.strings.lower(text, encoding="utf-8")
    text = tf.strings.regex_replace(text, "’", "'")
    text = tf.strings.regex_replace(text, "-", " ")
    text = tf.strings.regex_replace(text, r"\s+", " ")
    return tf.strings.strip(text)


def attribute_key(fields: tf.Tensor) -> tf.Tensor:
    return tf.strings.regex_replace(tf.strings.lower(fields, encoding="utf-8"), "[^0-9a-z]", "")


def table_slots(fields: tf.Tensor, values: tf.Tensor, mask: tf.Tensor) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor], tf.Tensor]:
    """Records [N, R] -> ({attribute: present [N]}, {attribute: normalised value [N]},
    is_e2e [N]); the value tokens of one attribute join in record order."""
    keys = attribute_key(fields)
    present, value = {}, {}
    for attribute in KNOWN_ATTRIBUTES:
        mine = mask & tf.equal(keys, attribute)
        present[attribute] = tf.reduce_any(mine, axis=1)
        value[attribute] = normalise(tf.strings.reduce_join(tf.where(mine, values, ""), axis=1, separator=" "))
    known = tf.reduce_any(tf.stack([tf.equal(keys, a) for a in KNOWN_ATTRIBUTES], axis=-1), axis=-1)
    is_e2e = tf.reduce_any(mask, axis=1) & tf.reduce_all(known | ~mask, axis=1)
    return present, value, is_e2e


def _names(text, name, near):
    """One row: (text with the names blanked, longest first; name found; near found)."""
    def escaped(s):  # slot_metrics.name_pattern: escaped words, a space between them optional
        return tf.strings.regex_replace(tf.strings.regex_replace(s, _RE2_SPECIAL, r"\\\1"), " ", " ?")

    def contains(s):
        return tf.strings.regex_full_match(text, tf.strings.join(["(?s).*", escaped(s), ".*"]))

    def blank(t, s):
        return tf.cond(tf.equal(s, ""), lambda: t, lambda: tf.strings.regex_replace(t, escaped(s), " "))

    first_is_name = tf.strings.length(name) >= tf.strings.length(near)
    longer, shorter = tf.where(first_is_name, name, near), tf.where(first_is_name, near, name)
    return blank(blank(text, longer), shorter), contains(name), contains(near)


def _classes_said(text: tf.Tensor) -> Dict[str, List[tf.Tensor]]:
    said = {attribute: [tf.strings.regex_full_match(text, "(?s).*(?:" + pattern + ").*")
                        for pattern in classes.values()]
            for attribute, classes in CLASS_PATTERNS.items()}
    ff = list(CLASS_PATTERNS["familyfriendly"])
    no = said["familyfriendly"][ff.index("no")]
    said["familyfriendly"] = [s if cls == "no" else s & ~no for cls, s in zip(ff, said["familyfriendly"])]
    return said


def _value_is_class(attribute: str, cls: str, key: tf.Tensor) -> tf.Tensor:
    """slot_metrics.value_class(attribute, value) == cls, on value keys [N]."""
    keys = ([v for v, c in VALUE_CLASSES[attribute].items() if c == cls] if attribute in VALUE_CLASSES
            else [value_key(cls)])
    return tf.reduce_any(tf.stack([tf.equal(key, k) for k in keys], axis=-1), axis=-1)


def slot_errors(fields: tf.Tensor, values: tf.Tensor, mask: tf.Tensor, texts: tf.Tensor) -> tf.Tensor:
    """Missed + wrong + added slot values of ``texts`` against tables of record tokens
    ``fields``/``values`` [N, R] (``mask`` [N, R]), int32 in the shape of ``texts``: [N],
    or [N, K] for K candidate texts per table (the table side is then computed once, not K
    times); 0 for non-E2E tables."""
    texts = tf.convert_to_tensor(texts, tf.string)
    checks, is_e2e = _slot_checks(fields, values, mask, texts)
    errors = [e for missed_or_wrong, added, _ in checks.values() for e in (missed_or_wrong, added)]
    total = tf.where(is_e2e, tf.add_n([tf.cast(e, tf.int32) for e in errors]), 0)
    return tf.reshape(total, tf.shape(texts))



def missed_slots(fields: tf.Tensor, values: tf.Tensor, mask: tf.Tensor, texts: tf.Tensor) -> tf.Tensor:
    """The *missed* slots of ``slot_errors`` alone (no value of the attribute said; wrong and
    added values are not counted), int32 in the shape of ``texts``: what a text that goes on
    can still realise (tablegen_tf.reranking's end gate)."""
    texts = tf.convert_to_tensor(texts, tf.string)
    checks, is_e2e = _slot_checks(fields, values, mask, texts)
    missed = [missed_or_wrong & ~said_other for missed_or_wrong, _, said_other in checks.values()]
    total = tf.where(is_e2e, tf.add_n([tf.cast(m, tf.int32) for m in missed]), 0)
    return tf.reshape(total, tf.shape(texts))


MISSED, WRONG, ADDED = "missed", "wrong", "added"


def slot_error_kinds(fields: tf.Tensor, values: tf.Tensor, mask: tf.Tensor, texts: tf.Tensor) -> tf.Tensor:
    """The errors ``slot_errors`` counts, per attribute: strings [N, len(KNOWN_ATTRIBUTES)],
    "missed" / "wrong" (another value of the attribute said) / "added" / "" (no error, or
    a non-E2E table); ``texts`` [N]."""
    texts = tf.convert_to_tensor(texts, tf.string)
    checks, is_e2e = _slot_checks(fields, values, mask, texts)
    columns = []
    for attribute in KNOWN_ATTRIBUTES:
        missed_or_wrong, added, said_other = checks[attribute]
        kind = tf.where(missed_or_wrong, tf.where(said_other, WRONG, MISSED), tf.where(added, ADDED, ""))
        columns.append(tf.where(is_e2e, kind, ""))
    return tf.stack(columns, axis=1)


def _slot_checks(fields, values, mask, texts):
    """-> ({attribute: (missed or wrong, added, some value of it said) [N*K]}, is_e2e [N*K])."""
    present, value, is_e2e = table_slots(fields, values, mask)
    # value_key on values that are normalised already
    key = {a: tf.strings.regex_replace(value[a], r"[\s\-]", "") for a in CLASS_PATTERNS}
    if texts.shape.rank == 2:
        k = tf.shape(texts)[1]
        present, value, key, is_e2e = tf.nest.map_structure(
            lambda x: tf.repeat(x, k, axis=0), (present, value, key, is_e2e))
    text = normalise(tf.reshape(texts, [-1]))
    text, name_found, near_found = tf.map_fn(
        lambda row: _names(*row), (text, value["name"], value["near"]),
        fn_output_signature=(tf.string, tf.bool, tf.bool))
    never = tf.zeros_like(name_found)
    checks = {"name": (present["name"] & ~name_found, never, never),
              "near": (present["near"] & ~near_found, never, never)}
    said = _classes_said(text)
    for attribute, classes in CLASS_PATTERNS.items():
        realised = tf.reduce_any(tf.stack([_value_is_class(attribute, cls, key[attribute]) & s
                                           for cls, s in zip(classes, said[attribute])], -1), -1)
        first_said, earlier = [], tf.zeros_like(realised)
        for cls, s in zip(classes, said[attribute]):
            if (attribute, cls) not in NOT_EVIDENCE_OF_ADDITION:
                first_said.append(s & ~earlier)
            earlier |= s
        added = ~present[attribute] & tf.reduce_any(tf.stack(first_said, -1), -1)
        checks[attribute] = (present[attribute] & ~realised, added, earlier)  # wrong or missed
    return checks, is_e2e
