"""tf.data input pipeline: record TFRecords -> padded, length-bucketed batches.

Produces the batch dict described in CONTRACT.md. Vocabulary lookups run as
TF ops so the same `Vocabularies` object serves training and the SavedModel.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from tablegen_tf import schema
from tablegen_tf.constants import BOS_ID, COUNTS_SUFFIX, EOS_ID, NONE_ID, UNK_ID

VOCAB_NAMES = ("words", "fields", "entities", "groups")


def read_vocab_file(path: str) -> List[str]:
    with tf.io.gfile.GFile(path) as handle:
        return [line.rstrip("\n") for line in handle if line.rstrip("\n")]


class Vocabularies(tf.Module):
    """String -> id tables for words, fields, entities and groups."""

    def __init__(self, tokens: Dict[str, Sequence[str]], name: str = "vocabularies"):
        super().__init__(name=name)
        self.tokens = {key: list(value) for key, value in tokens.items()}
        self._tables = {}
        for key, values in self.tokens.items():
            initializer = tf.lookup.KeyValueTensorInitializer(
                tf.constant(values, tf.string), tf.range(len(values), dtype=tf.int64)
            )
            self._tables[key] = tf.lookup.StaticHashTable(initializer, default_value=UNK_ID)
        self.words = tf.constant(self.tokens["words"], tf.string)

    @classmethod
    def load(cls, vocab_dir: str, max_words: int = 0) -> "Vocabularies":
        tokens = {name: read_vocab_file(os.path.join(vocab_dir, f"{name}.txt")) for name in VOCAB_NAMES}
        if max_words:
            tokens["words"] = tokens["words"][:max_words]
        return cls(tokens)

    def size(self, name: str) -> int:
        return len(self.tokens[name])

    def lookup(self, name: str, strings: tf.Tensor) -> tf.Tensor:
        ids = tf.cast(self._tables[name].lookup(strings), tf.int32)
        if name != "words":  # empty entity/group means "none", not unknown
            ids = tf.where(tf.equal(strings, ""), tf.constant(NONE_ID, tf.int32), ids)
        return ids

    def to_words(self, ids: tf.Tensor) -> tf.Tensor:
        return tf.gather(self.words, ids)


@dataclasses.dataclass
class InputConfig:
    batch_size: int = 64
    bucket_boundaries: Sequence[int] = (16, 24, 32, 48, 64, 96, 128, 256, 512)
    max_position: int = 30
    max_target_length: int = 0  # 0 = keep whole targets (use TBPTT for long ones)
    max_records: int = 0  # 0 = keep every record
    max_source_length: int = 0  # text form: 0 = whole sources
    expand_references: bool = False  # training: one example per reference
    shuffle_buffer: int = 10000
    shuffle_attributes: bool = False  # training: each table's values in a new random order
    repeat_by_table_size: Sequence[int] = ()  # training: reads of a table of n values, by n
    unknown_value_words: float = 0.0  # training: share of a table's value words made <unk>
    unknown_word_alpha: float = 0.0  # training: + alpha / (alpha + count) for each word
    vocab: Optional[str] = None  # the vocabularies' directory (word counts); default <split>/vocab
    drop_remainder: bool = False
    cache_max_mb: int = 16  # files this small: training examples cached, every set read in content order


def records_features(vocabs: Vocabularies, parsed: Dict[str, tf.Tensor], max_position: int) -> Dict[str, tf.Tensor]:
    """Record tensors of ONE table (used by training and by the SavedModel)."""
    values = parsed[schema.RECORD_VALUE]
    clip = lambda x: tf.clip_by_value(tf.cast(x, tf.int32), 1, max_position)  # noqa: E731
    return {
        "record_field": vocabs.lookup("fields", parsed[schema.RECORD_FIELD]),
        "record_value": vocabs.lookup("words", values),
        "record_pos_start": clip(parsed[schema.RECORD_POS_START]),
        "record_pos_end": clip(parsed[schema.RECORD_POS_END]),
        "record_entity": vocabs.lookup("entities", parsed[schema.RECORD_ENTITY]),
        "record_group": vocabs.lookup("groups", parsed[schema.RECORD_GROUP]),
        "record_mask": tf.ones_like(values, tf.bool),
        "record_value_text": values,
    }


def target_features(vocabs: Vocabularies, tokens: tf.Tensor, copy_mask: tf.Tensor) -> Dict[str, tf.Tensor]:
    """Decoder inputs/labels of one target; copy_mask [T, R] gets an all-zero </s> row."""
    ids = vocabs.lookup("words", tokens)
    bos, eos = tf.constant([BOS_ID], tf.int32), tf.constant([EOS_ID], tf.int32)
    num_records = tf.shape(copy_mask)[1]
    return {
        "target_in": tf.concat([bos, ids], 0),
        "target_out": tf.concat([ids, eos], 0),
        "target_mask": tf.ones([tf.size(ids) + 1], tf.bool),
        "copy_mask": tf.concat([copy_mask, tf.zeros([1, num_records], tf.float32)], 0),
    }


def _copy_mask_from_alignment(alignment: tf.RaggedTensor, num_records: tf.Tensor) -> tf.Tensor:
    rows = tf.cast(alignment.value_rowids(), tf.int64)
    cols = tf.cast(alignment.flat_values, tf.int64)
    shape = tf.stack([tf.cast(alignment.nrows(), tf.int64), tf.cast(num_records, tf.int64)])
    coords = tf.stack([rows, cols], axis=1)
    return tf.scatter_nd(coords, tf.ones_like(cols, tf.float32), shape)


def _copy_mask_by_equality(tokens: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.equal(tokens[:, None], values[None, :]), tf.float32)


def shuffle_attributes(features: Dict[str, tf.Tensor], seed: Optional[int] = None) -> Dict[str, tf.Tensor]:
    """ONE example with its table's values (a field's words, which start at p+ = 1) in a
    random order, the words of a value kept together and in order: every ``record_*``
    tensor, the copy mask's record axis and the content plan's record indices follow."""
    if "record_pos_start" not in features:
        raise ValueError("data.shuffle_attributes: this example form has no table records to shuffle")
    start = tf.equal(features["record_pos_start"], 1)
    value = tf.cumsum(tf.cast(start, tf.int32)) - 1  # [R] which value each record belongs to
    values = tf.maximum(tf.reduce_max(value) + 1, 0)  # 0 for a table without records
    rank = tf.argsort(tf.random.uniform([values], seed=seed))  # a value's new place
    order = tf.argsort(tf.gather(rank, tf.maximum(value, 0)), stable=True)  # stable: words keep their order
    out = dict(features)
    for key, tensor in features.items():
        if key.startswith("record_"):
            out[key] = tf.gather(tensor, order)
    out["copy_mask"] = tf.gather(features["copy_mask"], order, axis=1)
    new_index = tf.math.invert_permutation(order)
    out["content_plan"] = tf.gather(new_index, features["content_plan"])
    return out


def counts_path(name: str, vocab: Optional[str], train: Optional[str]) -> str:
    """Where `name`'s counts file is: beside the vocabularies in use (`vocab`; a run directory
    keeps a copy, so export and a TFX Trainer, whose splits are file patterns, find them), else
    the training split's vocab/ (run directories written before the copy)."""
    dirs = [d for d in (vocab, train and os.path.join(train, "vocab")) if d]
    paths = [os.path.join(d, name + COUNTS_SUFFIX) for d in dirs]
    return next((path for path in paths if tf.io.gfile.exists(path)), paths[0] if paths else "")


