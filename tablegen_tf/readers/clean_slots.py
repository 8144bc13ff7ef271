"""Semantic cleaning of E2E-style training tables: the table says what its text says.

E2E's crowd-sourced references leave out about one slot in ten and sometimes state one the
MR does not hold; a model trained on them learns to drop slots (our dev outputs miss 16 %
of them).  Dušek, Howcroft & Rieser (2019, "Semantic noise matters for neural NLG") re-derive
each training MR from its text and report the slot error rate falling by about 95 %.  This
does the same with our slot aligner (tablegen_tf.metrics.slot_metrics), per training row:

* a slot the text misses, or contradicts, is removed from the table;
* a closed-class attribute the text states but the table lacks is added, with the class's
  canonical value (``CANONICAL_VALUES``);
* names (name, near) are never added, and a table keeps at least one slot.

Valid/test and the selection split are never cleaned: they are what is reported.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

from tablegen_tf.metrics.slot_metrics import (CLASS_PATTERNS, NAME_ATTRIBUTES, align, attribute_key,
                                              is_e2e_table, table_slots)
from tablegen_tf.readers.base import RawItem, RawTable

# (attribute, class) -> the value an added slot gets: the E2E value naming that class
CANONICAL_VALUES: Dict[Tuple[str, str], str] = {
    ("pricerange", "low"): "cheap", ("pricerange", "moderate"): "moderate", ("pricerange", "high"): "high",
    ("customerrating", "low"): "low", ("customerrating", "average"): "average",
    ("customerrating", "high"): "high",
    **{("food", cls): cls.capitalize() for cls in CLASS_PATTERNS["food"]},
    **{(attr, cls): cls for attr in ("eattype", "area", "familyfriendly") for cls in CLASS_PATTERNS[attr]},
}
# E2E's attribute order in every MR, kept for added slots
ATTRIBUTE_ORDER = ("name", "eattype", "food", "pricerange", "customerrating", "area", "familyfriendly", "near")


@dataclasses.dataclass
class CleaningCounts:
    tables: int = 0
    changed: int = 0
    removed: int = 0
    added: int = 0


def clean_table(table: RawTable) -> Tuple[RawTable, int, int]:
    """-> (table whose slots are those its single text realises, slots removed, slots added);
    tables that are not E2E-style or hold several texts come back unchanged."""
    slots = table_slots([item.field for item in table.items], [item.value for item in table.items])
    if len(table.texts) != 1 or not is_e2e_table(slots):
        return table, 0, 0
    alignment = align(slots, table.texts[0])
    drop = set(alignment.missed) | {attribute for attribute, _ in alignment.wrong}
    kept = [item for item in table.items if attribute_key(item.field) not in drop]
    if not kept:  # a text that realises nothing: keep the row as it was
        return table, 0, 0
    added = [RawItem(attribute, CANONICAL_VALUES[(attribute, cls)]) for attribute, cls in alignment.added
             if attribute not in NAME_ATTRIBUTES]
    items = sorted(kept + added, key=lambda item: _order(item.field))  # stable: multi-token values stay
    removed = len({attribute_key(item.field) for item in table.items} & drop)
    if not removed and not added:
        return table, 0, 0
    return dataclasses.replace(table, items=items), removed, len(added)


def _order(field: str) -> int:
    key = attribute_key(field)
    return ATTRIBUTE_ORDER.index(key) if key in ATTRIBUTE_ORDER else len(ATTRIBUTE_ORDER)


def clean_tables(tables: List[RawTable]) -> Tuple[List[RawTable], CleaningCounts]:
    counts = CleaningCounts()
    out = []
    for table in tables:
        cleaned, removed, added = clean_table(table)
        counts.tables += 1
        counts.changed += int(cleaned is not table)
        counts.removed += removed
        counts.added += added
        out.append(cleaned)
    return out, counts
