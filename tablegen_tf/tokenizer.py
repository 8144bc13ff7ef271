"""The one tokenizer of tablegen: TensorFlow / tensorflow-text ops only.

The Beam jobs tokenize raw text and table values with it, and the exported
SavedModel runs the very same graph, so training and serving cannot tokenize
differently. Policy:

* Unicode NFC normalisation (NFKC would rewrite symbols such as "½").
* Lower-casing is a per-corpus choice (``lowercase``); default keeps case so
  names can be copied verbatim and metrics decide on case themselves.
* Punctuation is split off words, but numbers stay whole ("10.50", "1,000",
  "3:45", "1969-09-07"), as do hyphenated/underscored words ("award-winning",
  "T.J._McConnell"), abbreviations ("u.s.", "Jr.") and PTB escapes ("-lrb-", "``");
  English clitics are split the PTB way ("Spain's" -> "Spain 's").
* A range after a currency sign is split: "£20-25" -> "£ 20 - 25", as the pre-tokenized
  E2E files write it, so the challenge's raw CSV (dev, test, served tables) and its aligned
  training files give the same tokens (before, "20-25" was a token training never showed).

Already tokenized corpora (WikiBio, E2E aligned) are therefore (nearly) fixed points: see
tokenizer_test.py for the measured rate.
"""

from __future__ import annotations

import functools
from typing import Iterable, List, Sequence

import tensorflow as tf
import tensorflow_text as tf_text

from tablegen_tf.config import TokenizerConfig  # noqa: F401  (re-exported: the tokenizer's config)

_WORD = r"[\p{L}\p{N}]"
_ABBREVIATIONS = (
    "mr|mrs|ms|dr|st|jr|sr|no|vs|mt|ft|co|inc|ltd|gen|col|lt|sgt|rev|prof|gov|sen|rep|"
    "jan|feb|mar|apr|aug|sep|sept|oct|nov|dec|est|approx|dept|univ|ave|blvd"
)
# Leftmost-first alternation (RE2): earlier alternatives win.
TOKEN_PATTERN = "|".join(
    [
        r"-[lr][rsc]b-",  # PTB bracket escapes
        r"<[A-Za-z_]+>",  # special tokens such as <unk>
        r"``|''|--+|\.\.+",  # PTB quotes, dashes, ellipses
        # entity names joined by underscores (RotoWire): one token, "Otto_Porter_Jr." too
        _WORD + r"[\p{L}\p{N}_.'’-]*_(?i:jr|sr)\.",
        _WORD + r"[\p{L}\p{N}_.'’-]*_[\p{L}\p{N}_.'’-]*" + _WORD,
        r"\p{L}+(?:\.\p{L}+)+\.",  # u.s. ph.d. T.J.
        r"(?i:" + _ABBREVIATIONS + r")\.",
        r"\p{N}{1,3}(?:,\p{N}{3})+(?:\.\p{N}+)?",  # 1,000 / 12,500.5
        r"\.\p{N}+",  # .500
        # words and numbers with inner connectors: 4.5, 3:45, r&b, co-wrote, o'neill
        _WORD + r"+(?:[-'’.&/:]" + _WORD + r"+)*",
        r"'(?i:s|re|ve|ll|d|m|t)\b",  # clitics left after the split below
        r"\S",
    ]
)
# Whitespace words made only of letters/digits, of one symbol, or an initial
# ("j.") are already tokens; only the rest go through the (slow) full pattern.
SIMPLE_WORD_PATTERN = r"[\p{L}\p{N}]+|[^\p{L}\p{N}\s]|\p{L}\."
_CLITIC_SPLITS = (
    (r"(\p{L})((?i:n't))\b", r"\1 \2"),
    (r"(\p{L})('(?i:s|re|ve|ll|d|m))\b", r"\1 \2"),
)
# A price range's hyphen as a token of its own: "£20-25" -> "£20 - 25" (then "£ 20 - 25").
_CURRENCY_RANGE = (r"([£$€¥]\p{N}[\p{N}.,]*)-(\p{N})", r"\1 - \2")
_DETOKENIZE_REPLACEMENTS = (
    (r"-lrb-", "("),
    (r"-rrb-", ")"),
    (r"-lsb-", "["),
    (r"-rsb-", "]"),
    (r"-lcb-", "{"),
    (r"-rcb-", "}"),
    (r"``|''", '"'),
    # no space before closing punctuation and clitics ("'t": E2E's files split "isn 't")
    (r" ([.,;:!?%)\]}]|'s|'re|'ve|'ll|'d|'m|n't|'t)(\s|$)", r"\1\2"),
    (r" ([.,;:!?%)\]}]|'s|'re|'ve|'ll|'d|'m|n't|'t)(\s|$)", r"\1\2"),
    # no space after opening brackets and currency signs
    (r"([(\[{$£€#]) ", r"\1"),
    # hyphens that pre-tokenized corpora split off ("family - friendly", "20 - 25")
    (r"([\p{L}\p{N}]) - ([\p{L}\p{N}])", r"\1-\2"),
)