def read_counts(path: str) -> Dict[str, int]:
    """A counts file `prepare` writes beside a vocabulary (vocab/<name>.counts.tsv, one
    "token<TAB>count" per line) -> token -> count."""
    counts = {}
    with tf.io.gfile.GFile(path) as handle:
        for line_number, line in enumerate(handle, 1):
            token, _, count = line.rstrip("\n").rpartition("\t")
            if not token:
                continue
            try:
                counts[token] = int(count)
            except ValueError:
                raise ValueError(f"{path}:{line_number}: count {count!r} is not an integer") from None
    return counts


def word_hiding_rates(vocabs: Vocabularies, path: str, alpha: float) -> tf.Tensor:
    """[V] float32: alpha / (alpha + count(w)) for each word id, the frequency-aware word
    dropout of Kiperwasser and Goldberg (2016): rare words are hidden often, common ones
    seldom. Words without a count (the special symbols) are never hidden."""
    if not tf.io.gfile.exists(path):
        raise ValueError(f"data.unknown_word_alpha: no word counts {path} (`tablegen prepare` writes them "
                         "beside the vocabulary)")
    counts = read_counts(path)
    return tf.constant([alpha / (alpha + counts[w]) if w in counts else 0.0 for w in vocabs.tokens["words"]],
                       tf.float32)


