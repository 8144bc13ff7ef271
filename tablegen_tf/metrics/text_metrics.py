"""Corpus-level text metrics: BLEU, NIST (E2E-challenge setting) and ROUGE.

Nothing here re-implements a metric; this module only prepares the inputs for
well-kept libraries the way the official E2E evaluation script
(``measure_scores.py`` of the E2E NLG challenge, which runs
``mteval-v13a-sig.pl``) does.

BLEU -- ``sacrebleu.metrics.BLEU(lowercase=True, tokenize='13a')``, default
    ``smooth_method='exp'``, on detokenized text with *all* references of
    each item.  References are transposed into sacrebleu's list-of-streams
    format; an item with fewer references than the maximum is padded with
    ``None``.  What was checked (sacrebleu 2.6.0 source, and against the
    scoring subroutines of the E2E script's ``mteval-v13a-sig.pl``):

    * ``Metric._cache_references`` drops ``None`` entries per segment
      (``[x for x in refs if x is not None]``), so a padded item is scored
      against exactly its own references.  The empty string is *not* dropped:
      it would count as a 0-word reference for the brevity penalty.  Hence we
      pad with ``None``, never ``""``, and also turn references that are empty
      after 13a tokenization into ``None``.  The E2E script pads with ``''``
      but its modified mteval (``mteval-v13a-sig.pl``) skips empty references
      (``brevity_penalty_closest`` returns early on a 0 length, and ``$nrefs``
      counts only non-empty ones), i.e. the same semantics as sacrebleu's
      ``None``.
    * Brevity penalty: ``BLEU._get_closest_ref_len`` picks the reference
      length closest to the hypothesis length, the shorter one on ties;
      mteval-v13a's default ``--brevity-penalty closest``
      (``brevity_penalty_closest``) does exactly the same, and both sum these
      per-segment lengths over the corpus.
    * Zero n-gram matches of some order: sacrebleu's ``exp`` smoothing is
      mteval-v13a's default ``bleu_score`` smoothing (1/2^k per zero order).
    * 13a tokenization = mteval-v13a's default ``tokenization`` sub.
    * Numerically: the scoring subs of ``mteval-v13a-sig.pl`` (tokenization,
      score_segment, brevity_penalty_closest, bleu_score, nist_score) run
      with Perl on 80 random corpora of 5-60 items with 1-6 references (some
      blank), fed the way ``measure_scores.py`` pads them, give the same 13a
      tokens and BLEU x 100 equal to ``corpus_scores``' BLEU within the 1e-8
      print precision.
    Known, degenerate-only differences: mteval lowercases ASCII only
    (``tr/[A-Z]/[a-z]/``) while sacrebleu uses ``str.lower()``; a corpus with
    no matching unigram at all gets 0.0 from sacrebleu but a tiny smoothed
    score from mteval; a corpus whose hypotheses are all shorter than 4
    tokens gets 0.0 from sacrebleu.

NIST -- the mteval-v13a definition (Doddington 2002), implemented in ``nist_mteval`` on
    the very same tokens sacrebleu scores (13a tokenizer, same lowercasing), all references
    of each item, n-grams up to ``nist_order`` (4 by default; the E2E challenge and mteval
    report 5):  information weights info(w1..wn) = log2(count(w1..wn-1) / count(w1..wn))
    over every reference of the corpus (count of the empty prefix = reference words);
    per item, hypothesis n-gram counts clipped by their maximum count in any one reference;
    NIST = sum_n (sum of matched info_n / hypothesis n-grams_n) x exp(-beta log^2 min(1,
    L_hyp / L_ref)), beta = -ln 0.5 / ln^2 1.5, L_ref = the items' average reference
    lengths summed (mteval: all reference words / number of reference sets, the same when
    every item has as many references).  NLTK's ``corpus_nist`` (used before) credits each
    item against its single best reference and gave 0.34-0.84 x mteval on E2E.

WebNLG challenge BLEU -- ``webnlg_challenge_bleu``: the WebNLG 2017 challenge scored
    lowercased text tokenised by its baseline's ``' '.join(re.split('(\\W)', text))`` (every
    non-word character, Unicode-aware, is a token: "1.5" -> "1 . 5", "Spain's" -> "spain ' s",
    "award-winning" -> "award - winning") with ``multi-bleu.perl -lc`` over all references of
    each entry.  multi-bleu.perl is plain BLEU-4 on those tokens: no smoothing, the closest
    reference length (shorter on ties) for the brevity penalty -- i.e. sacrebleu with
    ``tokenize='none', smooth_method='none'`` on the pre-tokenised text.  The challenge padded
    entries with fewer references with empty lines, which multi-bleu.perl counts as 0-word
    references for the brevity penalty; we drop them (``None``), as for E2E above.  The split
    differs from 13a mostly on numbers and hyphenated words, which 13a keeps whole.

ROUGE -- ``rouge_score.rouge_scorer.RougeScorer(['rouge4', 'rougeL'])``,
    F-measure of the best reference per item (``score_multi``: max F-measure
    over the references, per ROUGE type), averaged over items.  Scale 0..1.
    rouge-score's tokenizer lowercases and replaces every character outside
    ``[a-z0-9]`` by a space, so punctuation and non-ASCII letters are dropped
    ("café" -> "caf"); ``lowercase`` has no effect on ROUGE.  This rougeL is
    not the E2E script's ROUGE_L (pycocoevalcap, beta = 1.2 over P/R maxima).
"""

