"""Content-plan metrics of planned models (Wiseman et al. 2017; Puduppully et al. 2019).

Plans are sequences of record indices (``TableExample.content_plan``).

* Content selection (CS): precision / recall of the *set* of records in the
  predicted plan against the set in the gold plan (repeats count once),
  micro-averaged: intersections, predicted and gold set sizes are summed over
  the corpus before dividing (as Wiseman's ``non_rg_metrics.calc_precrec``
  sums tp / predicted / gold).  F1 is the harmonic mean of those P and R.
* Content ordering (CO): ``1 - DLD(pred, gold) / max(len(pred), len(gold))``
  per example (1.0 when both are empty), averaged over examples (macro, as in
  ``calc_dld``).  DLD is the *optimal string alignment* (restricted)
  Damerau-Levenshtein distance -- insertions, deletions, substitutions and
  transpositions of two adjacent items, no substring edited twice -- the
  variant of pyxDamerauLevenshtein, which Wiseman's script calls
  (``normalized_damerau_levenshtein_distance``).  OSA differs from the
  unrestricted distance only in cases like "ca" -> "abc" (OSA 3,
  unrestricted 2).  The sequences are compared as given (no de-duplication).

Ratios with a zero denominator are ``nan``.
"""

from __future__ import annotations

import math
from typing import Dict, Hashable, List, Sequence


def osa_distance(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Optimal-string-alignment Damerau-Levenshtein distance (O(len(a) * len(b)))."""
    n, m = len(a), len(b)
    # Three rolling rows: d[i-2], d[i-1], d[i].
    prev2: List[int] = []
    prev = list(range(m + 1))
    for i in range(1, n + 1):
        cur = [i] + [0] * m
        for j in range(1, m + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            best = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                best = min(best, prev2[j - 2] + 1)
            cur[j] = best
        prev2, prev = prev, cur
    return prev[m]


def ordering_similarity(pred: Sequence[Hashable], gold: Sequence[Hashable]) -> float:
    """1 - OSA distance / max length; 1.0 for two empty plans."""
    longest = max(len(pred), len(gold))
    if longest == 0:
        return 1.0
    return 1.0 - osa_distance(pred, gold) / longest


def plan_scores(predicted_plans: List[List[int]], gold_plans: List[List[int]]) -> Dict[str, float]:
    """CS precision / recall / F1 (micro) and CO (mean normalised OSA similarity)."""
    if len(predicted_plans) != len(gold_plans):
        raise ValueError(f"{len(predicted_plans)} predicted plans but {len(gold_plans)} gold plans")
    tp = n_pred = n_gold = 0
    co_total = 0.0
    for pred, gold in zip(predicted_plans, gold_plans):
        pred_set, gold_set = set(pred), set(gold)
        tp += len(pred_set & gold_set)
        n_pred += len(pred_set)
        n_gold += len(gold_set)
        co_total += ordering_similarity(list(pred), list(gold))
    precision = tp / n_pred if n_pred else math.nan
    recall = tp / n_gold if n_gold else math.nan
    if math.isnan(precision) or math.isnan(recall):
        f1 = math.nan
    elif precision + recall == 0:
        f1 = 0.0
    else:
        f1 = 2 * precision * recall / (precision + recall)
    return {
        "cs_precision": precision,
        "cs_recall": recall,
        "cs_f1": f1,
        "content_ordering": co_total / len(gold_plans) if gold_plans else math.nan,
    }
