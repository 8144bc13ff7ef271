"""Slot errors of E2E-style outputs: which table values a text realises, contradicts or adds.

An E2E meaning representation has eight attributes; six are closed classes (eatType, food,
priceRange, customer rating, area, familyFriendly) and two are names (name, near).  Each
closed-class value belongs to a *class* whose paraphrases are listed below as patterns
("less than £20" and "cheap" are one class, "low" price; "£20-25" is realised by "moderately
priced" or "£20-25"); a name is realised when it appears verbatim.  The text is compared
after casefolding with hyphens as spaces ("family-friendly" = "family friendly"), and with
the table's names blanked first, so "Raja Indian Cuisine" or "Café Sicilia" do not count
as food or eatType.

Per slot of the table:
* realised: a pattern of its class matches;
* wrong: not realised, but another class of the same attribute is (food Chinese, text
  "Italian"; familyFriendly yes, text "not family-friendly");
* missed: neither.
Per closed-class attribute absent from the table, *added* when one of its classes matches
(generic words such as "restaurant" are not evidence of an eatType).

``slot_error_rate`` = (missed + wrong + added) / slots, micro-averaged over the corpus
(the E2E challenge's SER, Dušek et al. 2020, with our paraphrase lists).  Tables with no
E2E attribute are skipped; a corpus without any gives {}.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Sequence, Tuple

_RATED = r"(?:rat(?:ed|ing|ings)?|reviews?|scores?)"
_PRICED = r"(?:pric(?:e|es|ed|ing)|costs?|range)"

# attribute -> class -> pattern (casefolded text, hyphens as spaces)
CLASS_PATTERNS: Dict[str, Dict[str, str]] = {
    "eattype": {
        "pub": r"\bpubs?\b|\binns?\b|\bbars?\b",
        # "caf(?:es?\b|é)": RE2's \b (the in-graph aligner) is ASCII-only, so no \b after é
        "coffee shop": r"\bcoffee ?(?:shops?|houses?)\b|\bcaf(?:es?\b|é)|\bcoffee place",
        "restaurant": r"\brestaurants?\b|\beater(?:y|ies)\b|\bdiners?\b",
    },
    "food": {
        "english": r"\benglish\b|\bbritish\b",
        "chinese": r"\bchinese\b",
        "italian": r"\bitalian\b|\bpizza|\bpasta\b",
        "french": r"\bfrench\b",
        "indian": r"\bindian\b|\bcurr(?:y|ies)\b",
        "japanese": r"\bjapanese\b|\bsushi\b",
        "fast food": r"\bfast food\b",
    },
    "pricerange": {
        "low": (r"\bcheap|\binexpensive|\baffordabl|\bbudget\b|\blow(?:er)? ?" + _PRICED
                + r"|\b(?:less than|under|below) £ ?20\b|" + _PRICED + r" (?:is |are )?(?:very )?low\b"),
        "moderate": (r"\bmoderate(?:ly)?\b|\baverage ?" + _PRICED + r"|\bmid(?:dle)? ?(?:range|pric)"
                     + r"|£ ?20 ?(?:to|and|or)? ?£? ?25\b|\breasonabl|" + _PRICED + r" (?:is |are )?(?:average|moderate)"),
        "high": (r"\bexpensive|\bpric(?:ey|ier)\b|\bcostly\b|\bhigh(?:ly|er)? ?(?:end|" + _PRICED + r")|\bupscale|\bluxur"
                 + r"|\b(?:more than|over|above) £ ?30\b|£ ?30 (?:or|and) (?:more|above|over)|"
                 + _PRICED + r" (?:is |are )?(?:very |quite )?high\b"),
    },
    "customerrating": {
        "low": (r"\b1 ?(?:out of|/) ?5\b|\bone (?:out of )?(?:5|five)\b|\b(?:one|1) stars?\b|\blow(?:ly)? ?(?:customer )?"
                + _RATED + r"|\bpoor(?:ly)? ?(?:customer )?" + _RATED + r"|\bbad (?:customer )?" + _RATED
                + r"|" + _RATED + r" (?:is |are |as |of )?(?:very )?(?:low|poor|bad)\b"),
        "average": (r"\b3 ?(?:out of|/) ?5\b|\bthree (?:out of )?(?:5|five)\b|\b(?:three|3) stars?\b"
                    + r"|\baverage(?:ly)? ?(?:customer )?" + _RATED + r"|\bmid(?:dle)? ?(?:range )?" + _RATED
                    + r"|\bmoderate(?:ly)? (?:customer )?" + _RATED + r"|\bdecent (?:customer )?" + _RATED
                    + r"|" + _RATED + r" (?:\w+ ){0,3}?(?:an? )?(?:average|moderate|ok|okay|decent)\b"),
        "high": (r"\b5 ?(?:out of|/) ?5\b|\bfive (?:out of )?(?:5|five)\b|\b(?:five|5) stars?\b"
                 + r"|\bhigh(?:ly)? ?(?:customer )?" + _RATED + r"|\b(?:excellent|great|top|good|well) ?(?:customer )?"
                 + _RATED + r"|" + _RATED + r" (?:is |are |as |of )?(?:very )?(?:high|highly|excellent|great)\b"),
    },
    "area": {
        "city centre": r"\b(?:city|town) cent(?:re|er)\b|\bcent(?:re|er) of (?:the )?(?:city|town)\b|\bcentral\b|\bdowntown\b",
        "riverside": r"\briver",
    },
    "familyfriendly": {
        # "no" first: "not family friendly" also contains the "yes" phrase
        "no": (r"(?:\bnot|n't|\bnon|\bno|\bnever|\bisnt|\barent)\b ?(?:\w+ ){0,3}?"
               r"(?:famil(?:y|ies)|kids?|child(?:ren)?) ?(?:friendly|oriented|orientated)\b"
               r"|\b(?:not|n't) (?:\w+ ){0,3}?(?:for|welcom\w*|allow\w*|suitable for) (?:the )?(?:famil|kids|child)"
               r"|\badults?\b|\bno (?:kids|children)\b|\b(?:kid|child|family) unfriendly\b"),
        "yes": (r"\b(?:famil(?:y|ies)|kids?|child(?:ren)?) ?(?:friendly|oriented|orientated)\b"
                r"|\b(?:for|welcomes?|allows?|suitable for|good for|great for|ideal for) (?:the (?:whole )?|your )?"
                r"(?:famil|kids|child)|\bbring (?:the |your )?(?:kids|children|family)\b"
                r"|\bfriendly (?:with|to|for|towards) (?:the )?(?:kids?|child|famil)"
                r"|\b(?:kids|children|families) (?:are )?(?:welcome|allowed)\b"),
    },
}

# value (value_key) -> class, for attributes whose values paraphrase one another
VALUE_CLASSES: Dict[str, Dict[str, str]] = {
    "pricerange": {"cheap": "low", "lessthan£20": "low", "moderate": "moderate", "£2025": "moderate",
                   "high": "high", "morethan£30": "high"},
    "customerrating": {"1outof5": "low", "low": "low", "3outof5": "average", "average": "average",
                       "5outof5": "high", "high": "high"},
}
NAME_ATTRIBUTES = ("name", "near")
# classes whose words appear in texts about tables without the attribute ("a restaurant")
NOT_EVIDENCE_OF_ADDITION = {("eattype", "restaurant")}

_COMPILED = {attr: {cls: re.compile(p) for cls, p in classes.items()} for attr, classes in CLASS_PATTERNS.items()}


def normalise(text: str) -> str:
    text = text.casefold().replace("’", "'").replace("-", " ")
    return re.sub(r"\s+", " ", text).strip()


def attribute_key(field: str) -> str:
    """"customer rating" / "customer_rating" / "customerRating" -> "customerrating"."""
    return re.sub(r"[^0-9a-z]", "", field.casefold())


def table_slots(fields: Sequence[str], values: Sequence[str]) -> Dict[str, str]:
    """Record tokens (one per record, as in TableExample) -> {attribute: value}; the tokens
    of one attribute join in order ("city", "centre" -> "city centre")."""
    slots: Dict[str, List[str]] = {}
    for field, value in zip(fields, values):
        slots.setdefault(attribute_key(field), []).append(value)
    return {attr: " ".join(tokens) for attr, tokens in slots.items()}


def name_pattern(name: str) -> str:
    """A name's words in order, a space between them optional: record tokens
    ("Café", "Rouge", "(", "Old", ")") match the text "Café Rouge (Old)"."""
    return " ?".join(re.escape(word) for word in normalise(name).split())


def value_key(value: str) -> str:
    """A table value without case, spaces and hyphens: record tokens ("£", "20", "-", "25")
    and the raw MR value ("£20-25") compare equal."""
    return re.sub(r"[\s\-]", "", value.casefold())


def value_class(attribute: str, value: str) -> Optional[str]:
    key = value_key(value)
    classes = VALUE_CLASSES.get(attribute)
    if classes is not None:
        return classes.get(key)
    return next((cls for cls in CLASS_PATTERNS.get(attribute, {}) if value_key(cls) == key), None)


@dataclasses.dataclass
class SlotAlignment:
    realised: List[str] = dataclasses.field(default_factory=list)
    missed: List[str] = dataclasses.field(default_factory=list)
    wrong: List[Tuple[str, str]] = dataclasses.field(default_factory=list)  # (attribute, class said)
    added: List[Tuple[str, str]] = dataclasses.field(default_factory=list)
    slots: int = 0

    @property
    def errors(self) -> int:
        return len(self.missed) + len(self.wrong) + len(self.added)


def _classes_said(attribute: str, text: str) -> List[str]:
    said = [cls for cls, pattern in _COMPILED[attribute].items() if pattern.search(text)]
    if attribute == "familyfriendly" and "no" in said:
        said = ["no"]  # the negated phrase contains the plain one
    return said


def align(slots: Dict[str, str], text: str) -> SlotAlignment:
    """Aligns one text to one E2E-style table ({attribute: value}, attribute_key'd)."""
    text = normalise(text)
    result = SlotAlignment()
    for attribute in NAME_ATTRIBUTES:  # names first, then blank them for the other patterns
        if attribute in slots:
            result.slots += 1
            found = re.search(name_pattern(slots[attribute]), text)
            (result.realised if found else result.missed).append(attribute)
    for name in sorted((normalise(slots[a]) for a in NAME_ATTRIBUTES if a in slots), key=len, reverse=True):
        text = re.sub(name_pattern(name), " ", text)
    for attribute in CLASS_PATTERNS:
        said = _classes_said(attribute, text)
        if attribute not in slots:
            result.added += [(attribute, cls) for cls in said[:1] if (attribute, cls) not in NOT_EVIDENCE_OF_ADDITION]
            continue
        result.slots += 1
        expected = value_class(attribute, slots[attribute])
        if expected in said:
            result.realised.append(attribute)
        elif said:
            result.wrong.append((attribute, said[0]))
        else:
            result.missed.append(attribute)
    return result


def realised_positions(slots: Dict[str, str], text: str) -> Dict[str, int]:
    """{attribute: offset of its first realisation in the normalised text} for the slots that
    :func:`align` counts as realised: the order in which a text mentions its table's values
    (including paraphrased ones such as familyFriendly "yes" = "kid friendly")."""
    text = normalise(text)
    positions: Dict[str, int] = {}
    for attribute in NAME_ATTRIBUTES:
        found = re.search(name_pattern(slots[attribute]), text) if attribute in slots else None
        if found:
            positions[attribute] = found.start()
    for name in sorted((normalise(slots[a]) for a in NAME_ATTRIBUTES if a in slots), key=len, reverse=True):
        text = re.sub(name_pattern(name), lambda match: " " * len(match.group()), text)  # offsets kept
    for attribute in CLASS_PATTERNS:
        expected = value_class(attribute, slots[attribute]) if attribute in slots else None
        if expected is not None and expected in _classes_said(attribute, text):
            positions[attribute] = _COMPILED[attribute][expected].search(text).start()
    return positions


def is_e2e_table(slots: Dict[str, str]) -> bool:
    known = set(CLASS_PATTERNS) | set(NAME_ATTRIBUTES)
    return bool(slots) and set(slots) <= known


def slot_scores(texts: Sequence[str], tables: Sequence[Tuple[Sequence[str], Sequence[str]]]) -> Dict[str, float]:
    """texts[i] (detokenized) against tables[i] = (fields, values) -> slot_error_rate and its
    parts (rates over slots) and counts; {} when no table is E2E-style."""
    totals = {"slots": 0, "missed": 0, "wrong": 0, "added": 0, "tables": 0}
    for text, (fields, values) in zip(texts, tables):
        slots = table_slots(fields, values)
        if not is_e2e_table(slots):
            continue
        alignment = align(slots, text)
        totals["tables"] += 1
        totals["slots"] += alignment.slots
        totals["missed"] += len(alignment.missed)
        totals["wrong"] += len(alignment.wrong)
        totals["added"] += len(alignment.added)
    if not totals["slots"]:
        return {}
    slots = totals["slots"]
    return {
        "slot_error_rate": (totals["missed"] + totals["wrong"] + totals["added"]) / slots,
        "slot_missed_rate": totals["missed"] / slots,
        "slot_wrong_rate": totals["wrong"] / slots,
        "slot_added_rate": totals["added"] / slots,
        "num_slots": slots,
        "num_slot_tables": totals["tables"],
    }
