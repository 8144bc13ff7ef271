"""Table-grounded fact metrics that BLEU does not catch: hallucinated numbers and names.

Inputs are token lists: the output tokens of each example (the project
tokenizer's tokens, or any whitespace tokens) and the record value tokens of
its input table (one token per record, ``TableExample.values``), optionally
with the record fields (``TableExample.fields``).  All comparisons are
case-insensitive (``str.casefold``) and exact per token: "20" does not match
"20.0", and "Eagle" matches a record value "eagle".

Stated fact tokens of an output (each occurrence counts):

* number: ``NUMBER_RE`` -- ASCII digits, optionally with thousands commas and
  a decimal part ("7", "3.5", "1,000", ".500"), or a range of two such
  numbers ("20-25").  Number words ("three"), ordinals ("3rd"), times
  ("3:45") and money/units glued to a number are *not* numbers here.
* name: not a number, and either
  (a) capitalised (first character an uppercase letter) and not
      sentence-initial (first token, or after ``.``/``!``/``?``/``:`` or an
      opening quote), except the pronoun "I"; or
  (b) equal to a value token of a name-ish field of this example's table
      (``is_name_field``), unless it is a function word (``FUNCTION_WORDS``:
      "the", "of", ...).  Rule (b) only applies when ``table_fields`` is given;
      it makes lowercased outputs (WikiBio) count copied names, but it can only
      add supported facts: in lowercased text a hallucinated name is invisible.

A stated fact is supported when its token occurs among the table's value
tokens (any field).  Table fact tokens are the distinct value tokens that are
numbers or (with ``table_fields``) non-function-word values of name-ish fields.

Metrics (micro-averaged over the corpus, i.e. token counts are summed first):

* ``fact_precision``: supported stated facts / stated facts.
* ``hallucination_rate``: unsupported stated facts / stated facts
  (= 1 - fact_precision).
* ``hallucinated_numbers_rate``: unsupported stated numbers / stated numbers.
* ``table_coverage``: distinct table fact tokens the output mentions /
  distinct table fact tokens (a recall; RotoWire tables hold hundreds of
  numbers, so expect low values there).

A ratio whose denominator is 0 is ``nan``; the counts behind every ratio are
returned too (``num_*``).
"""

from __future__ import annotations

import math
import re
from typing import Collection, Dict, Iterable, List, Optional, Sequence, Set

_NUM = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+"
NUMBER_RE = re.compile(rf"(?:{_NUM})(?:-(?:{_NUM}))?")

# Fields whose values are names, compared after casefold and "-" -> "_".
NAME_FIELDS = frozenset(
    {
        "name",  # E2E, WikiBio
        "near",  # E2E
        "article_title",  # WikiBio
        "player_name",
        "first_name",
        "second_name",
        "team_name",
        "team_city",  # RotoWire
        # WebNLG triples (readers/webnlg.py): the entities; the property is not one.
        # Without them WebNLG's table_coverage counted only the numbers of its tables.
        "subject",
        "object",
    }
)

# Tokens of name values that are not names themselves ("The Eagle", "Zizzi of Rome").
FUNCTION_WORDS = frozenset(
    "a an the of and or in on at to for from by with de del der den di du da la le les van von y "
    "'s - -- , . ( ) -lrb- -rrb- & :".split()
)

_SENTENCE_OPENERS = frozenset({".", "!", "?", ":", ";", "``", '"', "“", "'", "‘", "(", "-lrb-", "--"})


def is_number(token: str) -> bool:
    return NUMBER_RE.fullmatch(token) is not None


def is_name_field(field: str, name_fields: Collection[str] = NAME_FIELDS) -> bool:
    """Name-ish field: in ``name_fields`` (casefolded, '-' read as '_') or ending in 'name'."""
    f = field.casefold().replace("-", "_")
    return f in name_fields or f.endswith("name")


def _is_capitalised(token: str) -> bool:
    return token[:1].isalpha() and token[:1].isupper() and token != "I"


def stated_facts(
    tokens: Sequence[str], name_values: Collection[str] = frozenset()
) -> List[tuple]:
    """(casefolded token, kind) for each stated fact token; kind is "number" or "name".

    ``name_values``: casefolded value tokens of the table's name-ish fields (rule b).
    """
    facts = []
    for t, tok in enumerate(tokens):
        if not tok:
            continue
        key = tok.casefold()
        if is_number(tok):
            facts.append((key, "number"))
            continue
        sentence_initial = t == 0 or tokens[t - 1] in _SENTENCE_OPENERS
        if (_is_capitalised(tok) and not sentence_initial) or (
            key in name_values and key not in FUNCTION_WORDS
        ):
            facts.append((key, "name"))
    return facts


def _table_sets(values: Sequence[str], fields: Optional[Sequence[str]], name_fields):
    all_values = {v.casefold() for v in values}
    name_values: Set[str] = set()
    if fields is not None:
        if len(fields) != len(values):
            raise ValueError(f"{len(fields)} fields for {len(values)} values")
        name_values = {
            v.casefold() for v, f in zip(values, fields) if is_name_field(f, name_fields)
        }
    table_facts = {v for v in all_values if is_number(v)} | {
        v for v in name_values if v not in FUNCTION_WORDS and v
    }
    return all_values, name_values, table_facts


def _ratio(num: int, den: int) -> float:
    return num / den if den else math.nan


def fact_scores(
    hypothesis_tokens: List[List[str]],
    table_values: List[List[str]],
    table_fields: Optional[List[List[str]]] = None,
    name_fields: Iterable[str] = NAME_FIELDS,
) -> Dict[str, float]:
    """Fact precision / hallucination / coverage of outputs against their input tables.

    Args:
      hypothesis_tokens: output tokens per example.
      table_values: record value tokens per example (one per record).
      table_fields: record fields per example, parallel to ``table_values``;
        enables the name-field rules. ``None``: names are the capitalised rule only.
      name_fields: field names treated as name-ish (see ``is_name_field``).
    """
    if len(hypothesis_tokens) != len(table_values):
        raise ValueError(f"{len(hypothesis_tokens)} hypotheses but {len(table_values)} tables")
    if table_fields is not None and len(table_fields) != len(table_values):
        raise ValueError(f"{len(table_fields)} field lists but {len(table_values)} tables")
    name_fields = frozenset(f.casefold().replace("-", "_") for f in name_fields)

    stated = supported = numbers = supported_numbers = 0
    table_total = table_mentioned = 0
    for i, (tokens, values) in enumerate(zip(hypothesis_tokens, table_values)):
        if isinstance(tokens, str) or isinstance(values, str):
            raise TypeError(f"example {i}: pass token lists, not strings")
        fields = table_fields[i] if table_fields is not None else None
        all_values, name_values, table_facts = _table_sets(values, fields, name_fields)
        for key, kind in stated_facts(tokens, name_values):
            ok = key in all_values
            stated += 1
            supported += ok
            if kind == "number":
                numbers += 1
                supported_numbers += ok
        mentioned = {tok.casefold() for tok in tokens}
        table_total += len(table_facts)
        table_mentioned += len(table_facts & mentioned)

    return {
        "fact_precision": _ratio(supported, stated),
        "hallucination_rate": _ratio(stated - supported, stated),
        "hallucinated_numbers_rate": _ratio(numbers - supported_numbers, numbers),
        "table_coverage": _ratio(table_mentioned, table_total),
        "num_stated_facts": stated,
        "num_stated_numbers": numbers,
        "num_table_facts": table_total,
    }
