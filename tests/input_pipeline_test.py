import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

from beam_jobs import prepare
from tablegen_tf import schema
from tablegen_tf.config import load_config
from tablegen_tf.data.table_featurizer import TableFeaturizer
from tablegen_tf.data import input_pipeline as ip

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    output = tmp_path_factory.mktemp("webnlg")
    config = prepare.PrepareConfig(
        format="webnlg", input=os.path.join(FIXTURES, "webnlg", "train"), output=str(output), split="train", num_shards=1
    )
    prepare.run(config, IN_PROCESS)
    return str(output)


def _batches(prepared, **overrides):
    vocabs = ip.Vocabularies.load(os.path.join(prepared, "vocab"))
    config = ip.InputConfig(batch_size=4, shuffle_buffer=0, **overrides)
    return vocabs, list(ip.make_dataset(prepared, vocabs, config, training=False))


def test_batches_follow_the_contract(prepared):
    vocabs, batches = _batches(prepared)
    batch = batches[0]
    b, r = batch["record_value"].shape
    t = batch["target_out"].shape[1]
    assert batch["copy_mask"].shape == (b, t, r)
    assert batch["record_mask"].dtype == tf.bool
    np.testing.assert_array_equal(batch["target_in"][:, 0], ip.BOS_ID)
    lengths = tf.reduce_sum(tf.cast(batch["target_mask"], tf.int32), 1)
    last = tf.gather(batch["target_out"], lengths - 1, batch_dims=1)
    np.testing.assert_array_equal(last, ip.EOS_ID)


def test_copy_mask_marks_equal_values(prepared):
    vocabs, batches = _batches(prepared)
    for batch in batches:
        mask = batch["copy_mask"].numpy()
        values = batch["record_value_text"].numpy()
        labels = vocabs.to_words(batch["target_out"]).numpy()
        b, t, r = np.nonzero(mask)
        assert len(b) > 0
        assert all(values[i, k] == labels[i, j] for i, j, k in zip(b, t, r) if labels[i, j] != b"<unk>")


def test_expand_references_yields_one_example_per_text(prepared):
    _, primary = _batches(prepared)
    _, expanded = _batches(prepared, expand_references=True)
    count = lambda batches: sum(int(b["target_out"].shape[0]) for b in batches)  # noqa: E731
    assert count(expanded) > count(primary)


def test_the_webnlg_config_trains_on_every_reference(prepared):
    # The fixture: 3 entries with 6 <lex> texts. Training on only the first text of each entry
    # left ~60 % of WebNLG's training texts unseen.
    vocabs = ip.Vocabularies.load(os.path.join(prepared, "vocab"))
    featurizer = TableFeaturizer(vocabs, load_config("webnlg", ["data.batch_size=4", "data.shuffle_buffer=0"]))
    count = lambda batches: sum(int(b["target_out"].shape[0]) for b in batches)  # noqa: E731
    assert count(featurizer.dataset(prepared, training=True, seed=1)) == 6
    assert count(featurizer.dataset(prepared, training=False)) == 3  # evaluation: one per entry


def test_positions_are_clipped(prepared):
    _, batches = _batches(prepared, max_position=2)
    for batch in batches:
        assert int(tf.reduce_max(batch["record_pos_start"])) <= 2


def _other_wire_form(record: bytes) -> bytes:
    """The same tf.train.Example with its feature map's entries in reverse key order on the
    wire (valid protobuf: concatenated messages merge), as another process may write it."""
    example = tf.train.Example.FromString(record)
    parts = [tf.train.Example(features=tf.train.Features(feature={key: example.features.feature[key]}))
             .SerializeToString() for key in sorted(example.features.feature, reverse=True)]
    return b"".join(parts)


def _copies(prepared, copies=16):
    """The fixture's examples repeated under distinct ids: enough examples that two
    unsorted file orders give other seeded batches with certainty (3 did not)."""
    records = [r.numpy() for r in tf.data.TFRecordDataset(ip.list_files(prepared), compression_type="GZIP")]
    out = []
    for copy in range(copies):
        for record in records:
            example = tf.train.Example.FromString(record)
            ids = example.features.feature[schema.EXAMPLE_ID].bytes_list.value
            ids[0] = ids[0] + b":copy%d" % copy
            out.append(example.SerializeToString(deterministic=True))
    return out