def unknown_value_words(features: Dict[str, tf.Tensor], rate: float, seed: Optional[int] = None,
                        word_rates: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
    """ONE example with each in-vocabulary word of its table's values made <unk> with
    probability ``rate`` (plus ``word_rates[word]`` when given), by word type: in
    ``record_value`` and in the target alike, as if the vocabulary lacked the word. The word's
    text stays (``record_value_text``), so a target occurrence is then learnt as a copy, as an
    out-of-vocabulary word is at test time."""
    if "record_value" not in features:
        raise ValueError("data.unknown_value_words / unknown_word_alpha: this example form has no table values")
    values = features["record_value"]
    types, _ = tf.unique(values)
    rates = rate + (tf.gather(word_rates, types) if word_rates is not None else 0.0)
    hidden = tf.boolean_mask(types, (types > UNK_ID) & (tf.random.uniform(tf.shape(types), seed=seed) < rates))

    def hide(ids):
        return tf.where(tf.reduce_any(tf.equal(ids[:, None], hidden[None, :]), -1), UNK_ID, ids)

    out = dict(features)
    for key in ("record_value", "target_in", "target_out"):
        out[key] = hide(features[key])
    return out


def table_size(features: Dict[str, tf.Tensor]) -> tf.Tensor:
    """ONE example's number of table values (a value's words start at p+ = 1)."""
    if "record_pos_start" not in features:
        raise ValueError("data.repeat_by_table_size: this example form has no table records to count")
    return tf.reduce_sum(tf.cast(tf.equal(features["record_pos_start"], 1), tf.int32))


def repeat_by_table_size(dataset: tf.data.Dataset, repeats: Sequence[int]) -> tf.data.Dataset:
    """Each example ``repeats[n]`` times in a row for a table of n values (the last entry for
    larger tables); a shuffle after it spreads the copies over the epoch."""
    if any(count < 0 for count in repeats):
        raise ValueError(f"data.repeat_by_table_size: counts must be >= 0, got {list(repeats)}")
    counts = tf.constant(list(repeats), tf.int64)

    def copies(features):
        size = tf.minimum(tf.cast(table_size(features), tf.int64), len(repeats) - 1)
        return tf.data.Dataset.from_tensors(features).repeat(counts[size])

    return dataset.flat_map(copies)


class ExampleParser:
    """Serialized tf.Example -> per-example feature dicts (see CONTRACT.md)."""

    def __init__(self, vocabs: Vocabularies, config: InputConfig):
        self.vocabs = vocabs
        self.config = config

    def parse(self, serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
        return tf.io.parse_single_example(serialized, schema.feature_spec())

    def features(self, parsed, tokens: tf.Tensor, copy_mask: tf.Tensor) -> Dict[str, tf.Tensor]:
        config = self.config
        records = records_features(self.vocabs, parsed, config.max_position)
        if config.max_records:
            records = {k: v[: config.max_records] for k, v in records.items()}
            copy_mask = copy_mask[:, : config.max_records]
        if config.max_target_length:
            tokens = tokens[: config.max_target_length]
            copy_mask = copy_mask[: config.max_target_length]
        features = dict(records)
        features["example_id"] = parsed[schema.EXAMPLE_ID]
        features.update(target_features(self.vocabs, tokens, copy_mask))
        plan = tf.cast(parsed[schema.CONTENT_PLAN], tf.int32)
        if config.max_records:
            plan = tf.boolean_mask(plan, plan < config.max_records)
        features["content_plan"] = plan
        features["content_plan_mask"] = tf.ones_like(plan, tf.bool)
        return features

    def primary(self, serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
        parsed = self.parse(serialized)
        tokens = parsed[schema.TARGET_TOKENS]
        copy_mask = _copy_mask_from_alignment(parsed[schema.COPY_INDICES], tf.size(parsed[schema.RECORD_VALUE]))
        return self.features(parsed, tokens, copy_mask)

    def per_reference(self, serialized: tf.Tensor) -> tf.data.Dataset:
        """One element per reference (multi-reference training data)."""
        parsed = self.parse(serialized)
        references = reference_token_strings(parsed)

        def one(reference):
            tokens = tf.strings.split(reference, " ")
            mask = _copy_mask_by_equality(tokens, parsed[schema.RECORD_VALUE])
            return self.features(parsed, tokens, mask)

        return tf.data.Dataset.from_tensor_slices(references).map(one)


def reference_token_strings(parsed) -> tf.Tensor:
    """Space-joined reference tokens of a parsed example; the target when it has none."""
    references = parsed[schema.REFERENCE_TOKENS]
    return tf.cond(
        tf.size(references) > 0,
        lambda: references,
        lambda: tf.expand_dims(tf.strings.reduce_join(parsed[schema.TARGET_TOKENS], separator=" "), 0),
    )


PADDING_VALUES = {"content_plan": -1, "labels": -1, "dep_labels": -1, "dep_heads": -1}


def padding_values(element_spec) -> Dict[str, tf.Tensor]:
    values = {}
    for key, spec in element_spec.items():
        default = PADDING_VALUES.get(key)
        if default is None:
            default = {tf.bool: False, tf.string: ""}.get(spec.dtype, 0)
        values[key] = tf.constant(default, spec.dtype)
    return values


def list_files(file_pattern: str) -> List[str]:
    pattern = file_pattern
    if tf.io.gfile.isdir(file_pattern):
        pattern = os.path.join(file_pattern, "examples-*.tfrecord.gz")
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {pattern}")
    return files


def _fits_cache(files: Sequence[str], cache_max_mb: int) -> bool:
    """Whether parsed examples fit the in-memory cache (they take ~25x their gzipped size)."""
    if cache_max_mb <= 0:
        return False
    size = sum(tf.io.gfile.stat(path).length for path in files)
    return size <= cache_max_mb * 2**20


def _canonical_key(record: bytes) -> bytes:
    """A key of the example's content: protobuf does not fix the order of a map's entries on
    the wire, so the same tf.train.Example is written as different bytes by different
    processes (two pipeline runs wrote all 42,061 E2E examples with other bytes); its
    deterministic re-serialisation is the same everywhere."""
    example = tf.train.Example.FromString(record)
    return hashlib.sha1(example.SerializeToString(deterministic=True)).digest()


def _records_in_canonical_order(files: Sequence[str]) -> tf.data.Dataset:
    """The records of ``files`` ordered by their content. A Beam job with several workers
    writes the same examples in a run-dependent order, and a seeded shuffle of the files'
    order then gave other batches (another model) from the same data; from this order the
    seeded shuffle is the same on every run and machine. Small corpora only (the in-memory
    cache's bound): larger ones are streamed in the files' order."""
    records = []
    for chunk in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(4096):
        records.extend(chunk.numpy().tolist())
    records.sort(key=_canonical_key)
    return tf.data.Dataset.from_tensor_slices(tf.constant(records, dtype=tf.string, shape=[len(records)]))


def make_dataset(
    file_pattern: str,
    vocabs: Vocabularies,
    config: InputConfig,
    training: bool,
    seed: Optional[int] = None,
    parser=None,
) -> tf.data.Dataset:
    """Batches of padded features (``parser``: the example form's, default the table
    form's); training shuffles, repeating is left to the caller."""
    files = list_files(file_pattern)
    parser = parser or ExampleParser(vocabs, config)
    shuffle = training and config.shuffle_buffer
    in_memory = _fits_cache(files, config.cache_max_mb)
    # Validation sets come in the canonical order too: Beam shards them differently on each
    # run, and their batches (the validation loss's means, the decoded batches' shapes) should not.
    if in_memory and (shuffle or not training):
        dataset = _records_in_canonical_order(files)
    else:
        dataset = tf.data.TFRecordDataset(files, compression_type="GZIP", num_parallel_reads=tf.data.AUTOTUNE)
    if config.expand_references:  # shuffled by table, so a table's references stay together
        if training and config.repeat_by_table_size:
            raise ValueError("data.repeat_by_table_size: not with data.expand_references (count rows, not tables)")
        if shuffle:
            dataset = dataset.shuffle(config.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.flat_map(parser.per_reference)
    else:
        dataset = dataset.map(parser.primary, num_parallel_calls=tf.data.AUTOTUNE)
        if training and in_memory:
            # Parsing costs ~13 % of a small model's training step on 2 cores: do it once.
            dataset = dataset.cache()
        if training and config.repeat_by_table_size:  # after the cache, before the shuffle
            dataset = repeat_by_table_size(dataset, config.repeat_by_table_size)
        if shuffle:  # after the ordered map: the same permutation as shuffling the records
            dataset = dataset.shuffle(config.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if training and config.shuffle_attributes:  # after the cache: a new order every epoch
        dataset = dataset.map(lambda features: shuffle_attributes(features, seed))
    if training and (config.unknown_value_words or config.unknown_word_alpha):  # after the cache: new words every epoch
        word_rates = None
        if config.unknown_word_alpha:
            counts = counts_path("words", config.vocab, file_pattern)
            word_rates = word_hiding_rates(vocabs, counts, config.unknown_word_alpha)
        dataset = dataset.map(
            lambda features: unknown_value_words(features, config.unknown_value_words, seed, word_rates))
    padding = padding_values(dataset.element_spec)
    boundaries = list(config.bucket_boundaries)
    dataset = dataset.bucket_by_sequence_length(
        element_length_func=lambda features: tf.shape(features["target_out"])[0],
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[config.batch_size] * (len(boundaries) + 1),
        padding_values=padding,
        drop_remainder=config.drop_remainder,
        pad_to_bucket_boundary=False,
    )
    return dataset.prefetch(tf.data.AUTOTUNE)
