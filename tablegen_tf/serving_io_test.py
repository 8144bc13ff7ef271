"""serving_io: the in-graph JSON table parser agrees with the Beam job's Python path."""

from __future__ import annotations

import csv
import json
import pathlib
import random

import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.readers.build import build_examples
from tablegen_tf.readers.base import Rejection
from tablegen_tf.readers.e2e import parse_aligned_mr, parse_mr
from tablegen_tf.readers.jsonl import _row
from tablegen_tf import schema, serving_io
from tablegen_tf.data.input_pipeline import Vocabularies, records_features
from tablegen_tf.tokenizer import Tokenizer, TokenizerConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
TOKENIZER = Tokenizer()
SPEC = [tf.TensorSpec([None], tf.string, name="tables")]


# ----------------------------------------------------------------- helpers


def python_tables(lines):
    """The Beam job's reader on JSON lines: RawTable per line (asserts none is rejected)."""
    tables = [_row(line.encode("utf-8"), i + 1, "test.jsonl", f"id-{i}") for i, line in enumerate(lines)]
    rejected = [t for t in tables if isinstance(t, Rejection)]
    assert not rejected, rejected
    return tables


def python_records(tables):
    built, rejected = build_examples(tables, TokenizerConfig())
    assert not rejected, rejected
    return [
        (ex.fields, ex.values, ex.pos_start, ex.pos_end, ex.entities, ex.groups) for ex, _ in built
    ]


def graph_items(lines):
    parsed = serving_io.parse_tables(tf.constant(lines))
    columns = [[[v.decode("utf-8") for v in row] for row in parsed[k].to_list()] for k in serving_io.ITEM_KEYS]
    return [list(zip(*row)) for row in zip(*columns)]


def graph_records(lines, fn=None):
    records = (fn or (lambda t: serving_io.serving_records(t, TOKENIZER)))(tf.constant(lines))
    keys = (schema.RECORD_FIELD, schema.RECORD_VALUE, schema.RECORD_POS_START, schema.RECORD_POS_END,
            schema.RECORD_ENTITY, schema.RECORD_GROUP)
    out = []
    for key in keys:
        rows = records[key].to_list()
        if records[key].dtype == tf.string:
            rows = [[v.decode("utf-8") for v in row] for row in rows]
        out.append(rows)
    return [tuple(columns) for columns in zip(*out)]


def assert_parity(lines):
    tables = python_tables(lines)
    assert graph_items(lines) == [[(i.field, i.value, i.entity, i.group) for i in t.items] for t in tables]
    assert graph_records(lines) == python_records(tables)


def e2e_tables():
    """E2E MRs (official CSV and aligned files) as item lists."""
    with open(FIXTURES / "e2e" / "devset.csv", newline="", encoding="utf-8") as f:
        mrs = [parse_mr(row[0])[0] for row in list(csv.reader(f))[1:]]
    with open(FIXTURES / "e2e" / "aligned" / "src_valid.txt", encoding="utf-8") as f:
        mrs += [parse_aligned_mr(line)[0] for line in f if line.strip()]
    assert all(mrs)
    return mrs


def e2e_lines(**dumps):
    return [
        json.dumps({"table": [{"field": i.field, "value": i.value} for i in items], "text": "A text."}, **dumps)
        for items in e2e_tables()
    ]


def fixture_lines():
    return [line for line in (FIXTURES / "jsonl" / "train.jsonl").read_text("utf-8").splitlines() if line.strip()]


# ----------------------------------------------------------------- parity


def test_fixture_jsonl_parity():
    assert_parity(fixture_lines())


def test_e2e_parity_ascii_escaped_and_raw_utf8():
    assert_parity(e2e_lines())  # json.dumps default: "\u00a3" escapes for "£"
    assert_parity(e2e_lines(ensure_ascii=False))


