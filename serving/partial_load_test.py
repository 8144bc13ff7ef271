"""Loading only some signatures of a SavedModel (serving.partial_load)."""

import os
import tempfile

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from serving import testing
from serving.partial_load import load_signatures, prune_saved_model


class VocabModel(tf.Module):
    """serving_default looks words up in a vocabulary asset (as the exported tokenizer
    does); `generate` is a second, bigger signature."""

    def __init__(self, vocab_file):
        super().__init__()
        self.table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
            vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), -1)
        self.scale = tf.Variable(3, dtype=tf.int64)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words")])
    def serve(self, words):
        return {"ids": self.table.lookup(words) * self.scale}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words"),
                                  tf.TensorSpec([], tf.int32, name="beam_size")])
    def generate(self, words, beam_size):
        ids = self.table.lookup(words)
        _, ids = tf.while_loop(lambda i, x: i < beam_size, lambda i, x: (i + 1, x + self.scale), (0, ids))
        return {"ids": ids}


def _function_count(export_dir):
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as handle:
        saved_model.ParseFromString(handle.read())
    return len(saved_model.meta_graphs[0].graph_def.library.function), saved_model


def test_only_the_kept_signature_loads_with_its_variables_and_assets(tmp_path, monkeypatch):
    # A private temp dir: other test workers' partial loads share the session's.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\nc\n")
    module = VocabModel(str(vocab))
    export = str(tmp_path / "export")
    tf.saved_model.save(module, export, signatures={"serving_default": module.serve, "generate": module.generate})
    vocab.unlink()  # the SavedModel's own copy (assets/) must be the one read
    words = tf.constant(["c", "a", "zz"])

    loaded = load_signatures(export, ["serving_default"])
    assert list(loaded.signatures) == ["serving_default"]
    assert loaded.signatures["serving_default"](words=words)["ids"].numpy().tolist() == [6, 0, -3]
    assert not [name for name in os.listdir(scratch) if name.startswith("partial-load-")]  # its copy is gone
    full = tf.saved_model.load(export)
    assert full.signatures["generate"](words=words, beam_size=tf.constant(2))["ids"].numpy().tolist() == [8, 6, 5]

    functions, saved_model = _function_count(export)
    pruned = prune_saved_model(saved_model, ["serving_default"])
    assert set(pruned.meta_graphs[0].signature_def) == {"serving_default", "__saved_model_init_op"}
    assert len(pruned.meta_graphs[0].graph_def.library.function) < functions
    assert len(pruned.meta_graphs[0].object_graph_def.nodes) == len(saved_model.meta_graphs[0].object_graph_def.nodes)


def test_stand_in_model_answers_as_when_loaded_whole(tmp_path):
    export = testing.save_fake_model(str(tmp_path / "export"), suffix="v1", decoder_steps=2)
    tables = tf.constant(testing.sample_tables(3))
    partial = load_signatures(export, ["serving_default"]).signatures["serving_default"]
    whole = tf.saved_model.load(export).signatures["serving_default"]
    assert partial(tables=tables)["text"].numpy().tolist() == whole(tables=tables)["text"].numpy().tolist()


def test_a_saved_model_without_the_signature_map_is_refused():
    with pytest.raises(ValueError, match="no signature map"):
        prune_saved_model(saved_model_pb2.SavedModel(meta_graphs=[{}]), ["serving_default"])
