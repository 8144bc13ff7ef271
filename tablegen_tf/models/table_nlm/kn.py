"""The Kneser-Ney baselines of Lebret et al. 2016 (section 5.2): ``kn`` and ``template-kn``.

* ``kn``: an interpolated Kneser-Ney 5-gram LM over the target words (no table).
* ``template-kn``: the same over templated text, in which every target word that occurs in
  the table is replaced by its field descriptor ``<field>_<p+>`` (first occurrence), e.g.
  ``name_1 name_2 is a food_1 restaurant``. At decoding only vocabulary words and the
  descriptors of this table may be emitted (a descriptor unseen in training gets the LM's
  unknown-word probability); descriptor ``f_p`` is the copy action of the
  record (f, p+), which the featurizer resolves to the table's word.

Estimation and smoothing are NLTK's (``nltk.lm.KneserNeyInterpolated``). Two things are
added for speed, neither changes a number: NLTK's continuation counts scan every n-gram
per call, so they are indexed once (``IndexedKneserNey``); and decoding needs the whole
distribution of a context, which ``distribution`` composes with NLTK's own
``alpha_gamma`` / ``unigram_score`` along NLTK's interpolation recursion
(``InterpolatedLanguageModel.unmasked_score``), cached per context. The test checks it
against ``lm.score`` word by word. The distribution is renormalised over the allowed
outputs (NLTK's KN does not always sum to one; the output domain is the vocabulary, or
vocabulary + this table's descriptors).

Perplexity (``token_nll``): every target token and </s>, over that same renormalised
domain (a template's descriptors are scored as the descriptor, the paper's "*" caveat).

They are not trained by gradient: ``python -m tablegen_tf.models.table_nlm.kn --config
e2e,table_nlm/template-kn --data DIR --out RUN`` fits the LM, writes ``RUN/lm.pkl`` and a
run directory (config.json, vocab/, an empty best/ checkpoint) that ``tablegen evaluate
--model RUN`` and ``tablegen generate`` read like any run: they decode through the shared
beam search with a ``step_fn`` that looks the fitted LM's scores up (``tf.numpy_function``,
so no SavedModel export).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import pickle
import sys
from typing import ClassVar, Dict, List, Sequence

import numpy as np
import tensorflow as tf
from nltk.lm import KneserNeyInterpolated
from nltk.lm.models import InterpolatedLanguageModel
from nltk.lm.preprocessing import padded_everygram_pipeline
from nltk.lm.smoothing import KneserNey

from tablegen_tf.config import Bound, at_least, between
from tablegen_tf.constants import BOS_ID, PAD_ID, UNK_ID
from tablegen_tf.data.table_featurizer import TableFeaturizer
from tablegen_tf.models.base import GenerationModel
from tablegen_tf.models.registry import register_model

LM_FILE = "lm.pkl"
BOS, EOS = "<s>", "</s>"  # nltk's padding symbols are the vocabulary's


@dataclasses.dataclass
class KNConfig:
    """The ``model:`` section of the Kneser-Ney baselines."""

    KIND: ClassVar[str] = "kn"
    BOUNDS: ClassVar[Dict[str, Bound]] = {"order": at_least(1), "discount": between(0, 1)}
    name: str = "kn"
    order: int = 5
    discount: float = 0.75  # NLTK's KN discount (in [0, 1]); 0.75 is the usual KN value
    lm_path: str = ""  # the fitted LM (written by `python -m tablegen_tf.models.table_nlm.kn`)


class IndexedKneserNey(KneserNey):
    """NLTK's KneserNey with its continuation counts indexed once (same values)."""

    def __init__(self, vocabulary, counter, order, discount=0.1, **kwargs):
        super().__init__(vocabulary, counter, order, discount, **kwargs)
        self._index = None

    def _build_index(self):
        word_counts: Dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
        totals: Dict[tuple, int] = collections.Counter()
        for level in range(2, self._order + 1):
            for prefix, counts in self.counts[level].items():
                suffix = tuple(prefix[1:])
                for word, count in counts.items():
                    if count > 0:
                        word_counts[suffix][word] += 1
                        totals[suffix] += 1
        self._index = (word_counts, totals)

    def _continuation_counts(self, word, context=tuple()):
        if self._index is None:
            self._build_index()
        word_counts, totals = self._index
        context = tuple(context)
        return word_counts[context][word], totals[context]