def test_key_order_permutations_and_whitespace_variants():
    item = {"field": " name ", "value": "The Vaults", "entity": "e1", "group": "home"}
    lines = []
    for order in ([0, 1, 2, 3], [1, 0, 3, 2], [3, 2, 1, 0], [2, 0, 3, 1]):
        keys = [list(item)[k] for k in order]
        table = [{k: item[k] for k in keys}, {"value": 27, "field": "PTS"}]
        entry = {"text": "x", "table": table} if order[0] % 2 else {"table": table, "text": "x"}
        lines.append(json.dumps(entry))
        lines.append(json.dumps(entry, indent=2).replace("\n", "\r\n"))
        lines.append(json.dumps(entry, separators=(",", ":")))
        lines.append(" \t" + json.dumps(entry, separators=(" , ", " : ")).replace("[", "[\n ") + " \n")
    assert_parity(lines)
    assert len({tuple(map(tuple, items)) for items in graph_items(lines)}) == 1


def test_numbers_as_values():
    literals = ["27", "-3", "0", "-0", "4.5", "4.50", "52.5", "1e3", "1E-2", "2.5e+20", "0.0001", "0.00001",
                "123456789012345678901234567890", "1.0", "-0.0", "3.14159265358979323846", "1e400", "-1e400",
                "1e-400", "1e16", "1e15", "9007199254740993", "0.1", "100.0e-2", "6.02214076e23"]
    lines = ['{"table": [{"field": "n", "value": %s, "entity": %s}], "text": "t"}' % (lit, lit) for lit in literals]
    assert_parity(lines)
    expected = [str(json.loads(lit)) for lit in literals]
    assert [row[0][1] for row in graph_items(lines)] == expected


def test_python_number_str_random_floats():
    rng = random.Random(7)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(-12, 30) for _ in range(3000)]
    values += [float(f"{rng.randint(0, 10**rng.randint(1, 17))}e{rng.randint(-25, 25)}") for _ in range(1000)]
    values += [rng.random() for _ in range(500)] + [1 / 3, 2 / 3, 1e-4, 9.999999999999999e-5, 1e16 - 2, 5e-300]
    literals = [json.dumps(v) for v in values]
    got = [s.decode() for s in serving_io.python_number_str(tf.constant(literals)).numpy()]
    assert got == [str(json.loads(lit)) for lit in literals]


def test_escapes():
    values = ['say "hi"', "back\\slash", "a/b", "caf\u00e9", "emoji \U0001F600 !", "tab\tand\nnewline",
              "\u00a0 nbsp-stripped \u2003", "{not: [an, object]}", '\\"', "\\u00e9 literal"]
    lines = [json.dumps({"table": [{"field": "f\u00e9", "value": v, "entity": v} for v in values], "text": "t"},
                        ensure_ascii=ascii) for ascii in (True, False)]
    lines.append(r'{"table": [{"field": "\u0066\u0069eld", "value": "\/\b\f\r\u00E9\uD83D\uDE00"}], "text": "t"}')
    lines.append(r'{"t\u0061ble": [{"\u0066ield": "k", "v\u0061lue": "escaped keys"}], "t\u0065xt": "t"}')
    assert_parity(lines)
    items = graph_items(lines)
    assert [item[1] for item in items[1]] == [v.strip() for v in values]
    assert items[0] == items[1]
    assert items[2] == [("field", "/\b\f\r\u00e9\U0001F600", "", "")]


def test_python_strip_whitespace_set_matches_str_isspace():
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    others = ["\u200b", "\u180e", "\ufeff", "x", "\u00ad"]
    strings = [s + "a" + s for s in spaces + others]
    got = tf.strings.regex_replace(tf.constant(strings), serving_io._PY_STRIP, "").numpy()
    assert [g.decode() for g in got] == [s.strip() for s in strings]


def _random_string(rng):
    alphabet = 'ab c"\\/{}[]:,\t\n\u00e9\u00a3\u4e2d\U0001F600\u00a0 -.0123'
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))


