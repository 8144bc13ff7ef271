"""WikiBio (Lebret et al. 2016) in its official ``.box`` / ``.sent`` / ``.nb`` layout.

``X.box`` has one infobox per line: tab-separated ``field_N:token`` items
(``N`` = 1-based position of the token in the field value) and ``field:token``
single-token items (``image:<none>``). ``X.sent`` has one tokenized sentence
per line; ``X.nb`` the number of sentences of each article. The target is the
article's FIRST sentence: article i's sentences start at sum(nb[:i]).

The three files are read in lockstep and ``.sent`` is streamed (only ``.nb``
is read fully), so the full corpus (728k articles) needs little memory.

Rejections: a malformed box line (its .box line); an invalid .nb count (its
.nb line; a single one is recovered from the .sent line count, after several
the later offsets are unknown and those articles are rejected too); articles
running past the end of .sent (.nb line); .sent lines no article covers
(.sent line); lines of .box or .nb without a partner line.
"""

from __future__ import annotations

import glob
import itertools
import os
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

from tablegen_tf.readers.base import FormatReader, InputError, Parsed, RawItem, RawTable, Rejection

_EXTENSIONS = (".box", ".sent", ".nb")
MAX_SENTENCES_PER_ARTICLE = 100_000  # a larger .nb count is a corrupt line, not an article
_NONE = "<none>"
_DIGITS_OR_MINUS = frozenset("0123456789-")  # a suffix starting so must be a position


def _decode(raw: bytes) -> Optional[str]:
    """One line without its terminator; None if it is not UTF-8."""
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return None