def _write_run(directory, records, shards):
    os.makedirs(directory)
    size = -(-len(records) // shards)
    for shard in range(shards):
        name = f"examples-{shard:05d}-of-{shards:05d}.tfrecord.gz"
        with tf.io.TFRecordWriter(os.path.join(directory, name), options="GZIP") as writer:
            for record in records[shard * size:(shard + 1) * size]:
                writer.write(record)
    return str(directory)


def test_small_training_sets_come_in_the_same_seeded_order_whatever_the_run_wrote(prepared, tmp_path):
    """Beam writes the same examples in a run-dependent order and wire form: within the
    in-memory bound the seeded batches depend on the examples' content only (the same model
    from the same data), and so do validation batches (the same validation loss); beyond it
    the files' order counts (streamed, not sorted)."""
    vocabs = ip.Vocabularies.load(os.path.join(prepared, "vocab"))
    records = _copies(prepared)
    # Another multi-worker Beam run: the same examples in other bytes, other files, reverse order.
    rewritten = [_other_wire_form(record) for record in records[::-1]]
    assert rewritten[0] != records[-1]
    assert tf.train.Example.FromString(rewritten[0]) == tf.train.Example.FromString(records[-1])
    one_run = _write_run(tmp_path / "one_run", records, shards=1)
    other_run = _write_run(tmp_path / "other_run", rewritten, shards=2)

    def order(directory, cache_max_mb):
        config = ip.InputConfig(batch_size=4, shuffle_buffer=50, cache_max_mb=cache_max_mb)
        dataset = ip.make_dataset(directory, vocabs, config, training=True, seed=3).repeat(2)
        return [tuple(batch["example_id"].numpy()) for batch in dataset]

    assert order(one_run, 16) == order(other_run, 16) == order(one_run, 16)
    assert len(set(order(one_run, 16))) > 1
    assert order(one_run, 0) != order(other_run, 0)  # so the check above can fail

    def validation_order(directory, cache_max_mb):  # no shuffle: the order they are read in
        config = ip.InputConfig(batch_size=4, shuffle_buffer=50, cache_max_mb=cache_max_mb)
        return [tuple(batch["example_id"].numpy()) for batch in
                ip.make_dataset(directory, vocabs, config, training=False)]

    assert validation_order(one_run, 16) == validation_order(other_run, 16)
    assert validation_order(one_run, 0) != validation_order(other_run, 0)
    assert ip._fits_cache(ip.list_files(one_run), 16) and not ip._fits_cache(ip.list_files(one_run), 0)


def test_shuffled_attributes_move_whole_values_with_their_copy_columns_and_plan():
    """data.shuffle_attributes: a value's words stay together and in order; the copy mask's
    columns and the content plan's indices follow their records."""
    field = tf.constant([1, 2, 2, 3, 4, 4, 4])  # 4 values: 1 | 2 2 | 3 | 4 4 4
    features = {
        "record_field": field,
        "record_pos_start": tf.constant([1, 1, 2, 1, 1, 2, 3]),
        "record_value_text": tf.constant(["a", "b1", "b2", "c", "d1", "d2", "d3"]),
        "copy_mask": tf.one_hot([0, 2, 6, 3], 7),  # 4 target tokens copy a, b2, d3, c
        "content_plan": tf.constant([1, 4, 0]),
        "target_out": tf.constant([5, 6, 7, 8]),
    }
    orders = set()
    for seed in range(12):
        out = ip.shuffle_attributes(features, seed=seed)
        text = [t.decode() for t in out["record_value_text"].numpy()]
        assert sorted(text) == sorted(t.decode() for t in features["record_value_text"].numpy())
        joined = " ".join(text)
        assert "b1 b2" in joined and "d1 d2 d3" in joined
        copied = [text[k] for k in np.argmax(out["copy_mask"].numpy(), axis=1)]
        assert copied == ["a", "b2", "d3", "c"]
        assert [text[k] for k in out["content_plan"].numpy()] == ["b1", "d1", "a"]
        np.testing.assert_array_equal(out["target_out"], features["target_out"])
        orders.add(joined)
    assert len(orders) > 3, "the order never changes: this test could not fail"
    empty = {"record_pos_start": tf.zeros([0], tf.int32), "copy_mask": tf.zeros([2, 0]),
             "content_plan": tf.zeros([0], tf.int32)}
    assert ip.shuffle_attributes(empty, seed=1)["copy_mask"].shape == (2, 0)


def test_only_training_batches_are_shuffled(prepared):
    _, plain = _batches(prepared)
    _, evaluated = _batches(prepared, shuffle_attributes=True)  # training=False: the table's order
    for a, b in zip(plain, evaluated):
        np.testing.assert_array_equal(a["record_value"], b["record_value"])
    vocabs = ip.Vocabularies.load(os.path.join(prepared, "vocab"))
    config = ip.InputConfig(batch_size=4, shuffle_buffer=0, shuffle_attributes=True)
    trained = list(ip.make_dataset(prepared, vocabs, config, training=True, seed=1))
    assert sum(int(b["target_out"].shape[0]) for b in trained) == sum(int(b["target_out"].shape[0]) for b in plain)
    assert any(not np.array_equal(a["record_value"], b["record_value"]) for a, b in zip(plain, trained))


def test_unknown_value_words_hide_a_word_type_in_the_table_and_the_target_alike():
    """data.unknown_value_words: a hidden value word is <unk> wherever it occurs (table and
    target), its text stays for copying; words outside the table and BOS/EOS never change."""
    unk, bos, eos = ip.UNK_ID, ip.BOS_ID, ip.EOS_ID
    features = {
        "record_value": tf.constant([5, 6, 6, unk, 7]),
        "record_value_text": tf.constant(["a", "b", "b", "rare", "c"]),
        "target_in": tf.constant([bos, 5, 9, 6, unk]),
        "target_out": tf.constant([5, 9, 6, unk, eos]),
    }
    out = ip.unknown_value_words(features, 0.999999, seed=1)
    np.testing.assert_array_equal(out["record_value"], [unk] * 5)
    np.testing.assert_array_equal(out["target_in"], [bos, unk, 9, unk, unk])
    np.testing.assert_array_equal(out["target_out"], [unk, 9, unk, unk, eos])
    np.testing.assert_array_equal(out["record_value_text"], features["record_value_text"])
    hidden_sets = set()
    for seed in range(16):
        out = ip.unknown_value_words(features, 0.5, seed=seed)
        values, target = out["record_value"].numpy(), out["target_out"].numpy()
        assert values[1] == values[2] == target[2], "one word type, hidden everywhere or nowhere"
        assert values[0] == target[0] and target[1] == 9 and target[4] == eos
        hidden_sets.add(tuple(values == unk))
    assert len(hidden_sets) > 2, "the same words every time: this test could not fail"


def test_word_hiding_rates_follow_the_training_counts_and_hide_rare_words_only(prepared, tmp_path):
    """data.unknown_word_alpha: alpha / (alpha + count) per word from vocab/words.counts.tsv;
    a word with rate ~1 is hidden, a word with rate 0 never."""
    vocabs = ip.Vocabularies.load(os.path.join(prepared, "vocab"))
    counts = ip.read_counts(os.path.join(prepared, "vocab", "words.counts.tsv"))
    rates = ip.word_hiding_rates(vocabs, os.path.join(prepared, "vocab", "words.counts.tsv"), 2.0).numpy()
    words = vocabs.tokens["words"]
    assert rates[ip.UNK_ID] == rates[ip.BOS_ID] == 0.0
    some = next(i for i, w in enumerate(words) if w in counts)
    assert rates[some] == pytest.approx(2.0 / (2.0 + counts[words[some]]))
    word_rates = tf.one_hot(6, 10, on_value=0.999999, off_value=0.0)  # word 6 rare, the others common
    features = {"record_value": tf.constant([5, 6, 7]), "target_in": tf.constant([ip.BOS_ID, 6, 5]),
                "target_out": tf.constant([6, 5, ip.EOS_ID])}
    out = ip.unknown_value_words(features, 0.0, seed=1, word_rates=word_rates)
    np.testing.assert_array_equal(out["record_value"], [5, ip.UNK_ID, 7])
    np.testing.assert_array_equal(out["target_out"], [ip.UNK_ID, 5, ip.EOS_ID])
    with pytest.raises(ValueError, match="data.unknown_word_alpha: no word counts"):
        ip.word_hiding_rates(vocabs, str(tmp_path / "words.counts.tsv"), 2.0)


def test_word_counts_are_read_beside_the_vocabularies_in_use_for_a_file_pattern_split(prepared, tmp_path):
    """A TFX Trainer's split is a file pattern with no vocab/ beside it: word hiding reads the
    counts the run directory copied with its vocabularies (data.vocab)."""
    from tablegen_tf.training.trainer import copy_vocabularies

    run_vocab = copy_vocabularies(os.path.join(prepared, "vocab"), str(tmp_path / "run" / "vocab"))
    assert sorted(os.listdir(run_vocab)) == sorted(os.listdir(os.path.join(prepared, "vocab")))
    vocabs = ip.Vocabularies.load(run_vocab)
    pattern = os.path.join(prepared, "examples-*.tfrecord.gz")
    config = ip.InputConfig(batch_size=4, shuffle_buffer=0, unknown_word_alpha=1000.0, vocab=run_vocab)
    hidden = sum(int(tf.reduce_sum(tf.cast(tf.equal(b["record_value"], ip.UNK_ID) & b["record_mask"], tf.int32)))
                 for b in ip.make_dataset(pattern, vocabs, config, training=True, seed=1))
    assert hidden > 10
    with pytest.raises(ValueError, match="data.unknown_word_alpha: no word counts"):
        ip.make_dataset(pattern, vocabs, dataclasses.replace(config, vocab=None), training=True, seed=1)
    # A vocabulary directory without counts (a run written before the copy): the split's counts.
    bare = tmp_path / "bare"
    bare.mkdir()
    assert ip.counts_path("words", str(bare), prepared) == os.path.join(prepared, "vocab", "words.counts.tsv")
    assert ip.counts_path("words", run_vocab, prepared) == os.path.join(run_vocab, "words.counts.tsv")


def test_unknown_value_words_only_in_training_batches(prepared):
    vocabs = ip.Vocabularies.load(os.path.join(prepared, "vocab"))

    def unknowns(training, rate):
        config = ip.InputConfig(batch_size=4, shuffle_buffer=0, unknown_value_words=rate)
        batches = ip.make_dataset(prepared, vocabs, config, training=training, seed=1)
        return sum(int(tf.reduce_sum(tf.cast(tf.equal(b["record_value"], ip.UNK_ID) & b["record_mask"], tf.int32)))
                   for b in batches)

    assert unknowns(False, 0.5) == unknowns(False, 0.0) == unknowns(True, 0.0)
    assert unknowns(True, 0.5) > unknowns(True, 0.0) + 10
    config = ip.InputConfig(batch_size=4, shuffle_buffer=0, unknown_word_alpha=1000.0)  # ~every word
    hidden = sum(int(tf.reduce_sum(tf.cast(tf.equal(b["record_value"], ip.UNK_ID) & b["record_mask"], tf.int32)))
                 for b in ip.make_dataset(prepared, vocabs, config, training=True, seed=1))
    assert hidden > unknowns(True, 0.5)


def test_tables_are_repeated_by_their_number_of_values(prepared):
    """data.repeat_by_table_size: a training epoch holds each table repeats[n] times for n
    values (the last count for larger tables); evaluation reads each table once."""
    vocabs = ip.Vocabularies.load(os.path.join(prepared, "vocab"))

    def sizes(repeats, training=True):
        config = ip.InputConfig(batch_size=4, shuffle_buffer=0, repeat_by_table_size=repeats)
        found = []
        for batch in ip.make_dataset(prepared, vocabs, config, training=training, seed=1):
            starts = tf.reduce_sum(tf.cast(tf.equal(batch["record_pos_start"], 1), tf.int32), axis=1)
            found.extend(int(n) for n in starts.numpy())
        return sorted(found)

    once = sizes(())
    assert len(set(once)) > 1, "the fixture's tables all have one size: this test could not fail"
    largest = max(once)
    repeats = [1] * largest + [3]  # the largest tables three times, every other size once
    expected = sorted(once + [n for n in once if n == largest] * 2)
    assert sizes(repeats) == expected
    assert sizes([0] * largest + [1]) == [n for n in once if n == largest]
    assert sizes(repeats, training=False) == once
    with pytest.raises(ValueError, match="repeat_by_table_size"):
        sizes([1, -1])
    with pytest.raises(ValueError, match="expand_references"):
        config = ip.InputConfig(batch_size=4, shuffle_buffer=0, repeat_by_table_size=[1, 2], expand_references=True)
        ip.make_dataset(prepared, vocabs, config, training=True, seed=1)