def _random_scalar(rng):
    kind = rng.randrange(4)
    if kind == 0:
        return _random_string(rng)
    if kind == 1:
        return rng.randint(-10**6, 10**6)
    if kind == 2:
        return rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-8, 8)
    return None


def test_random_tables_match_the_python_reader():
    rng = random.Random(3)
    lines = []
    for _ in range(300):
        table = []
        for _ in range(rng.randint(1, 6)):
            value = rng.choice([_random_string(rng) + "v", rng.randint(0, 99), rng.uniform(0, 100), " "])
            item = {"field": _random_string(rng) + "f", "value": value}
            if rng.random() < 0.5:
                item["entity"] = _random_scalar(rng)
            if rng.random() < 0.3:
                item["group"] = rng.choice(["home", "away", "", None, 1])
            if rng.random() < 0.2:
                item["extra"] = [_random_scalar(rng) for _ in range(rng.randint(0, 3))]
            keys = list(item)
            rng.shuffle(keys)
            table.append({k: item[k] for k in keys})
        entry = {"table": table, "text": _random_string(rng) + "t", "id": rng.randint(0, 9)}
        if rng.random() < 0.3:
            entry["meta"] = {"source": _random_string(rng), "tags": ["a", 1, None]}
        if rng.random() < 0.3:
            entry["more"] = [{"k": 1}, "x", 2.5, None, True]
        keys = list(entry)
        rng.shuffle(keys)
        entry = {k: entry[k] for k in keys}
        dumps = rng.choice([{}, {"ensure_ascii": False}, {"indent": 1}, {"separators": (",", ":")}])
        lines.append(json.dumps(entry, **dumps))
    rejected = [line for line in lines if isinstance(_row(line.encode(), 1, "x", "x"), Rejection)]
    assert 0 < len(rejected) < 30  # some tables have only blank values
    assert_parity([line for line in lines if line not in rejected])
    for line in rejected:
        with pytest.raises(tf.errors.InvalidArgumentError, match="every value is empty"):
            serving_io.parse_tables(tf.constant([line]))


def test_duplicate_keys_last_wins_like_json_loads():
    lines = ['{"table": [{"field": "a", "value": "first", "value": "second"}], "table": '
             '[{"field": "b", "value": "x", "field": "c"}], "text": "t"}']
    assert_parity(lines)
    assert graph_items(lines) == [[("c", "x", "", "")]]


def test_empty_values_are_dropped_and_tokenless_items_give_no_record():
    lines = ['{"table": [{"field": "a", "value": "  "}, {"field": "b", "value": "x y"}, '
             '{"field": "c", "value": ""}], "text": "t"}']
    assert_parity(lines)
    assert graph_items(lines) == [[("b", "x y", "", "")]]


# ----------------------------------------------------------------- errors