class IndexedKneserNeyInterpolated(InterpolatedLanguageModel):
    """``KneserNeyInterpolated`` with the indexed estimator."""

    def __init__(self, order, discount=0.1, **kwargs):
        if not (0 <= discount <= 1):
            raise ValueError("Discount must be between 0 and 1 for probabilities to sum to unity.")
        super().__init__(IndexedKneserNey, order, params={"discount": discount, "order": order}, **kwargs)


def fit_lm(sentences: Sequence[Sequence[str]], order: int, discount: float, indexed: bool = True):
    """An interpolated KN LM (NLTK) over token sentences, padded with <s> / </s>."""
    cls = IndexedKneserNeyInterpolated if indexed else KneserNeyInterpolated
    lm = cls(order, discount=discount)
    ngrams, vocabulary = padded_everygram_pipeline(order, [list(s) for s in sentences])
    lm.fit(ngrams, vocabulary)
    return lm


class Distributions:
    """Whole next-word distributions of an NLTK interpolated LM over a word list, cached by context."""

    def __init__(self, lm, words: Sequence[str]):
        self.lm = lm
        self.words = list(words)
        self.lm_words = [lm.vocab.lookup(w) for w in self.words]  # OOV -> nltk's <UNK>
        self.position = collections.defaultdict(list)
        for i, w in enumerate(self.lm_words):
            self.position[w].append(i)
        self.unigram = np.array([lm.estimator.unigram_score(w) for w in self.lm_words], np.float64)
        self.cache: Dict[tuple, np.ndarray] = {}

    def distribution(self, context: Sequence[str]) -> np.ndarray:
        """[len(words)] P(w | context) = lm.score(w, context) for every word (see the module doc)."""
        context = tuple(self.lm.vocab.lookup(tuple(context)))[-(self.lm.order - 1):] if self.lm.order > 1 else ()
        return self._distribution(context)

    def _distribution(self, context: tuple) -> np.ndarray:
        if not context:
            return self.unigram
        cached = self.cache.get(context)
        if cached is not None:
            return cached
        lower = self._distribution(context[1:])
        counts = self.lm.counts[context]
        if not counts:  # NLTK: no data for this context -> alpha 0, gamma 1
            result = lower
        else:
            estimator = self.lm.estimator
            try:
                _, gamma = estimator.alpha_gamma(next(iter(counts)), context)
                alpha = np.zeros_like(lower)
                for word in counts:
                    if word in self.position:
                        a, _ = estimator.alpha_gamma(word, context)
                        alpha[self.position[word]] = a
                result = alpha + gamma * lower
            except ZeroDivisionError:  # a context no longer n-gram continues: NLTK divides by 0
                result = lower
        if len(self.cache) > 500000:
            self.cache.clear()
        self.cache[context] = result
        return result


class _Unpickler(pickle.Unpickler):
    """LMs fitted by ``python -m`` of this module pickle its classes under ``__main__``."""

    def find_class(self, module, name):
        if module == "__main__" and name in ("IndexedKneserNey", "IndexedKneserNeyInterpolated"):
            return globals()[name]
        return super().find_class(module, name)


def descriptor(field: str, pos_start: int) -> str:
    return f"{field}_{pos_start}"


def template(tokens: Sequence[str], fields: Sequence[str], values: Sequence[str], pos_start: Sequence[int]) -> List[str]:
    """Target tokens with every word that occurs in the table replaced by its descriptor
    (the first record holding it)."""
    first: Dict[str, str] = {}
    for f, v, p in zip(fields, values, pos_start):
        first.setdefault(v, descriptor(f, p))
    return [first.get(t, t) for t in tokens]


@register_model("kn", config=KNConfig, featurizer=TableFeaturizer, fixed={"template": False},
                description="interpolated Kneser-Ney n-gram LM over words (NLTK; Lebret et al. 2016 baseline)")
@register_model("template-kn", config=KNConfig, featurizer=TableFeaturizer, fixed={"template": True},
                description="Kneser-Ney over templates with field descriptors (Lebret et al. 2016 baseline)")
