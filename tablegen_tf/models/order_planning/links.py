"""The learnt link matrix L read as field transitions, beside the references' field orders.

Convention (eq. 8-9, ``LinkAttention``): L[f_j, f_i] scores moving from field f_j (attended
at t-1, the row) to field f_i (at t, the column).  The paper's prose says the opposite
("how likely the field f_j is mentioned after the field f_i"); its equation decides.

A reference *order* is the list of a table's fields in the order a text mentions them
(each field once).  Transitions of an order are its consecutive pairs, so they never
include a self-transition; L's diagonal (staying on a multi-word value, or on the last
field during function words) is therefore left out of every comparison here.

Where a corpus copies its values (WikiBio), ``value_mention_order`` reads an order from where
each field's value words appear in the reference; E2E paraphrases its values and uses the slot
patterns of ``tablegen_tf.metrics.slot_metrics`` instead (the benchmark script).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Dict, List, Mapping, Sequence

import numpy as np

from tablegen_tf.metrics.fact_metrics import FUNCTION_WORDS

Transitions = Mapping[tuple, int]  # (from field, to field) -> count


def count_transitions(orders: Sequence[Sequence[str]]) -> collections.Counter:
    return collections.Counter(pair for order in orders for pair in zip(order, order[1:]))


def value_mention_order(fields: Sequence[str], values: Sequence[str], tokens: Sequence[str]) -> List[str]:
    """The fields of a table (one record per value token: ``fields[k]``, ``values[k]``) in the
    order the reference ``tokens`` first mention them.

    Left to right, each reference position is credited to the field whose value shares the
    longest run of consecutive tokens from there ("16 august 1985" is birth_date even when
    "1985" also starts years); ties go to the field earlier in the table (WikiBio's
    article_title repeats name, and loses to it).  A run counts as a mention only if it holds
    a word that is not a function word or punctuation (``FUNCTION_WORDS``: "the", ",", "of"
    ...), so a shared "," or "of" never places a field.  Case-insensitive.
    """
    per_field: Dict[str, List[str]] = {}
    for name, value in zip(fields, values):  # table order: dicts keep the first occurrence's place
        per_field.setdefault(name, []).append(value.casefold())
    text = [token.casefold() for token in tokens]
    first: Dict[str, int] = {}
    position = 0
    while position < len(text):
        length, owner = 0, None
        for name, value in per_field.items():
            run = _longest_run(text, position, value)
            if run > length:
                length, owner = run, name
        if owner is not None and any(t not in FUNCTION_WORDS for t in text[position:position + length]):
            first.setdefault(owner, position)
        position += max(length, 1)
    return sorted(first, key=first.get)


def _longest_run(text: Sequence[str], position: int, value: Sequence[str]) -> int:
    """Length of the longest run text[position:] shares with value[k:] for some k."""
    best = 0
    for start in range(len(value)):
        run = 0
        while (position + run < len(text) and start + run < len(value)
               and text[position + run] == value[start + run]):
            run += 1
        best = max(best, run)
    return best


def top_transitions(matrix: np.ndarray, field_ids: Mapping[str, int], count: int) -> List[tuple]:
    """The ``count`` largest off-diagonal entries of L as [(from, to, value)], largest first."""
    entries = [(a, b, float(matrix[i, j])) for a, i in field_ids.items() for b, j in field_ids.items() if a != b]
    return sorted(entries, key=lambda entry: -entry[2])[:count]


def rank_correlation(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho (average ranks for ties, values equal to 1e-9); nan when either side is constant."""
    ranks = [_ranks(np.round(np.asarray(x, np.float64), 9)) for x in (a, b)]  # float noise is a tie
    if min(np.std(r) for r in ranks) == 0:
        return float("nan")
    return float(np.corrcoef(*ranks)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=np.float64)
    for value in np.unique(values):  # ties share their mean rank
        ranks[values == value] = ranks[values == value].mean()
    return ranks


@dataclasses.dataclass
class RowReport:
    """One from-field: L's off-diagonal ranking beside the references' next fields."""

    field: str
    learnt: List[tuple]  # [(to field, L value)], largest first, diagonal left out
    reference: List[tuple]  # [(to field, share of this field's outgoing transitions)], largest first
    rho: float  # rank correlation of L[field, to] with the reference counts, over the other fields
    transitions: int  # outgoing reference transitions

    @property
    def argmax_agrees(self) -> bool:
        return bool(self.reference) and self.learnt[0][0] == self.reference[0][0]


def row_reports(matrix: np.ndarray, field_ids: Mapping[str, int], transitions: Transitions) -> List[RowReport]:
    """For every field with outgoing reference transitions (``field_ids``: name -> row/column)."""
    reports = []
    for source, row in field_ids.items():
        targets = [name for name in field_ids if name != source]
        counts = np.array([transitions.get((source, name), 0) for name in targets], np.float64)
        if not counts.sum():
            continue
        values = np.array([matrix[row, field_ids[name]] for name in targets])
        learnt = sorted(zip(targets, values.tolist()), key=lambda item: -item[1])
        reference = sorted(((n, c / counts.sum()) for n, c in zip(targets, counts) if c), key=lambda item: -item[1])
        reports.append(RowReport(source, learnt, reference, rank_correlation(values, counts), int(counts.sum())))
    return reports


