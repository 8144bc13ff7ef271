import tensorflow as tf

from tablegen_tf import schema


def _example():
    example = schema.TableExample(
        example_id="x:train:0",
        source="in.jsonl:1",
        target_tokens=["Alice", "scored", "27", "points", "."],
        content_plan=[0, 2],
        references=["Alice scored 27 points.", "Alice had 27."],
        reference_tokens=["Alice scored 27 points .", "Alice had 27 ."],
    )
    example.add_field("PLAYER_NAME", ["Alice", "Smith"], entity="Alice_Smith", group="home")
    example.add_field("PTS", ["27"], entity="Alice_Smith", group="home")
    example.copy_alignment = schema.copy_alignment(example.values, example.target_tokens)
    return example


def test_add_field_sets_lebret_positions():
    example = _example()
    assert example.pos_start == [1, 2, 1]
    assert example.pos_end == [2, 1, 1]
    assert example.records[1] == schema.Record("PLAYER_NAME", "Smith", 2, 1, "Alice_Smith", "home")


def test_copy_alignment_lists_every_equal_record():
    assert schema.copy_alignment(["a", "b", "a"], ["a", "c", "b"]) == [[0, 2], [], [1]]


def test_round_trip_through_tf_example():
    example = _example()
    assert schema.TableExample.parse(example.serialize()) == example


def test_feature_spec_parses_ragged_copy_alignment():
    example = _example()
    parsed = tf.io.parse_single_example(example.serialize(), schema.feature_spec())
    assert parsed[schema.COPY_INDICES].to_list() == [[0], [], [2], [], []]
    assert parsed[schema.RECORD_VALUE].numpy().tolist() == [b"Alice", b"Smith", b"27"]
    assert parsed[schema.CONTENT_PLAN].numpy().tolist() == [0, 2]


def test_validate_reports_empty_table_and_missing_text():
    assert schema.validate(schema.TableExample("i", "s", target_tokens=["a"], copy_alignment=[[]])) == "empty table: no records"
    empty_text = _example()
    empty_text.target_tokens, empty_text.copy_alignment = [], []
    assert "missing text" in schema.validate(empty_text)