class Tokenizer(tf.Module):
    """Tokenizes and detokenizes batches of strings inside a TF graph."""

    def __init__(self, config: TokenizerConfig | None = None, name: str = "tokenizer"):
        super().__init__(name=name)
        self.config = config or TokenizerConfig()

    def normalize(self, text: tf.Tensor) -> tf.Tensor:
        text = tf_text.normalize_utf8(text, self.config.normalization)
        if self.config.lowercase:
            text = tf_text.case_fold_utf8(text)
        for pattern, rewrite in (*_CLITIC_SPLITS, _CURRENCY_RANGE):
            text = tf.strings.regex_replace(text, pattern, rewrite)
        return text

    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """[batch] strings -> [batch, (tokens)] ragged strings."""
        text = self.normalize(tf.convert_to_tensor(text, tf.string))
        words = tf.strings.split(text)  # [batch, (words)]; the pattern never spans whitespace
        flat = words.flat_values
        simple = tf.strings.regex_full_match(flat, SIMPLE_WORD_PATTERN)
        simple_index = tf.where(simple)[:, 0]
        complex_index = tf.where(tf.logical_not(simple))[:, 0]
        simple_pieces = tf.RaggedTensor.from_tensor(tf.expand_dims(tf.gather(flat, simple_index), 1))
        complex_pieces = tf_text.regex_split(
            tf.gather(flat, complex_index),
            delim_regex_pattern=TOKEN_PATTERN,
            keep_delim_regex_pattern=TOKEN_PATTERN,
        )
        pieces = tf.concat([simple_pieces, complex_pieces], axis=0)
        inverse = tf.math.invert_permutation(tf.concat([simple_index, complex_index], axis=0))
        pieces = tf.gather(pieces, inverse)  # [words, (pieces)] back in word order
        return words.with_flat_values(pieces).merge_dims(1, 2)

    def detokenize(self, tokens: tf.RaggedTensor) -> tf.Tensor:
        """[batch, (tokens)] ragged strings -> [batch] readable strings."""
        text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
        for pattern, rewrite in _DETOKENIZE_REPLACEMENTS:
            text = tf.strings.regex_replace(text, pattern, rewrite)
        return text


@functools.lru_cache(maxsize=8)
def _compiled(config: TokenizerConfig):
    tokenizer = Tokenizer(config)
    tokenize = tf.function(
        tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)]
    )
    detokenize = tf.function(
        tokenizer.detokenize,
        input_signature=[tf.RaggedTensorSpec([None, None], tf.string, ragged_rank=1)],
    )
    return tokenize, detokenize


def tokenize_batch(texts: Sequence[str], config: TokenizerConfig | None = None) -> List[List[str]]:
    """Python convenience for the Beam jobs: one graph call per batch."""
    if not texts:
        return []
    tokenize, _ = _compiled(config or TokenizerConfig())
    ragged = tokenize(tf.constant(list(texts), tf.string))
    flat = ragged.flat_values.numpy()
    splits = ragged.row_splits.numpy()
    return [
        [token.decode("utf-8") for token in flat[splits[i] : splits[i + 1]]]
        for i in range(len(texts))
    ]


def detokenize_batch(token_lists: Iterable[Sequence[str]], config: TokenizerConfig | None = None) -> List[str]:
    token_lists = [list(tokens) for tokens in token_lists]
    if not token_lists:
        return []
    _, detokenize = _compiled(config or TokenizerConfig())
    ragged = tf.ragged.constant(token_lists, dtype=tf.string, ragged_rank=1) if any(
        token_lists
    ) else tf.RaggedTensor.from_row_lengths(tf.constant([], tf.string), [0] * len(token_lists))
    return [text.decode("utf-8") for text in detokenize(ragged).numpy()]
