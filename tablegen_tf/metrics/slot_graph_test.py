import csv
import os
import re

import pytest
import tensorflow as tf

from tablegen_tf.metrics import slot_graph, slot_metrics
from tablegen_tf.tokenizer import tokenize_batch

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "e2e", "slot_parity.csv")


def _records(mr: str):
    """"name[The Eagle], priceRange[£20-25]" -> record tokens (fields, values) as the project's
    tokenizer makes them ("£", "20", "-", "25"), the form evaluate and the SavedModel see."""
    pairs = re.findall(r"([^,\[]+)\[([^\]]*)\]", mr)
    tokens = tokenize_batch([value for _, value in pairs])
    fields = [field.strip() for (field, _), words in zip(pairs, tokens) for _ in words]
    return fields, [word for words in tokens for word in words]


def _graph_errors(tables, texts):
    width = max(1, max(len(f) for f, _ in tables))
    pad = lambda rows: tf.constant([list(r) + [""] * (width - len(r)) for r in rows])  # noqa: E731
    mask = tf.constant([[i < len(f) for i in range(width)] for f, _ in tables])
    errors = slot_graph.slot_errors(pad([f for f, _ in tables]), pad([v for _, v in tables]), mask, tf.constant(texts))
    return errors.numpy().tolist()


def _python_errors(tables, texts):
    out = []
    for (fields, values), text in zip(tables, texts):
        slots = slot_metrics.table_slots(fields, values)
        out.append(slot_metrics.align(slots, text).errors if slot_metrics.is_e2e_table(slots) else 0)
    return out


def test_graph_aligner_equals_the_python_aligner_on_e2e_references():
    with open(FIXTURE, newline="") as handle:
        rows = list(csv.DictReader(handle))
    tables = [_records(r["mr"]) for r in rows]
    # the references, and each reference said about the next table (many errors of every kind)
    texts = [r["ref"] for r in rows] + [r["ref"] for r in rows[1:] + rows[:1]]
    tables = tables + tables
    python = _python_errors(tables, texts)
    assert sum(python) > 300  # the shifted half holds errors of every kind
    assert _graph_errors(tables, texts) == python


TABLE = _records("name[Café Rouge (Old)], eatType[coffee shop], food[Italian], priceRange[£20-25], "
                 "familyFriendly[yes], near[The Sorrento]")


@pytest.mark.parametrize("text, errors", [
    ("Café Rouge (Old) is a moderately priced family-friendly Italian café near The Sorrento.", 0),
    ("Café Rouge (Old) is an Italian café near The Sorrento.", 2),  # price and family missed
    ("Cafe Rouge is a cheap Chinese coffee shop that is not kid friendly near The Sorrento.", 4),  # name, 3 wrong
    ("Café Rouge (Old) is a family-friendly Italian café in the city centre, £20-25, near The Sorrento.", 1),  # area added
    ("", 6),
])
def test_hand_examples_agree(text, errors):
    assert _python_errors([TABLE], [text]) == [errors]
    assert _graph_errors([TABLE], [text]) == [errors]


def test_tables_that_are_not_e2e_give_no_errors():
    table = (["born", "team"], ["1970", "Lakers"])
    assert _graph_errors([table], ["He is an Italian restaurant owner."]) == [0]


def test_k_texts_per_table_equal_the_flat_form():
    """Reranking passes [N, K] texts: the table side is computed once, with the same errors."""
    texts = [["Café Rouge (Old) is an Italian café near The Sorrento.", ""],
             ["Café Rouge (Old) is a moderately priced family-friendly Italian café near The Sorrento.",
              "Cafe Rouge is a cheap Chinese coffee shop that is not kid friendly near The Sorrento."]]
    tables = [TABLE, (["born", "team"], ["1970", "Lakers"])]
    width = max(len(f) for f, _ in tables)
    pad = lambda rows: tf.constant([list(r) + [""] * (width - len(r)) for r in rows])  # noqa: E731
    mask = tf.constant([[i < len(f) for i in range(width)] for f, _ in tables])
    errors = slot_graph.slot_errors(pad([f for f, _ in tables]), pad([v for _, v in tables]), mask, tf.constant(texts))
    assert errors.numpy().tolist() == [[2, 6], [0, 0]]
    flat = _graph_errors([TABLE, TABLE], texts[1])
    assert flat == [0, 4]


def test_error_kinds_per_attribute_equal_the_python_alignment():
    """The explain signature's per-slot marks: missed / wrong / added as slot_metrics.align says."""
    with open(FIXTURE, newline="") as handle:
        rows = list(csv.DictReader(handle))
    tables = [_records(r["mr"]) for r in rows]
    texts = [r["ref"] for r in rows[1:] + rows[:1]]  # each reference said about the next table
    width = max(len(f) for f, _ in tables)
    pad = lambda rows: tf.constant([list(r) + [""] * (width - len(r)) for r in rows])  # noqa: E731
    mask = tf.constant([[i < len(f) for i in range(width)] for f, _ in tables])
    kinds = slot_graph.slot_error_kinds(pad([f for f, _ in tables]), pad([v for _, v in tables]), mask,
                                        tf.constant(texts)).numpy()
    expected = []
    for (fields, values), text in zip(tables, texts):
        alignment = slot_metrics.align(slot_metrics.table_slots(fields, values), text)
        marks = {a: "missed" for a in alignment.missed}
        marks.update({a: "wrong" for a, _ in alignment.wrong})
        marks.update({a: "added" for a, _ in alignment.added})
        expected.append([marks.get(a, "").encode() for a in slot_graph.KNOWN_ATTRIBUTES])
    assert kinds.tolist() == expected
    assert {b"missed", b"wrong", b"added"} <= set(kinds.reshape(-1))


@pytest.mark.parametrize("text, missed", [
    ("Café Rouge (Old) is an Italian café near The Sorrento.", 2),  # price and family missed
    ("Cafe Rouge is a cheap Chinese coffee shop that is not kid friendly near The Sorrento.", 1),  # name; 3 wrong
    ("Café Rouge (Old) is a family-friendly Italian café in the city centre, £20-25, near The Sorrento.", 0),  # added
    ("", 6),
])
def test_missed_slots_leave_out_wrong_and_added_values(text, missed):
    """The end gate's count: a text that goes on can still say a missed value, not undo a wrong one."""
    assert len(slot_metrics.align(slot_metrics.table_slots(*TABLE), text).missed) == missed
    width = len(TABLE[0])
    graph = slot_graph.missed_slots(tf.constant([TABLE[0]]), tf.constant([TABLE[1]]),
                                    tf.ones([1, width], tf.bool), tf.constant([text]))
    assert graph.numpy().tolist() == [missed]