class KNModel(GenerationModel):
    """A fitted NLTK Kneser-Ney LM behind the decoding contract (no trainable weights)."""

    reports_perplexity = True
    xla_decoding_steps = False  # the step looks the LM up with tf.numpy_function

    def __init__(self, words: Sequence[str], fields: Sequence[str], lm, order=5, template=False, **kwargs):
        super().__init__(**kwargs)
        self.order, self.template = order, template
        self.words = list(words)
        self.fields = list(fields)
        self.vocab_size = len(self.words)
        self.lm = lm
        known = set(self.words)
        # template-kn: the descriptors the LM knows are outputs too (columns after the words)
        self.descriptors = sorted(w for w in lm.vocab if w not in known and "_" in w) if template else []
        self.descriptor_column = {d: self.vocab_size + i for i, d in enumerate(self.descriptors)}
        self.dist = Distributions(lm, self.words + self.descriptors)
        self.built = True

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes):
        from tablegen_tf.data.input_pipeline import Vocabularies

        if not config.model.lm_path or not os.path.exists(config.model.lm_path):
            raise FileNotFoundError(f"model.lm_path {config.model.lm_path!r}: no fitted LM; fit it with "
                                    f"`python -m tablegen_tf.models.table_nlm.kn` (it writes the run directory)")
        with open(config.model.lm_path, "rb") as handle:
            lm = _Unpickler(handle).load()
        vocabs = Vocabularies.load(config.data.vocab or os.path.join(config.data.train, "vocab"), config.data.max_words)
        return cls(vocabs.tokens["words"], vocabs.tokens["fields"], lm, order=config.model.order,
                   **dict(family.fixed), name=family.name.replace("-", "_"))

    # === tables -> memory ===

    def encode(self, features, training=False):
        fields = tf.gather(tf.constant(self.fields), tf.convert_to_tensor(features["record_field"]))
        descriptors = tf.strings.join([fields, tf.strings.as_string(features["record_pos_start"])], "_")
        return {"record_value": tf.convert_to_tensor(features["record_value"]),
                "descriptor": tf.where(features["record_mask"], descriptors, "")}

    def initial_decoding_state(self, memory):
        return tf.fill([tf.shape(memory["record_value"])[0], self.order - 1], tf.constant(BOS_ID, tf.int32))

    def _row_log_probs(self, window, descriptors) -> np.ndarray:
        """[n-1] extended ids, [R] descriptor bytes -> [V + R] log-probs over the allowed outputs:
        the vocabulary (not <pad>, <s>) and, for template-kn, this table's descriptors (V + r,
        first record of each); renormalised."""
        context = []
        for i in window:
            i = int(i)
            if i == PAD_ID:
                continue
            context.append(descriptors[i - self.vocab_size].decode() if i >= self.vocab_size else self.words[i])
        probs = self.dist.distribution(context)
        out = np.zeros(self.vocab_size + len(descriptors))
        out[: self.vocab_size] = probs[: self.vocab_size]
        out[[PAD_ID, BOS_ID]] = 0.0
        if self.template:
            seen = set()
            for r, d in enumerate(descriptors):
                d = d.decode()
                if d and d not in seen:  # a descriptor the LM never saw is scored as its unknown word
                    seen.add(d)
                    out[self.vocab_size + r] = probs[self.descriptor_column.get(d, UNK_ID)]
        with np.errstate(divide="ignore"):
            return np.log(out / out.sum()).astype(np.float32)

    def _log_probs(self, windows, descriptors):
        return np.stack([self._row_log_probs(w, d) for w, d in zip(windows, descriptors)])

    def decoding_step_fn(self, memory):
        def step_fn(prev_ids, step, window):
            window = tf.concat([window[:, 1:], tf.cast(prev_ids, tf.int32)[:, None]], 1)
            log_probs = tf.numpy_function(self._log_probs, [window, memory["descriptor"]], tf.float32, stateful=False)
            width = self.vocab_size + tf.shape(memory["descriptor"])[1]
            return tf.reshape(log_probs, [tf.shape(window)[0], width]), window

        return step_fn

    # === perplexity ===

    def _targets(self, batch):
        """Extended targets: in templates a word of the table is its first record's descriptor."""
        target = tf.convert_to_tensor(batch["target_out"])
        if not self.template:
            return target
        copy_mask = tf.convert_to_tensor(batch["copy_mask"]) > 0
        first = tf.argmax(tf.cast(copy_mask, tf.int32), -1, output_type=tf.int32)
        return tf.where(tf.reduce_any(copy_mask, -1), self.vocab_size + first, target)

    def _batch_nll(self, targets, descriptors, mask):
        total = 0.0
        for row in range(targets.shape[0]):
            window = [BOS_ID] * (self.order - 1)
            first = {}  # records sharing a descriptor (e.g. a repeated WebNLG predicate): its first record
            for r, d in enumerate(descriptors[row]):
                first.setdefault(d, r)
            for t in range(targets.shape[1]):
                if not mask[row, t]:
                    break
                log_probs = self._row_log_probs(window, descriptors[row])
                target = int(targets[row, t])
                if target >= self.vocab_size:
                    target = self.vocab_size + first[descriptors[row][target - self.vocab_size]]
                total -= max(float(log_probs[target]), -50.0)  # a token outside the domain: e^-50
                window = window[1:] + [int(targets[row, t])]
        return np.float32(total), np.float32(mask.sum())

    def token_nll(self, batch):
        memory = self.encode(batch)
        nll, count = tf.numpy_function(self._batch_nll, [self._targets(batch), memory["descriptor"],
                                                         batch["target_mask"]], [tf.float32, tf.float32])
        return tf.reshape(nll, []), tf.reshape(count, [])

    def compute_loss_from_batch(self, batch, training=False):
        if training:
            from tablegen_tf.config import ConfigError

            raise ConfigError(f"model {self.name!r} is fitted by counting, not trained by gradient: "
                              "python -m tablegen_tf.models.table_nlm.kn --config CORPUS,table_nlm/kn --data DIR --out RUN")
        nll, count = self.token_nll(batch)
        return nll / tf.maximum(count, 1.0)