GOOD = '{"table": [{"field": "name", "value": "Aromi"}], "text": "Aromi is a pub."}'
BAD = [
    ("{not json", "not a JSON object of the accepted form"),
    ('{"table": [{"field": "a", "value": "x"}]', "not a JSON object of the accepted form"),
    ("[1, 2]", "not a JSON object of the accepted form"),
    ('"table"', "not a JSON object of the accepted form"),
    ("", "not a JSON object of the accepted form"),
    ('{"table": [{"field": "a", "value": "x",}]}', "not a JSON object of the accepted form"),
    ('{"table": [{"field": "a", "value": "x\\q"}]}', "not a JSON object of the accepted form"),
    ('{"table": [{"field": "a", "value": {"deep": 1}}]}', "not a JSON object of the accepted form"),
    ('{"table": [{"field": "a", "value": NaN}]}', "not a JSON object of the accepted form"),
    ('{"text": "t"}', "missing `table`"),
    ('{"table": null, "text": "t"}', "missing `table`"),
    ('{"table": [], "text": "t"}', "`table` must be a non-empty array of objects"),
    ('{"table": ["x"], "text": "t"}', "`table` must be a non-empty array of objects"),
    ('{"table": [1, 2], "text": "t"}', "`table` must be a non-empty array of objects"),
    ('{"table": {"field": "a", "value": "x"}}', "`table` must be a non-empty array of objects"),
    ('{"table": "x"}', "`table` must be a non-empty array of objects"),
    ('{"table": [{"field": "a", "value": "1"}, {"value": "b"}]}', "table[1].field must be a non-empty string"),
    ('{"table": [{"field": " ", "value": "1"}]}', "table[0].field must be a non-empty string"),
    ('{"table": [{"field": 3, "value": "1"}]}', "table[0].field must be a non-empty string"),
    ('{"table": [{"field": "a"}]}', "table[0].value must be a string or a number, got missing"),
    ('{"table": [{"field": "a", "value": null}]}', "table[0].value must be a string or a number, got missing"),
    ('{"table": [{"field": "a", "value": true}]}', "table[0].value must be a string or a number, got a JSON bool"),
    ('{"table": [{"field": "a", "value": ["x"]}]}', "table[0].value must be a string or a number, got a JSON list"),
    ('{"table": [{"field": "a", "value": "x", "entity": false}]}', "table[0].entity must be a string or a number"),
    ('{"table": [{"field": "a", "value": "x", "group": []}]}', "table[0].group must be a string or a number"),
    ('{"table": [{"field": "a", "value": ""}]}', "empty table: every value is empty"),
    ('{"table": [{"field": "a", "value": "x\\ud800"}]}', "a string holds a lone surrogate"),
    ('{"table": [{"field": "a", "value": "x\\udc00\\ud800"}]}', "a string holds a lone surrogate"),
]


@pytest.mark.parametrize("line,problem", BAD)
def test_invalid_input_raises_invalid_argument_naming_index_and_problem(line, problem):
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        serving_io.parse_tables(tf.constant([GOOD, line, GOOD]))
    assert f"tables[1]: {problem}" in error.value.message
    assert "(1 of 3 tables invalid)" in error.value.message
    # the Python reader rejects these too
    if line:
        assert isinstance(_row(line.encode(), 1, "x", "x"), Rejection)


def test_invalid_utf8_and_encoded_surrogates():
    for bad in (b"x\xff", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80"):
        raw = b'{"table": [{"field": "a", "value": "' + bad + b'"}]}'
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"tables\[0\]: not valid UTF-8"):
            serving_io.parse_tables(tf.constant([raw]))
        assert isinstance(_row(raw.replace(b"]}", b'], "text": "t"}'), 1, "x", "x"), Rejection)


def test_errors_inside_a_graph():
    fn = tf.function(serving_io.parse_tables, input_signature=SPEC)
    for line, problem in BAD:
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            fn(tf.constant([GOOD, line]))
        assert f"tables[1]: {problem}" in error.value.message, error.value.message


def test_a_dropped_item_is_not_checked_for_surrogates_like_the_python_reader():
    line = r'{"table": [{"field": "\ud800", "value": ""}, {"field": "a", "value": "x"}], "text": "t"}'
    assert_parity([line])


def test_counts_every_invalid_element_and_names_the_first():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"tables\[2\]: missing `table` \(2 of 4 tables invalid\)"):
        serving_io.parse_tables(tf.constant([GOOD, GOOD, "{}", "[]"]))


# ----------------------------------------------------------------- graphs and SavedModel


class Server(tf.Module):
    def __init__(self, vocabs):
        super().__init__()
        self.tokenizer = Tokenizer()
        self.vocabs = vocabs

    @tf.function(input_signature=SPEC)
    def records(self, tables):
        return serving_io.serving_records(tables, self.tokenizer)

    @tf.function(input_signature=SPEC)
    def serve(self, tables):
        records = serving_io.serving_records(tables, self.tokenizer)
        return serving_io.batched_records_features(self.vocabs, records, max_position=3)


