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

NIST -- ``nltk.translate.nist_score.corpus_nist`` (n = ``nist_order``, default
    4: the issue asks for NIST-4; mteval/E2E publish 5-gram NIST, pass 5 for that) on the very same
    tokens sacrebleu scores (sacrebleu's 13a tokenizer object, same
    lowercasing), all references of each item.  NLTK's corpus NIST is *not*
    identical to mteval's with several references: NLTK credits each segment
    against its single best reference and takes the length penalty from that
    reference, whereas mteval clips n-gram counts against the maximum over all
    references and uses the average reference length.  With one reference
    per item both agree (same check as above, to 1e-10); with 1-6 references
    NLTK's value was 0.34-0.84 x mteval's (mean 0.71), so it is not
    comparable with published E2E NIST figures.
    Orders for which no hypothesis has an n-gram are dropped (they contribute
    0 in mteval too; NLTK would divide by zero); all-empty hypotheses give 0.

ROUGE -- ``rouge_score.rouge_scorer.RougeScorer(['rouge4', 'rougeL'])``,
    F-measure of the best reference per item (``score_multi``: max F-measure
    over the references, per ROUGE type), averaged over items.  Scale 0..1.
    rouge-score's tokenizer lowercases and replaces every character outside
    ``[a-z0-9]`` by a space, so punctuation and non-ASCII letters are dropped
    ("café" -> "caf"); ``lowercase`` has no effect on ROUGE.  This rougeL is
    not the E2E script's ROUGE_L (pycocoevalcap, beta = 1.2 over P/R maxima).
"""

from __future__ import annotations

import functools
from typing import Dict, List, Optional, Sequence

from nltk.translate.nist_score import corpus_nist
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU

ROUGE_TYPES = ("rouge4", "rougeL")


@functools.lru_cache(maxsize=2)
def _bleu_metric(lowercase: bool) -> BLEU:
    # Defaults otherwise: smooth_method='exp', max_ngram_order=4.
    return BLEU(lowercase=lowercase, tokenize="13a")


@functools.lru_cache(maxsize=1)
def _rouge_scorer() -> rouge_scorer.RougeScorer:
    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=False)


def tokenize_13a(text: str, lowercase: bool = True) -> List[str]:
    """The tokens sacrebleu's BLEU scores for ``text`` (its own 13a tokenizer).

    Mirrors ``BLEU._preprocess_segment``: optional ``str.lower()``, strip
    trailing whitespace, 13a tokenization, split on whitespace.
    """
    metric = _bleu_metric(lowercase)
    if lowercase:
        text = text.lower()
    return metric.tokenizer(text.rstrip()).split()


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
    return float(_bleu_metric(lowercase).corpus_score(list(hypotheses), streams).score)


def _nist(
    hyp_tokens: Sequence[List[str]], ref_tokens: Sequence[List[List[str]]], nist_order: int
) -> float:
    # NLTK divides by the corpus count of hypothesis n-grams of each order; orders
    # no hypothesis reaches contribute 0 (as in mteval), so leave them out.
    order = min(nist_order, max(len(h) for h in hyp_tokens))
    if order == 0:
        return 0.0
    return float(corpus_nist(list(ref_tokens), list(hyp_tokens), n=order))


def _rouge(hypotheses: Sequence[str], ref_sets: Sequence[Sequence[str]]) -> Dict[str, float]:
    scorer = _rouge_scorer()
    totals = {t: 0.0 for t in ROUGE_TYPES}
    for hyp, refs in zip(hypotheses, ref_sets):
        best = scorer.score_multi(list(refs), hyp)
        for t in ROUGE_TYPES:
            totals[t] += best[t].fmeasure
    return {t: totals[t] / len(hypotheses) for t in ROUGE_TYPES}
