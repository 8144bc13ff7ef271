"""Extractive (deletion-based) compression metrics: token-level F1 against deletion labels,
compression ratio, and ROUGE-1/2/L F-measure (rouge-score, as Miao & Blunsom 2016 Table 1).

An output is mapped to a keep mask over its source tokens by the same greedy,
case-insensitive subsequence alignment that derives the gold labels
(``tablegen_tf.schema.deletion_labels``); output tokens that match no later source token
(an abstractive word) are not kept tokens. Token F1 is per sentence (precision and recall
of the kept source tokens), averaged over sentences (Filippova et al. 2015); the micro
F1 over every token is reported beside it. The compression ratio is output tokens over
source tokens, averaged over sentences; ``compression_ratio_chars`` is the character-length
ratio of Filippova et al. 2015; the references' ratios are reported beside.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

from rouge_score import rouge_scorer


def keep_mask(source_tokens: Sequence[str], output_tokens: Sequence[str]) -> List[int]:
    """1 for the source tokens an output keeps (greedy leftmost, case-insensitive)."""
    lowered = [t.lower() for t in source_tokens]
    mask, position = [0] * len(source_tokens), 0
    for token in output_tokens:
        token = token.lower()
        found = next((i for i in range(position, len(lowered)) if lowered[i] == token), None)
        if found is not None:
            mask[found] = 1
            position = found + 1
    return mask


def _f1(predicted: Sequence[int], gold: Sequence[int]):
    tp = sum(1 for p, g in zip(predicted, gold) if p == 1 and g == 1)
    kept, wanted = sum(1 for p in predicted if p == 1), sum(1 for g in gold if g == 1)
    precision = tp / kept if kept else float(wanted == 0)
    recall = tp / wanted if wanted else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return f1, tp, kept, wanted


def extractive_scores(sources: Sequence[Sequence[str]], gold_labels: Sequence[Sequence[int]],
                      outputs: Sequence[Sequence[str]], references: Sequence[str] = (),
                      hypotheses: Sequence[str] = ()) -> Dict[str, float]:
    """Token F1 / compression ratio over tokenized sources, gold labels (1 = kept) and
    tokenized outputs; ROUGE-1/2/L F of detokenized ``hypotheses`` against ``references``."""
    if not (len(sources) == len(gold_labels) == len(outputs)):
        raise ValueError(f"{len(sources)} sources, {len(gold_labels)} label rows, {len(outputs)} outputs")
    f1s, ratios, char_ratios, gold_ratios, gold_char_ratios = [], [], [], [], []
    tp = kept = wanted = 0
    for source, gold, output in zip(sources, gold_labels, outputs):
        if len(gold) != len(source):
            raise ValueError(f"{len(gold)} labels for {len(source)} source tokens")
        f1, t, k, w = _f1(keep_mask(source, output), gold)
        f1s.append(f1)
        tp, kept, wanted = tp + t, kept + k, wanted + w
        source_chars = max(len(" ".join(source)), 1)
        ratios.append(len(output) / max(len(source), 1))
        char_ratios.append(len(" ".join(output)) / source_chars)
        gold_tokens = [s for s, g in zip(source, gold) if g == 1]
        gold_ratios.append(len(gold_tokens) / max(len(source), 1))
        gold_char_ratios.append(len(" ".join(gold_tokens)) / source_chars)
    count = max(len(f1s), 1)
    precision, recall = tp / max(kept, 1), tp / max(wanted, 1)
    scores = {
        "token_f1": sum(f1s) / count,
        "token_f1_micro": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "compression_ratio": sum(ratios) / count,
        "compression_ratio_chars": sum(char_ratios) / count,
        "reference_compression_ratio": sum(gold_ratios) / count,
        "reference_compression_ratio_chars": sum(gold_char_ratios) / count,
    }
    if hypotheses:
        scores.update(rouge_f(hypotheses, references))
    return scores


def rouge_f(hypotheses: Sequence[str], references: Sequence[str]) -> Dict[str, float]:
    """Mean ROUGE-1/2/L F-measure (rouge-score) of one reference per item."""
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)
    totals = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for hypothesis, reference in zip(hypotheses, references):
        for name, score in scorer.score(reference, hypothesis).items():
            totals[name] += score.fmeasure
    count = max(len(hypotheses), 1)
    return {f"{name}_f": value / count for name, value in totals.items()}