from __future__ import annotations

import collections
import functools
import math
import re
from typing import Dict, List, Optional, Sequence

from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU

ROUGE_TYPES = ("rouge4", "rougeL")


@functools.lru_cache(maxsize=2)
def bleu_metric(lowercase: bool) -> BLEU:
    """The BLEU `tablegen evaluate` reports (sacrebleu, 13a tokenizer; defaults otherwise:
    smooth_method='exp', max_ngram_order=4), e.g. for sacrebleu's paired significance tests."""
    return BLEU(lowercase=lowercase, tokenize="13a")


@functools.lru_cache(maxsize=1)
def plain_bleu_metric() -> BLEU:
    """multi-bleu.perl's BLEU (the WebNLG challenge's): pre-tokenised input, no smoothing."""
    # force: the text is tokenised on purpose (sacrebleu would warn it looks undetokenised)
    return BLEU(lowercase=False, tokenize="none", smooth_method="none", force=True)


@functools.lru_cache(maxsize=1)
def _rouge_scorer() -> rouge_scorer.RougeScorer:
    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=False)


def tokenize_13a(text: str, lowercase: bool = True) -> List[str]:
    """The tokens sacrebleu's BLEU scores for ``text`` (its own 13a tokenizer).

    Mirrors ``BLEU._preprocess_segment``: optional ``str.lower()``, strip
    trailing whitespace, 13a tokenization, split on whitespace.
    """
    metric = bleu_metric(lowercase)
    if lowercase:
        text = text.lower()
    return metric.tokenizer(text.rstrip()).split()


_NON_WORD_SPLIT = re.compile(r"(\W)")


def webnlg_challenge_tokens(text: str) -> List[str]:
    """The WebNLG 2017 challenge's tokens of ``text``: lowercased, split at every non-word character."""
    return " ".join(_NON_WORD_SPLIT.split(text.lower())).split()


def webnlg_challenge_bleu(hypotheses: List[str], references: List[List[str]]) -> float:
    """Corpus BLEU-4 as the WebNLG 2017 challenge computed it (see the module doc), 0..100."""
    _check_inputs(hypotheses, references)
    hyps = [" ".join(webnlg_challenge_tokens(h)) for h in hypotheses]
    ref_sets = []
    for i, refs in enumerate(references):
        kept = [" ".join(tokens) for tokens in map(webnlg_challenge_tokens, refs) if tokens]
        if not kept:
            raise ValueError(f"item {i} has no non-empty reference")
        ref_sets.append(kept)
    return float(plain_bleu_metric().corpus_score(hyps, reference_streams(ref_sets)).score)


def _check_inputs(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> None:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses must be a list of strings, references a list of lists of strings")
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} reference lists")
    if not hypotheses:
        raise ValueError("corpus_scores needs at least one hypothesis")
    for i, (hyp, refs) in enumerate(zip(hypotheses, references)):
        if not isinstance(hyp, str):
            raise TypeError(f"hypothesis {i} is {type(hyp).__name__}, not str")
        if isinstance(refs, str):
            raise TypeError(f"references[{i}] is a str; wrap single references in a list")
        if any(not isinstance(r, str) for r in refs):
            raise TypeError(f"references[{i}] must contain only strings")