def _shown(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r\n")


def parse_box(line: str) -> Tuple[List[RawItem], str]:
    """(items, "") or ([], reason). Values ``<none>`` (and empty ones) are dropped."""
    fields: Dict[str, List[Tuple[int, str]]] = {}  # first-appearance order
    for item in line.split("\t"):
        key, colon, value = item.partition(":")
        name, underscore, suffix = key.rpartition("_")
        if underscore and suffix.isdecimal():  # the common case first: name_1
            position = int(suffix)
        elif not colon or not key or (underscore and (not suffix or suffix[0] in _DIGITS_OR_MINUS)):
            if not item:
                continue  # doubled or trailing tab: harmless
            return [], _malformed(item)
        else:  # no _N ("image", "birth_place"): a single-token field
            name, position = key, 0
        if not name:
            return [], f"malformed item {item!r}: empty field name"
        if value == _NONE or not value:
            continue
        tokens = fields.get(name)
        if tokens is None:
            fields[name] = [(position, value)]
        else:
            tokens.append((position, value))
    items = []
    for name, tokens in fields.items():
        if len(tokens) > 1:
            tokens.sort(key=_position)
        items.append(RawItem(name, " ".join([token for _, token in tokens])))
    return items, ""


def _malformed(item: str) -> str:
    key, colon, _ = item.partition(":")
    if not colon:
        return f"malformed item {item!r}: no ':'"
    if not key:
        return f"malformed item {item!r}: empty field name"
    return f"malformed item {item!r}: position {key.rpartition('_')[2]!r} is not a non-negative integer"


def _position(entry: Tuple[int, str]) -> int:
    return entry[0]


def _read_nb(nb_path: str) -> Tuple[List[int], Dict[int, str]]:
    """Sentence counts (-1 where invalid) and {index: raw line} of the invalid lines."""
    counts: List[int] = []
    bad: Dict[int, str] = {}
    with open(nb_path, "rb") as f:
        for index, raw in enumerate(f):
            text = raw.strip()
            if text.isdigit() and int(text) <= MAX_SENTENCES_PER_ARTICLE:  # bytes.isdigit: ASCII digits only
                counts.append(int(text))
            else:
                counts.append(-1)
                bad[index] = _shown(raw)
    return counts, bad


def _count_lines(path: str) -> int:
    lines, last = 0, b"\n"
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def _recover(counts: List[int], bad: Dict[int, str], sent_path: str) -> int:
    """Fills in the count of a single invalid line from the .sent total;
    returns the first article whose sentence offset is unknown (or len(counts))."""
    if not bad:
        return len(counts)
    first = min(bad)
    if len(bad) == 1:
        missing = _count_lines(sent_path) - (sum(counts) + 1)  # +1 undoes the -1
        if missing >= 0:
            counts[first] = missing
            return len(counts)
    return first


class _Paths(NamedTuple):
    box: str
    sent: str
    nb: str


class _Sentences:
    """Streams .sent: the first line of each article, skipping the others."""

    def __init__(self, f) -> None:
        self._f = f
        self.position = 0  # lines consumed so far

    def take(self, count: int) -> Tuple[Optional[bytes], bool]:
        """(first line or None, whether all `count` lines existed)."""
        first = next(self._f, None) if count else None
        got = (first is not None) + sum(1 for _ in itertools.islice(self._f, max(count - 1, 0)))
        self.position += got
        return first, got == count


# Articles per unit: units are read in parallel by Beam workers (the full
# corpus, 728k articles, becomes 30 units); each unit skips to its range.
ARTICLES_PER_UNIT = 25_000
_RANGE_SEP = "@"


def _split_units(prefix: str) -> List[str]:
    articles = _count_lines(prefix + ".nb")
    if articles <= ARTICLES_PER_UNIT:
        return [prefix]
    starts = list(range(0, articles, ARTICLES_PER_UNIT))
    units = [f"{prefix}{_RANGE_SEP}{a}:{a + ARTICLES_PER_UNIT}" for a in starts[:-1]]
    return units + [f"{prefix}{_RANGE_SEP}{starts[-1]}:"]  # the last range also checks the file ends


def _parse_unit(unit: str) -> Tuple[str, int, Optional[int]]:
    """"prefix" or "prefix@start:end" (end empty = to the end of the files)."""
    prefix, sep, span = unit.rpartition(_RANGE_SEP)
    if not sep or ":" not in span:
        return unit, 0, None
    start, _, end = span.partition(":")
    return prefix, int(start), int(end) if end else None


class WikiBioReader(FormatReader):
    name = "wikibio"

    def input_units(self, path: str, split: str) -> List[str]:
        return _split_units(self._prefix(path))

    def _prefix(self, path: str) -> str:
        if os.path.isdir(path):
            return self._prefix_in_dir(path)
        prefix = path
        for ext in _EXTENSIONS:
            if path.endswith(ext):
                prefix = path[: -len(ext)]
        missing = [prefix + ext for ext in _EXTENSIONS if not os.path.isfile(prefix + ext)]
        if len(missing) == 3:
            raise InputError(f"input not found: {path} (expected a directory or X of X.box/.sent/.nb)")
        if missing:
            raise InputError(f"WikiBio input {path}: missing {', '.join(missing)}")
        return prefix

    @staticmethod
    def _prefix_in_dir(path: str) -> str:
        prefixes = set()
        for ext in _EXTENSIONS:
            found = glob.glob(os.path.join(glob.escape(path), "*" + ext))
            if len(found) != 1:
                raise InputError(f"WikiBio directory {path}: {len(found)} *{ext} files, need exactly one")
            prefixes.add(found[0][: -len(ext)])
        if len(prefixes) != 1:
            raise InputError(f"WikiBio directory {path}: .box/.sent/.nb names differ: {sorted(prefixes)}")
        return prefixes.pop()

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        prefix, start, end = _parse_unit(unit)
        paths = _Paths(*(prefix + ext for ext in _EXTENSIONS))
        counts, bad = _read_nb(paths.nb)
        unknown_from = _recover(counts, bad, paths.sent)
        bad_lines = ", ".join(str(i + 1) for i in sorted(bad))
        with open(paths.box, "rb") as box_f, open(paths.sent, "rb") as sent_f:
            sentences = _Sentences(sent_f)
            skipped = sum(1 for _ in itertools.islice(box_f, start))
            sentences.take(sum(max(c, 0) for c in counts[: min(skipped, unknown_from)]))
            articles = skipped
            stop = None if end is None else end - start
            for index, raw in enumerate(itertools.islice(box_f, stop), start):
                articles += 1
                if index >= len(counts):
                    reason = f"no line {index + 1} in {paths.nb}"
                    yield Rejection(paths.box, index + 1, reason, _shown(raw))
                elif index in bad:
                    if counts[index] >= 0:  # recovered from the .sent total
                        sentences.take(counts[index])
                    reason = f"invalid sentence count {bad[index]!r} (must be a non-negative integer)"
                    yield Rejection(paths.nb, index + 1, reason, bad[index])
                elif index >= unknown_from:
                    reason = f"sentence offset unknown after invalid lines {bad_lines} of {paths.nb}"
                    yield Rejection(paths.nb, index + 1, reason, str(counts[index]))
                else:
                    yield _article(index, raw, counts[index], sentences, paths, split)
            if end is not None or unknown_from < len(counts):
                return  # the remaining .nb and .sent lines cannot be matched up
            for index in range(articles, len(counts)):
                sentences.take(counts[index])
                reason = f"no line {index + 1} in {paths.box}"
                yield Rejection(paths.nb, index + 1, reason, str(counts[index]))
            for line, raw in enumerate(sent_f, sentences.position + 1):
                yield Rejection(paths.sent, line, f"sentence not covered by {paths.nb}", _shown(raw))


def _article(index: int, raw: bytes, count: int, sentences: _Sentences, paths: _Paths, split: str) -> Parsed:
    start = sentences.position
    first, complete = sentences.take(count)
    if not complete:
        reason = (
            f"sentences {start + 1}-{start + count} run past the end of {paths.sent} "
            f"({sentences.position} lines): .nb and .sent disagree"
        )
        return Rejection(paths.nb, index + 1, reason, str(count))
    line = _decode(raw)
    if line is None:
        return Rejection(paths.box, index + 1, "invalid UTF-8", _shown(raw))
    items, error = parse_box(line)
    if error or not items:
        return Rejection(paths.box, index + 1, error or "empty table", line)
    text = _decode(first) if first is not None else ""
    if text is None:
        return Rejection(paths.sent, start + 1, "invalid UTF-8", _shown(first))
    text = text.strip()
    if not text:
        where = f"{paths.sent}:{start + 1} is empty" if count else f"{paths.nb} gives 0 sentences"
        return Rejection(paths.box, index + 1, f"missing text ({where})", line)
    return RawTable(
        example_id=f"wikibio:{split}:{index}",
        source=f"{paths.box}:{index + 1}",
        items=items,
        texts=[text],
        pretokenized=True,  # "-lrb- born 1950 -rrb-": scored detokenized, as generated text is
    )