# ----------------------------------------------------------------- fitting (the run directory)


def training_sentences(train_dir: str, featurizer, template_text: bool) -> List[List[str]]:
    from tablegen_tf.data.input_pipeline import list_files

    sentences = []
    for record in tf.data.TFRecordDataset(list_files(train_dir), compression_type="GZIP"):
        example = featurizer.parse_example(record.numpy())
        references = [r.split(" ") for r in example.reference_tokens] or [list(example.target_tokens)]
        for tokens in references:
            if template_text:
                tokens = template(tokens, example.fields, example.values, example.pos_start)
            sentences.append(tokens)
    return sentences


def fit_run(config, out_dir: str) -> str:
    """Fits the config's KN model on data.train; writes a run directory ``out_dir``."""
    from tablegen_tf.config import save_run_config
    from tablegen_tf.models.registry import get_family
    from tablegen_tf.training.trainer import BEST, copy_vocabularies, load_vocabularies, vocab_dir, variables_checkpoint

    family = get_family(config.model.name)
    os.makedirs(out_dir, exist_ok=True)
    vocab = copy_vocabularies(vocab_dir(config), os.path.join(out_dir, "vocab"))
    lm_path = os.path.abspath(os.path.join(out_dir, LM_FILE))
    config = config.replace(data=dataclasses.replace(config.data, vocab=vocab),
                            model=dataclasses.replace(config.model, lm_path=lm_path))
    vocabs = load_vocabularies(config)
    featurizer = family.featurizer(vocabs, config)
    sentences = training_sentences(config.data.train, featurizer, dict(family.fixed)["template"])
    lm = fit_lm(sentences, config.model.order, config.model.discount)
    lm.estimator._build_index()
    with open(lm_path, "wb") as handle:
        pickle.dump(lm, handle, protocol=pickle.HIGHEST_PROTOCOL)
    save_run_config(config, out_dir)
    model = family.build_model(config, {})
    variables_checkpoint(model, step=tf.Variable(0, dtype=tf.int64)).save(os.path.join(out_dir, BEST, "ckpt"))
    return out_dir


def main(argv=None) -> int:
    import time

    from tablegen_tf.config import load_config, parse_overrides

    parser = argparse.ArgumentParser(description="Fit a Kneser-Ney baseline (kn / template-kn) into a run directory")
    parser.add_argument("--config", default=None, help="corpus config(s), e.g. e2e,table_nlm/template-kn")
    parser.add_argument("--data", required=True, help="directory holding the prepared train/ split")
    parser.add_argument("--out", required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    overrides = parse_overrides(args.overrides)
    overrides.setdefault("data", {}).setdefault("train", os.path.abspath(os.path.join(args.data, "train")))
    config = load_config(args.config, overrides)
    start = time.time()
    fit_run(config, args.out)
    print(f"fitted {config.model.name} ({config.model.order}-gram) in {time.time() - start:.1f}s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
