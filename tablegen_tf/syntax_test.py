"""Dependency parses for the compression family's syntactic scaffold, with the real spaCy model."""

import json

import pytest
import tensorflow as tf

from tablegen_tf import schema, syntax


@pytest.fixture(scope="module")
def nlp():
    return syntax.load_parser()


def test_the_installed_parser_has_the_fixed_label_set(nlp):
    assert tuple(nlp.get_pipe("parser").labels) == syntax.DEP_LABELS


def test_parse_tokens_aligns_one_label_and_head_per_given_token(nlp):
    tokens = "Police arrested two men in the shooting of a 15-year-old girl on Monday .".split()
    (labels, heads), = syntax.parse_tokens(nlp, [tokens])
    assert len(labels) == len(heads) == len(tokens)
    named = {token: syntax.DEP_LABELS[label] for token, label in zip(tokens, labels)}
    assert named["arrested"] == "ROOT" and heads[1] == 1  # the root is its own head
    assert named["Police"] == "nsubj" and heads[0] == 1
    assert named["men"] == "dobj" and heads[3] == 1


def test_annotate_directory_round_trips_through_the_input_parser(nlp, tmp_path):
    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    examples = [schema.TextExample("a", "t:1", "Police arrested two men .", "Police arrested two men .".split(),
                                   ["arrested", "two", "men"], [0, 1, 1, 1, 0]),
                schema.TextExample("b", "t:2", "It rained .", ["It", "rained", "."], ["It", "rained"], [1, 1, 0])]
    with tf.io.TFRecordWriter(str(source / "examples-00000-of-00001.tfrecord.gz"), options="GZIP") as writer:
        for example in examples:
            writer.write(example.serialize())
    (source / "metadata.json").write_text(json.dumps({"format": "compression"}))
    assert syntax.annotate_directory(str(source), str(out), nlp) == 2
    assert json.loads((out / "metadata.json").read_text()) == {"format": "compression"}
    records = list(tf.data.TFRecordDataset(str(out / "examples-00000-of-00001.tfrecord.gz"), compression_type="GZIP"))
    parsed = [schema.TextExample.parse(record.numpy()) for record in records]
    assert [e.labels for e in parsed] == [e.labels for e in examples]
    assert [syntax.DEP_LABELS[label] for label in parsed[1].dep_labels] == ["nsubj", "ROOT", "punct"]
    assert parsed[1].dep_heads == [1, 1, 1]
    assert schema.validate(parsed[0]) is None
    features = tf.io.parse_single_example(records[1], schema.text_feature_spec())
    assert features[schema.DEP_HEADS].numpy().tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="must differ"):
        syntax.annotate_directory(str(out), str(out), nlp)


def test_unparsed_examples_keep_their_bytes_and_mismatched_parses_are_rejected():
    example = schema.TextExample("a", "t:1", "x y", ["x", "y"], ["x"], [1, 0])
    assert schema.DEP_LABELS not in example.to_tf_example().features.feature
    example.dep_labels, example.dep_heads = [0], [0]
    assert "1 dependency labels and 1 heads for 2 source tokens" in schema.validate(example)
