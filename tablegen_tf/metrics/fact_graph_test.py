import csv
import os
import re

import tensorflow as tf

from tablegen_tf import inference
from tablegen_tf.config import TokenizerConfig
from tablegen_tf.metrics import fact_graph
from tablegen_tf.metrics.fact_metrics import NAME_FIELDS, _table_sets
from tablegen_tf.tokenizer import Tokenizer, tokenize_batch

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures")


def _padded(tables):
    width = max(1, max(len(f) for f, _ in tables))
    pad = lambda rows: tf.constant([list(r) + [""] * (width - len(r)) for r in rows])  # noqa: E731
    mask = tf.constant([[i < len(f) for i in range(width)] for f, _ in tables])
    return pad([f for f, _ in tables]), pad([v for _, v in tables]), mask


def _graph_missed(tables, texts):
    fields, values, mask = _padded(tables)
    return fact_graph.missed_table_facts(fields, values, mask, tf.constant(texts), Tokenizer()).numpy().tolist()


def _python_missed(tables, texts):
    """fact_metrics' table coverage, per text: table fact words not among its tokens."""
    out = []
    for (fields, values), tokens in zip(tables, tokenize_batch(texts)):
        facts = _table_sets(values, fields, NAME_FIELDS)[2]
        out.append(len(facts - {t.casefold() for t in tokens}))
    return out


def _e2e_tables_and_texts():
    with open(os.path.join(FIXTURES, "e2e", "slot_parity.csv"), newline="") as handle:
        rows = list(csv.DictReader(handle))
    tables = []
    for row in rows:
        pairs = re.findall(r"([^,\[]+)\[([^\]]*)\]", row["mr"])
        tokens = tokenize_batch([value for _, value in pairs])
        tables.append(([f.strip() for (f, _), words in zip(pairs, tokens) for _ in words],
                       [w for words in tokens for w in words]))
    return tables, [row["ref"] for row in rows]


def _webnlg_tables_and_texts():
    raws, _ = inference.read_inputs("webnlg", os.path.join(FIXTURES, "webnlg", "train"), "train")
    examples = inference.build(raws, TokenizerConfig(), needs_text=True)[0]
    return [(e.fields, e.values) for e in examples], [e.all_references()[0] for e in examples]


def test_graph_coverage_equals_fact_metrics_on_e2e_and_webnlg_references():
    tables, texts = (a + b for a, b in zip(_e2e_tables_and_texts(), _webnlg_tables_and_texts()))
    # each reference against its own table, then against the next one (most words missed)
    tables, texts = tables + tables, texts + texts[1:] + texts[:1]
    python = _python_missed(tables, texts)
    assert sum(python[len(python) // 2:]) > 800 and python.count(0) > 50
    assert _graph_missed(tables, texts) == python


def test_words_count_once_and_property_and_function_words_not_at_all():
    # "Aarhus" twice (subject and object), "," a function word, "city served" a property
    table = (["subject", "subject", "property", "property", "object", "object", "object"],
             ["Aarhus", "Airport", "city", "served", "Aarhus", ",", "Denmark"])
    texts = ["aarhus is in Denmark.", "It serves the city.", "Aarhus Airport serves Aarhus, Denmark."]
    assert _graph_missed([table] * 3, texts) == [1, 3, 0]


def test_candidate_matrix_is_scored_per_table():
    tables, texts = _webnlg_tables_and_texts()
    fields, values, mask = _padded(tables)
    candidates = [[texts[i], texts[(i + 1) % len(texts)]] for i in range(len(texts))]
    matrix = fact_graph.missed_table_facts(fields, values, mask, tf.constant(candidates), Tokenizer())
    flat = _graph_missed([t for t in tables for _ in range(2)], [c for pair in candidates for c in pair])
    assert matrix.shape == (len(texts), 2) and sum(matrix.numpy().ravel().tolist()) > 0
    assert matrix.numpy().ravel().tolist() == flat
