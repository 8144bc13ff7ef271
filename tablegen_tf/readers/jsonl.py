"""Users' own data: one JSON object per line.

    {"table": [{"field": "name", "value": "Aromi", "entity": "", "group": ""}, ...],
     "text": "Aromi is a pub." | ["reference 1", "reference 2"],
     "id": "optional-id", "pretokenized": false}

``value`` may be a string or a number (numbers are str()-ed); ``entity`` and
``group`` are optional. Items whose value is empty are dropped (like WikiBio's
``<none>``). Several texts are references of one example. Blank lines are
skipped and are not rows. ``"pretokenized": true`` marks texts written as tokens
("family - friendly ,"): trained on as written, scored detokenized, as generated text is.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, List, Optional, Tuple

from tablegen_tf.readers.base import (
    InputError,
    LineFormatReader,
    Parsed,
    RawItem,
    RawTable,
    Rejection,
    infer_split,
    require_exists,
)

_EXTENSIONS = (".jsonl", ".jsonl.gz")


def _text_value(value: Any, where: str, required: bool) -> Tuple[str, str]:
    """(string, "") or ("", reason): strings and numbers (not booleans) are accepted."""
    if value is None and not required:
        return "", ""
    if isinstance(value, str):
        return value, ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value), ""
    got = "missing" if value is None else f"a JSON {type(value).__name__}"
    return "", f"{where} must be a string or a number, got {got}"


def parse_item(item: Any, index: int) -> Tuple[Optional[RawItem], str]:
    where = f"table[{index}]"
    if not isinstance(item, dict):
        return None, f"{where} must be an object"
    if not isinstance(item.get("field"), str) or not item["field"].strip():
        return None, f"{where}.field must be a non-empty string"
    value, error = _text_value(item.get("value"), f"{where}.value", required=True)
    entity, entity_error = _text_value(item.get("entity"), f"{where}.entity", required=False)
    group, group_error = _text_value(item.get("group"), f"{where}.group", required=False)
    error = error or entity_error or group_error
    return (None, error) if error else (RawItem(item["field"].strip(), value.strip(), entity, group), "")


def parse_texts(text: Any) -> Tuple[List[str], str]:
    texts = [text] if isinstance(text, str) else text
    if text is None:  # users' own tables to generate from; training rejects it when built
        return [], ""
    if not isinstance(texts, list) or not texts:
        return [], "'text' must be a non-empty string or a non-empty list of strings"
    for index, value in enumerate(texts):
        if not isinstance(value, str) or not value.strip():
            where = "'text'" if isinstance(text, str) else f"text[{index}]"
            return [], f"{where} must be a non-empty string"
    return [t.strip() for t in texts], ""


def parse_entry(entry: Any) -> Tuple[List[RawItem], List[str], str]:
    """(items, texts, "") or ([], [], reason)."""
    if not isinstance(entry, dict):
        return [], [], f"line is a JSON {type(entry).__name__}, not an object"
    table = entry.get("table")
    if table is None:
        return [], [], "missing 'table'"
    if not isinstance(table, list) or not table:
        return [], [], "'table' must be a non-empty list"
    items = []
    for index, item in enumerate(table):
        parsed, error = parse_item(item, index)
        if error:
            return [], [], error
        if parsed.value:
            items.append(parsed)
    if not items:
        return [], [], "empty table: every value is empty"
    texts, error = parse_texts(entry.get("text"))
    return (items, texts, error) if not error else ([], [], error)


class JsonlReader(LineFormatReader):
    name = "jsonl"

    def input_units(self, path: str, split: str) -> List[str]:
        require_exists(path)
        if not os.path.isdir(path):
            return [path]
        pattern = os.path.join(glob.escape(path), "*")
        files = sorted(f for ext in _EXTENSIONS for f in glob.glob(pattern + ext))
        files = [f for f in files if infer_split(f) == split]  # train.jsonl, valid.jsonl, ...
        if not files:
            raise InputError(f"JSONL directory {path} has no *.jsonl(.gz) file for split {split!r}")
        return files

    def parse_line(self, raw: bytes, line: int, path: str, example_id: str) -> Parsed:
        return _row(raw, line, path, example_id)


def _row(raw: bytes, line: int, path: str, default_id: str) -> Parsed:
    content = raw.decode("utf-8", "replace").rstrip("\r\n")
    try:
        entry = json.loads(raw, parse_constant=_not_json)
    except (ValueError, RecursionError) as error:  # ValueError includes invalid UTF-8
        return Rejection(path, line, f"invalid JSON: {error}", content)
    items, texts, error = parse_entry(entry)
    example_id = entry.get("id") if isinstance(entry, dict) else None
    example_id = default_id if example_id is None else example_id
    if not error and (type(example_id) not in (str, int) or example_id == ""):  # bool is no id
        error = "'id' must be a non-empty string or an integer"
    pretokenized = entry.get("pretokenized") if isinstance(entry, dict) else None
    pretokenized = False if pretokenized is None else pretokenized  # missing or null: false
    if not error and not isinstance(pretokenized, bool):
        error = f"'pretokenized' must be true or false, got a JSON {type(pretokenized).__name__}"
    if not error and not _encodable(items, texts, str(example_id)):
        error = "a string holds a lone surrogate (\\ud800-\\udfff escape): not valid Unicode"
    if error:
        return Rejection(path, line, error, content)
    return RawTable(example_id=str(example_id), source=f"{path}:{line}", items=items, texts=texts,
                    pretokenized=pretokenized)


def _not_json(constant: str):
    """Python's json accepts NaN / Infinity; JSON (and the serving parser) does not."""
    raise ValueError(f"{constant} is not JSON")


def _encodable(items: List[RawItem], texts: List[str], example_id: str) -> bool:
    """JSON "\\ud800" escapes decode to lone surrogates, which UTF-8 cannot hold."""
    strings = [example_id, *texts, *(s for i in items for s in (i.field, i.value, i.entity, i.group))]
    try:
        "".join(strings).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