def greedy_chain(matrix: np.ndarray, field_ids: Mapping[str, int], start: str) -> List[str]:
    """The field order L implies from ``start``: each step the largest L entry to an unvisited field."""
    chain = [start]
    while len(chain) < len(field_ids):
        row = field_ids[chain[-1]]
        chain.append(max((n for n in field_ids if n not in chain), key=lambda n: matrix[row, field_ids[n]]))
    return chain


def mean_relative_positions(orders: Sequence[Sequence[str]]) -> Dict[str, float]:
    """field -> mean of position / (length - 1) over the orders that mention it (0 = first, 1 = last)."""
    sums, counts = collections.Counter(), collections.Counter()
    for order in orders:
        for position, name in enumerate(order):
            sums[name] += position / max(len(order) - 1, 1)
            counts[name] += 1
    return {name: sums[name] / counts[name] for name in counts}


def next_field_accuracy(matrix: np.ndarray, field_ids: Mapping[str, int], tables: Sequence[Mapping[str, int]],
                        orders: Sequence[Sequence[str]], weigh_tokens: bool = True) -> float:
    """Share of reference transitions a -> b where b gets the most link attention (eq. 9)
    when all of alpha_{t-1} is on field a, among the table's other fields.

    A field's share of eq. 9 is n_f exp(L[a, f]) over its n_f table tokens, so a field with
    more tokens (a three-word name) gets more of the link attention than a one-word field
    for the same L entry.  ``tables``: per example, field -> number of table tokens.
    With L = 0 this is the "field with the most tokens" baseline; ``weigh_tokens=False``
    scores any field-to-field matrix (e.g. log reference counts) without the token counts.
    """
    hits = total = 0
    for tokens, order in zip(tables, orders):
        for source, target in zip(order, order[1:]):
            row = matrix[field_ids[source]]
            others = [name for name in tokens if name != source and name in field_ids]
            best = max(others, key=lambda name: np.log(tokens[name]) * weigh_tokens + row[field_ids[name]])
            hits += best == target
            total += 1
    return hits / max(total, 1)


def column_share(matrix: np.ndarray, field_ids: Mapping[str, int]) -> float:
    """Share of the variance of the off-diagonal entries that a per-column constant explains:
    1.0 when every from-field moves to the same fields ("always go to X"), low when the
    preferred next field depends on the from-field (an order)."""
    ids = list(field_ids.values())
    sub = matrix[np.ix_(ids, ids)].astype(np.float64)
    off = ~np.eye(len(ids), dtype=bool)
    column_means = np.array([sub[off[:, i], i].mean() for i in range(len(ids))])
    values = sub[off]
    residual = (sub - column_means[None, :])[off]
    total = ((values - values.mean()) ** 2).sum()
    return float(1.0 - (residual ** 2).sum() / total) if total else float("nan")


def log_next_field_probabilities(transitions: Transitions, field_ids: Mapping[str, int], size: int) -> np.ndarray:
    """[size, size] log P(to | from) of the reference transitions (add-one smoothed over the
    other fields; the diagonal 0), indexed like L."""
    matrix = np.zeros((size, size))
    for source, row in field_ids.items():
        targets = [name for name in field_ids if name != source]
        counts = np.array([transitions.get((source, name), 0) for name in targets], np.float64) + 1.0
        for name, p in zip(targets, counts / counts.sum()):
            matrix[row, field_ids[name]] = np.log(p)
    return matrix


def without_column_means(matrix: np.ndarray, field_ids: Mapping[str, int]) -> np.ndarray:
    """The off-diagonal entries minus their column's mean (the per-to-field prior); 0 elsewhere."""
    ids = list(field_ids.values())
    sub = matrix[np.ix_(ids, ids)].astype(np.float64)
    off = ~np.eye(len(ids), dtype=bool)
    column_means = np.array([sub[off[:, i], i].mean() for i in range(len(ids))])
    centred = np.zeros(matrix.shape)
    centred[np.ix_(ids, ids)] = np.where(off, sub - column_means[None, :], 0.0)
    return centred


def transition_agreement(matrix: np.ndarray, reference: np.ndarray, field_ids: Mapping[str, int]):
    """(mean row rank correlation, argmax hits) of two field-to-field matrices once each has lost its
    per-to-field prior: do they agree on which field follows which, beyond "go to X"?"""
    ours, theirs = without_column_means(matrix, field_ids), without_column_means(reference, field_ids)
    rhos, hits = [], 0
    for source, row in field_ids.items():
        others = [i for name, i in field_ids.items() if name != source]
        rhos.append(rank_correlation(ours[row, others], theirs[row, others]))
        hits += int(np.argmax(ours[row, others]) == np.argmax(theirs[row, others]))
    defined = [rho for rho in rhos if not np.isnan(rho)]
    return (float(np.mean(defined)) if defined else float("nan")), hits
