"""WebNLG 2017 challenge XML reader (format ``webnlg``).

Each ``<entry>`` becomes one multi-reference RawTable: all its ``<lex>`` texts
are references.  Each ``<mtriple>`` "subject | property | object" becomes three
records, fields ``subject`` / ``property`` / ``object``, all with the triple's
subject as entity.  We linearise triples this way (instead of ``field =
property``) because (a) every part of a triple, the property words included,
is then a record value the decoder can copy, and (b) WebNLG's open property
set (hundreds of DBpedia properties, new ones on test) stays out of the field
vocabulary, which is then just three symbols.

Value clean-up: DBpedia underscores become spaces, double quotes of literals
are dropped, camelCase properties are split into lower-case words
("birthPlace" -> "birth place", "UTCOffset" -> "UTC offset"), and ISO dates are
written the way the texts write them ("1923-11-18" -> "November 18, 1923"): of the
1,054 training texts of entries with such a date, 70 % spell it out with the month's
name ("November 18, 1923" 31 %, "18th November 1923" 21 %, "18 November 1923" 18 %),
12 % copy the ISO form, most others give the year only; spelt out, the day, month and
year are tokens the copy mechanism can take.

We parse with expat directly (not ElementTree) because it reports line
numbers: rejected entries carry the real line of their ``<entry>`` tag, and a
file with invalid XML is rejected as a whole with the parser's error line.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Dict, Iterator, List
from xml.parsers import expat

from tablegen_tf.readers.base import (
    FormatReader,
    InputError,
    Parsed,
    RawItem,
    RawTable,
    Rejection,
    require_exists,
)

_ENTRY_TAG = re.compile(rb"<entry[\s>]")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
# English names whatever the process locale (calendar.month_name follows LC_TIME).
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@dataclasses.dataclass
class Entry:
    line: int
    attrs: Dict[str, str]
    triples: List[str] = dataclasses.field(default_factory=list)
    lexes: List[str] = dataclasses.field(default_factory=list)


class _EntryCollector:
    """expat handlers collecting entries, their modified triples and lex texts."""

    def __init__(self, parser) -> None:
        self.parser = parser
        self.entries: List[Entry] = []
        self.text: List[str] = []
        self.collecting = False

    def start(self, name: str, attrs: Dict[str, str]) -> None:
        if name == "entry":
            self.entries.append(Entry(self.parser.CurrentLineNumber, dict(attrs)))
        elif name in ("mtriple", "lex") and self.entries:
            self.collecting, self.text = True, []

    def end(self, name: str) -> None:
        if name not in ("mtriple", "lex") or not self.collecting:
            return
        self.collecting = False
        text = "".join(self.text).strip()
        entry = self.entries[-1]
        (entry.triples if name == "mtriple" else entry.lexes).append(text)

    def chars(self, data: str) -> None:
        if self.collecting:
            self.text.append(data)


def parse_entries(data: bytes) -> List[Entry]:
    """All entries of a WebNLG XML document; raises expat.ExpatError."""
    parser = expat.ParserCreate()
    collector = _EntryCollector(parser)
    parser.StartElementHandler = collector.start
    parser.EndElementHandler = collector.end
    parser.CharacterDataHandler = collector.chars
    parser.Parse(data, True)
    return collector.entries


def clean_entity(text: str) -> str:
    """DBpedia resource or literal -> plain words."""
    return spell_out_date(" ".join(text.replace('"', " ").replace("_", " ").split()))


def spell_out_date(text: str) -> str:
    """"1923-11-18" -> "November 18, 1923"; anything else (invalid dates too) unchanged."""
    match = _ISO_DATE.fullmatch(text)
    if not match:
        return text
    year, month, day = (int(part) for part in match.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return text
    return f"{_MONTHS[month - 1]} {day}, {year}"


def clean_property(text: str) -> str:
    words = []
    for word in text.replace("_", " ").split():
        parts = _CAMEL.split(word)
        # lower-case only the camelCase pieces, keep acronyms and proper names
        words.extend(p.lower() if len(parts) > 1 and not p.isupper() else p for p in parts)
    return " ".join(words)


def triple_items(triple: str) -> List[RawItem]:
    parts = [p.strip() for p in triple.split("|")]
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"triple is not 'subject | property | object': {triple!r}")
    subject = clean_entity(parts[0])
    return [
        RawItem("subject", subject, entity=subject),
        RawItem("property", clean_property(parts[1]), entity=subject),
        RawItem("object", clean_entity(parts[2]), entity=subject),
    ]


class WebNLGReader(FormatReader):
    name = "webnlg"

    def input_units(self, path: str, split: str) -> List[str]:
        require_exists(path)
        if os.path.isfile(path):
            return [path]
        units = sorted(
            os.path.join(root, name)
            for root, _, names in os.walk(path)
            for name in names
            if name.lower().endswith(".xml")
        )
        if not units:
            raise InputError(f"no *.xml files under {path}")
        return units

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        with open(unit, "rb") as handle:
            data = handle.read()
        try:
            entries = parse_entries(data)
        except expat.ExpatError as error:
            # The whole file is rejected; it stands for as many rows as it
            # has <entry> tags, so the read/rejected balance still adds up.
            rows = max(1, len(_ENTRY_TAG.findall(data)))
            yield Rejection(unit, error.lineno, f"invalid XML: {error}", rows=rows)
            return
        for index, entry in enumerate(entries, start=1):
            yield self._table(unit, split, index, entry)

    def _table(self, unit: str, split: str, index: int, entry: Entry) -> Parsed:
        attrs = entry.attrs
        name = f"entry {index} (eid={attrs.get('eid', '?')}, category={attrs.get('category', '?')})"
        content = " ; ".join(entry.triples)
        texts = [text for text in entry.lexes if text]
        if not entry.triples:
            return Rejection(unit, entry.line, f"{name}: no <mtriple> in <modifiedtripleset>", content)
        if not texts:
            return Rejection(unit, entry.line, f"{name}: no non-empty <lex> text", content)
        try:
            items = [item for triple in entry.triples for item in triple_items(triple)]
        except ValueError as error:
            return Rejection(unit, entry.line, f"{name}: {error}", content)
        example_id = "webnlg:{}:{}:{}:{}".format(
            split, attrs.get("category", ""), attrs.get("eid", index), attrs.get("size", len(entry.triples))
        )
        return RawTable(example_id, f"{unit}:{index}", items, texts)