def small_vocabs():
    return Vocabularies({
        "words": ["<pad>", "<unk>", "<s>", "</s>", "Alimentum", "city", "centre", "27"],
        "fields": ["<pad>", "<unk>", "<none>", "name", "area", "PTS"],
        "entities": ["<pad>", "<unk>", "<none>", "LeBron_James"],
        "groups": ["<pad>", "<unk>", "<none>", "home", "away"],
    })


def test_tf_function_with_unknown_batch_size():
    fn = tf.function(lambda t: serving_io.serving_records(t, TOKENIZER), input_signature=SPEC)
    lines = fixture_lines() + e2e_lines()
    assert graph_records(lines, fn) == python_records(python_tables(lines))
    assert graph_records(lines[:1], fn) == python_records(python_tables(lines[:1]))
    empty = fn(tf.constant([], tf.string))
    assert empty[schema.RECORD_VALUE].shape[0] == 0
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"tables\[1\]: missing `table`"):
        fn(tf.constant([GOOD, '{"text": "t"}']))


def test_saved_model_round_trip(tmp_path):
    server = Server(small_vocabs())
    lines = fixture_lines()
    batches = [lines, lines[1:2], lines[2:] + lines]  # batch size is unknown to the signature
    expected_ragged = graph_records(lines, server.records)
    expected_dense = [{k: v.numpy() for k, v in server.serve(tf.constant(b)).items()} for b in batches]
    tf.saved_model.save(server, str(tmp_path), signatures={"serving_default": server.serve})
    del server
    loaded = tf.saved_model.load(str(tmp_path))
    assert graph_records(lines, loaded.records) == expected_ragged
    assert graph_records(lines, loaded.records) == python_records(python_tables(lines))
    signature = loaded.signatures["serving_default"]
    for batch, expected in zip(batches, expected_dense):
        out = signature(tables=tf.constant(batch))
        assert set(out) == set(expected)
        for key, value in out.items():
            np.testing.assert_array_equal(value.numpy(), expected[key], err_msg=key)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"tables\[0\]: table\[0\].value must be a string"):
        signature(tables=tf.constant(['{"table": [{"field": "a"}]}']))
    # no py_function (PyFunc) anywhere in the exported graph
    ops = {node.op for node in signature.graph.as_graph_def().node}
    for function in signature.graph.as_graph_def().library.function:
        ops.update(node.op for node in function.node_def)
    assert not any("PyFunc" in op for op in ops), ops


def test_batched_records_features_match_the_training_pipeline():
    vocabs = small_vocabs()
    lines = fixture_lines()
    dense = serving_io.batched_records_features(vocabs, serving_io.serving_records(tf.constant(lines), TOKENIZER), 3)
    assert set(dense) == {"record_field", "record_value", "record_pos_start", "record_pos_end", "record_entity",
                          "record_group", "record_mask", "record_value_text"}
    examples = [ex for ex, _ in build_examples(python_tables(lines), TokenizerConfig())[0]]
    width = max(len(ex.values) for ex in examples)
    bucket = serving_io.RECORD_BUCKET  # the record axis is padded to a multiple of it
    assert dense["record_value"].shape == (len(lines), -(-width // bucket) * bucket)
    for b, example in enumerate(examples):
        parsed = tf.io.parse_single_example(example.serialize(), schema.feature_spec())
        single = records_features(vocabs, parsed, 3)
        n = len(example.values)
        for key, value in single.items():
            np.testing.assert_array_equal(dense[key][b, :n].numpy(), value.numpy(), err_msg=key)
            pad = dense[key][b, n:].numpy()
            assert (pad == (b"" if value.dtype == tf.string else 0)).all(), key
    truncated = serving_io.batched_records_features(
        vocabs, serving_io.serving_records(tf.constant(lines), TOKENIZER), 3, max_records=2)
    assert truncated["record_value"].shape == (len(lines), bucket)
    assert truncated["record_mask"].numpy().sum(axis=1).max() == 2