def corpus_scores(
    hypotheses: List[str],
    references: List[List[str]],
    lowercase: bool = True,
    nist_order: int = 4,
) -> Dict[str, float]:
    """BLEU, NIST, ROUGE-4 and ROUGE-L of a corpus with variable-size reference sets.

    Args:
      hypotheses: one detokenized output text per item ("" allowed).
      references: for each item, its detokenized reference texts (>= 1 after
        dropping references that are empty after 13a tokenization).
      lowercase: case-insensitive BLEU/NIST (the E2E setting). ROUGE always
        lowercases.
      nist_order: highest n-gram order of NIST (4 by default; 5 = mteval/E2E).

    Returns:
      ``{"bleu": 0..100, "nist": >= 0, "rouge4": 0..1, "rougeL": 0..1}``.
    """
    _check_inputs(hypotheses, references)
    if nist_order < 1:
        raise ValueError("nist_order must be >= 1")

    # Keep only references with at least one 13a token (E2E semantics, see module doc).
    ref_sets: List[List[str]] = []
    ref_tokens: List[List[List[str]]] = []
    for i, refs in enumerate(references):
        kept = [(r, tokenize_13a(r, lowercase)) for r in refs]
        kept = [(r, toks) for r, toks in kept if toks]
        if not kept:
            raise ValueError(f"item {i} has no non-empty reference")
        ref_sets.append([r for r, _ in kept])
        ref_tokens.append([toks for _, toks in kept])

    return {
        "bleu": _bleu(hypotheses, ref_sets, lowercase),
        "nist": _nist([tokenize_13a(h, lowercase) for h in hypotheses], ref_tokens, nist_order),
        **_rouge(hypotheses, ref_sets),
    }


def reference_streams(ref_sets: Sequence[Sequence[str]]) -> List[List[Optional[str]]]:
    """Per-item reference lists -> sacrebleu streams, ``None``-padded.

    ``streams[k][i]`` is the k-th reference of item i, or ``None`` if item i
    has fewer than k + 1 references.
    """
    max_refs = max((len(refs) for refs in ref_sets), default=0)
    return [[refs[k] if k < len(refs) else None for refs in ref_sets] for k in range(max_refs)]


def _bleu(hypotheses: Sequence[str], ref_sets: Sequence[Sequence[str]], lowercase: bool) -> float:
    streams = reference_streams(ref_sets)
    return float(bleu_metric(lowercase).corpus_score(list(hypotheses), streams).score)


def _nist(
    hyp_tokens: Sequence[List[str]], ref_tokens: Sequence[List[List[str]]], nist_order: int
) -> float:
    return nist_mteval(hyp_tokens, ref_tokens, nist_order)


NIST_BETA = -math.log(0.5) / math.log(1.5) ** 2  # the penalty is 0.5 at 2/3 of the reference length


def _ngram_counts(tokens: Sequence[str], order: int) -> collections.Counter:
    return collections.Counter(tuple(tokens[i:i + n]) for n in range(1, order + 1) for i in range(len(tokens) - n + 1))


def nist_mteval(hyp_tokens: Sequence[List[str]], ref_tokens: Sequence[List[List[str]]], order: int = 5) -> float:
    """Corpus NIST as mteval-v13a computes it (see the module doc)."""
    reference_counts: collections.Counter = collections.Counter()
    reference_words = 0
    for refs in ref_tokens:
        for ref in refs:
            reference_counts.update(_ngram_counts(ref, order))
            reference_words += len(ref)

    def info(ngram) -> float:  # Doddington 2002, eq. 1
        prefix = reference_counts[ngram[:-1]] if len(ngram) > 1 else reference_words
        return math.log2(prefix / reference_counts[ngram])

    matched_info = [0.0] * (order + 1)
    hyp_ngrams = [0] * (order + 1)
    hyp_length, ref_length = 0, 0.0
    for hyp, refs in zip(hyp_tokens, ref_tokens):
        hyp_length += len(hyp)
        ref_length += sum(len(r) for r in refs) / len(refs)
        clip: collections.Counter = collections.Counter()
        for ref in refs:
            clip |= _ngram_counts(ref, order)  # max count in any one reference
        for ngram, count in _ngram_counts(hyp, order).items():
            hyp_ngrams[len(ngram)] += count
            if ngram in clip:
                matched_info[len(ngram)] += info(ngram) * min(count, clip[ngram])
    score = sum(matched_info[n] / max(hyp_ngrams[n], 1) for n in range(1, order + 1))
    ratio = hyp_length / ref_length if ref_length else 0.0
    penalty = 1.0 if ratio >= 1 else (0.0 if ratio <= 0 else math.exp(-NIST_BETA * math.log(ratio) ** 2))
    return float(score * penalty)


def _rouge(hypotheses: Sequence[str], ref_sets: Sequence[Sequence[str]]) -> Dict[str, float]:
    scorer = _rouge_scorer()
    totals = {t: 0.0 for t in ROUGE_TYPES}
    for hyp, refs in zip(hypotheses, ref_sets):
        best = scorer.score_multi(list(refs), hyp)
        for t in ROUGE_TYPES:
            totals[t] += best[t].fmeasure
    return {t: totals[t] / len(hypotheses) for t in ROUGE_TYPES}
