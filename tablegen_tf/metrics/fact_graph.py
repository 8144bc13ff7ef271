"""Table coverage in the graph: the table fact words a text leaves out, as TF string ops.

The beam reranker (tablegen_tf.reranking) prefers candidates that mention more of their
table inside the SavedModel, so it needs ``fact_metrics``' coverage without Python.  The
table side is ``fact_metrics._table_sets``' ``table_facts``: the distinct casefolded value
tokens that are numbers, or values of name-ish fields (WebNLG's subject and object, E2E's
name and near) that are not function words.  A text mentions a fact word when one of its
tokens (the project tokenizer, as ``evaluate`` tokenizes) equals it, case aside.  So for one
text, ``(facts - missed) / facts`` is its ``table_coverage``.
"""

from __future__ import annotations

import re

import tensorflow as tf

from tablegen_tf.metrics.fact_metrics import FUNCTION_WORDS, NAME_FIELDS, NUMBER_RE

# is_name_field: one of NAME_FIELDS ("-" read as "_") or ending in "name"
_NAME_FIELD_PATTERN = "(?:" + "|".join(re.escape(f) for f in sorted(NAME_FIELDS)) + ")|.*name"


def _casefold(strings: tf.Tensor) -> tf.Tensor:
    return tf.strings.lower(strings, encoding="utf-8")


def table_fact_words(fields: tf.Tensor, values: tf.Tensor, mask: tf.Tensor):
    """Records [N, R] -> (casefolded value tokens [N, R], counted [N, R]): counted marks the
    first record of each distinct table fact word, so their sum is the table's fact count."""
    keys = _casefold(values)
    field_keys = tf.strings.regex_replace(_casefold(fields), "-", "_")
    is_name = tf.strings.regex_full_match(field_keys, _NAME_FIELD_PATTERN)
    function_word = tf.reduce_any(tf.equal(keys[..., None], tf.constant(sorted(FUNCTION_WORDS))), axis=-1)
    number = tf.strings.regex_full_match(keys, NUMBER_RE.pattern)
    fact = mask & tf.not_equal(keys, "") & (number | (is_name & ~function_word))
    # a word in two records counts once: only its first fact record is counted
    same = tf.equal(keys[:, :, None], keys[:, None, :]) & fact[:, None, :]  # [N, R, R'] r' holds r's word
    records = tf.shape(keys)[1]
    earlier = tf.range(records)[None, :] < tf.range(records)[:, None]  # [R, R']: r' < r
    return keys, fact & ~tf.reduce_any(same & earlier[None], axis=2)


def missed_table_facts(fields: tf.Tensor, values: tf.Tensor, mask: tf.Tensor, texts: tf.Tensor,
                       tokenizer) -> tf.Tensor:
    """Distinct table fact words that ``texts`` do not mention, int32 in the shape of
    ``texts``: [N], or [N, K] for K candidate texts per table (the table side is then
    computed once, not K times); ``tokenizer``: a tablegen_tf.tokenizer.Tokenizer."""
    texts = tf.convert_to_tensor(texts, tf.string)
    keys, counted = table_fact_words(fields, values, mask)
    if texts.shape.rank == 2:
        keys, counted = (tf.repeat(x, tf.shape(texts)[1], axis=0) for x in (keys, counted))
    tokens = _casefold(tokenizer.tokenize(tf.reshape(texts, [-1])).to_tensor(""))  # [N*K, T]
    said = tf.equal(tokens[:, :, None], keys[:, None, :]) & tf.not_equal(tokens, "")[:, :, None]
    missed = counted & ~tf.reduce_any(said, axis=1)  # [N*K, R]
    return tf.reshape(tf.reduce_sum(tf.cast(missed, tf.int32), axis=1), tf.shape(texts))
