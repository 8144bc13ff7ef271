"""In-graph parser of the JSONL table form for the SavedModel's ``serving_default``.

TF Serving runs the exported graph unchanged, so the request parsing is made
of core TensorFlow string / ragged ops only (RE2 regexes, splits, unicode ops,
``tf.debugging.Assert``) plus the project tokenizer (tensorflow-text ops): no
``py_function``, no TF-Addons, no custom ops.

The serving input ``tables`` is a ``tf.string [batch]`` tensor, each element
one JSON object in the users' JSONL form (``tablegen_tf/readers/jsonl.py``)::

    {"table": [{"field": "name", "value": "The Vaults"},
               {"field": "eatType", "value": "pub", "entity": "", "group": ""}],
     "text": "ignored if present", "id": "ignored too"}

* :func:`parse_tables` -> ragged ``[B, (items)]`` field / value / entity /
  group strings, with exactly the semantics of ``jsonl.parse_entry``: field
  and value stripped (Python ``str.strip``), numbers ``str()``-ed the Python
  way (``4.50`` -> ``"4.5"``, ``1e3`` -> ``"1000.0"``), missing or ``null``
  entity / group -> ``""``, items whose value is empty dropped, the last of
  duplicate keys wins.  Invalid input raises ``tf.errors.InvalidArgumentError``
  (INVALID_ARGUMENT in TF Serving) naming the batch index and the problem.
* :func:`table_records` -> ragged ``[B, (records)]`` record features keyed like
  ``tablegen_tf.schema`` (one record per value token, Lebret p+ / p-), the
  same records as ``tablegen_tf.readers.build.build_examples``.
* :func:`batched_records_features` -> dense padded ``[B, R]`` record tensors of
  the batch contract (``tablegen_tf/data/CONTRACT.md``), reusing
  ``input_pipeline.records_features``.

Accepted JSON (a depth-limited subset, checked by one RE2 regex): the element
is an object (whitespace around any token); its values are strings, numbers,
``true`` / ``false`` / ``null``, flat objects, or arrays of those; ``table``
must be a non-empty array of flat objects whose values are scalars or arrays
of scalars.  Not accepted: deeper nesting elsewhere (e.g. ``"meta": {"a":
{"b": 1}}`` or ``"text": [["a"]]``), Python's non-standard ``NaN`` /
``Infinity``, a UTF-8 BOM, non-UTF-8 encodings.  See :data:`LIMITATIONS`.
"""

from __future__ import annotations

from typing import Dict

import tensorflow as tf
import tensorflow_text as tf_text

from tablegen_tf import schema
from tablegen_tf.data.input_pipeline import Vocabularies, records_features
from tablegen_tf.tokenizer import Tokenizer

# Messages avoid quotes and backslashes: the Assert op C-escapes them in graphs.
LIMITATIONS = (
    "accepted: one JSON object per element (UTF-8, no BOM) whose values are strings, numbers, "
    "true/false/null, flat objects or arrays of those; `table` is a non-empty array of flat objects "
    "(values: string, number, true/false/null or an array of scalars); `field` a non-empty string, "
    "`value` a string or number, `entity`/`group` a string, number or null; "
    "not accepted: deeper nesting, NaN/Infinity"
)

# Served tables are padded to a multiple of this many records (mask False): a one-table
# request's XLA beam steps (tablegen_tf.generation.JIT_MAX_BATCH) then compile once per
# bucket, not once per record count.
RECORD_BUCKET = 8

# ----------------------------------------------------------------- grammar
# Separators of the intermediate strings: control characters can neither be
# raw inside a valid JSON string nor be JSON whitespace.
_SEP = "\x01"
_WS = r"[ \t\n\r]*"
_STRING = r'"(?:[^"\\\x00-\x1f\x{D800}-\x{DFFF}]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_SCALAR = rf"(?:{_STRING}|{_NUMBER}|true|false|null)"


def _array(element: str) -> str:
    return rf"\[{_WS}(?:{element}{_WS}(?:,{_WS}{element}{_WS})*)?\]"


def _object(value: str) -> str:
    member = rf"{_STRING}{_WS}:{_WS}{value}{_WS}"
    return rf"\{{{_WS}(?:{member}(?:,{_WS}{member})*)?\}}"


_ITEM_VALUE = rf"(?:{_SCALAR}|{_array(_SCALAR)})"  # value of a member of a table item
_ITEM = _object(_ITEM_VALUE)  # a table item: a flat object
_TOP_VALUE = rf"(?:{_SCALAR}|{_ITEM}|{_array(rf'(?:{_SCALAR}|{_ITEM})')})"
DOCUMENT_PATTERN = rf"{_WS}{_object(_TOP_VALUE)}{_WS}"
_TABLE_PATTERN = _array(_ITEM)
_EMPTY_ARRAY = rf"\[{_WS}\]"
# Lexers, used once the grammar holds: small patterns (RE2 extracts capture
# groups far faster with them) that only need to find token boundaries.
_LEX_STRING = r'"(?:[^"\\]|\\.)*"'
_LEX_SCALAR = r'[^ \t\n\r,:\[\]{}"]+'  # number, true, false, null
_LEX_ARRAY = rf'\[(?:{_LEX_STRING}|[^\]"])*\]'  # of scalars
_LEX_OBJECT = rf'\{{(?:{_LEX_STRING}|[^}}"])*\}}'  # flat: no "}" outside strings inside
_LEX_ARRAYS = rf'\[(?:{_LEX_STRING}|{_LEX_ARRAY}|[^\]\["])*\]'  # of scalars / flat objects
_MEMBER = rf"[{{,]{_WS}({_LEX_STRING}){_WS}:{_WS}(%s){_WS}"
# Every match starts where the previous one ended (from the object's "{"),
# so no match starts inside a string.
_TOP_MEMBER = _MEMBER % rf"(?:{_LEX_STRING}|{_LEX_SCALAR}|{_LEX_OBJECT}|{_LEX_ARRAYS})"
_ITEM_MEMBER = _MEMBER % rf"(?:{_LEX_STRING}|{_LEX_SCALAR}|{_LEX_ARRAY})"
_ITEM_SPLIT = rf"[^{{]*({_LEX_OBJECT})[^{{]*"
_ESCAPE = r"\\u[0-9a-fA-F]{4}|\\."
# Python's str.isspace() characters (str.strip() strips them).
_PY_SPACE = r"[\t\n\x0b\x0c\r\x1c-\x1f \x{85}\p{Z}]"
_PY_STRIP = rf"^{_PY_SPACE}+|{_PY_SPACE}+$"

ITEM_KEYS = ("field", "value", "entity", "group")

# Per-table problems, in the order they are checked (Python reader's order).
_TABLE_ERRORS = (
    "",
    "not valid UTF-8",
    "not a JSON object of the accepted form (" + LIMITATIONS + ")",
    "missing `table`",
    "`table` must be a non-empty array of objects",
    "`table` must be a non-empty array of objects, got an empty array",
    "",  # an item problem: see _ITEM_ERRORS
    "empty table: every value is empty",
    "a string holds a lone surrogate (an unpaired U+D800-U+DFFF escape): not valid Unicode",
)
_E_UTF8, _E_GRAMMAR, _E_NO_TABLE, _E_TABLE_TYPE, _E_EMPTY, _E_ITEM, _E_ALL_EMPTY, _E_SURROGATE = range(1, 9)
_ITEM_ERRORS = (
    "",
    ".field must be a non-empty string",
    ".value must be a string or a number, got missing",
    ".value must be a string or a number, got a JSON bool",
    ".value must be a string or a number, got a JSON list",
    ".entity must be a string or a number",
    ".group must be a string or a number",
)


# ----------------------------------------------------------------- helpers
# Ragged data is handled as (flat values, row ids, number of rows): the
# RaggedTensor API would add hundreds of small ops, and op count is what a
# serving batch pays for.


def _split(strings: tf.Tensor, sep: str):
    """strings [N] -> (parts, row ids int64); every row has at least one part."""
    indices, parts, _ = tf.raw_ops.StringSplitV2(input=strings, sep=sep, maxsplit=-1)
    return parts, indices[:, 0]


def _not_last_of_row(rows: tf.Tensor) -> tf.Tensor:
    return tf.concat([tf.equal(rows[1:], rows[:-1]), [False]], 0)


def _select(mask: tf.Tensor, *tensors):
    index = tf.where(mask)[:, 0]
    return [tf.gather(t, index) for t in tensors]


def _pairs(strings: tf.Tensor, member_pattern: str):
    """Valid object texts [N] -> (keys, values, row ids) of their members (raw JSON texts).

    One global regex_replace rewrites each member to ``key SEP value SEP``;
    matches tile the object from its "{" on, so no match starts inside a
    string. The part after the last SEP (the closing "}") is dropped.
    """
    marked = tf.strings.regex_replace(strings, member_pattern, "\\1" + _SEP + "\\2" + _SEP)
    parts, rows = _split(marked, _SEP)
    parts, rows = _select(_not_last_of_row(rows), parts, rows)
    pairs = tf.reshape(parts, [-1, 2])
    return pairs[:, 0], pairs[:, 1], rows[::2]


def _last_with_key(keys: tf.Tensor, values: tf.Tensor, rows: tf.Tensor, nrows: tf.Tensor, key: str):
    """Per row, the value of the LAST member whose key is `key` (json.loads keeps the last)."""
    size = tf.size(keys, out_type=tf.int64)
    positions = tf.where(tf.equal(keys, key), tf.range(size), tf.constant(-1, tf.int64))
    last = tf.math.unsorted_segment_max(positions, rows, nrows)  # empty rows: int64 min
    found = last >= 0
    return tf.gather(tf.concat([values, [""]], 0), tf.where(found, last, size)), found


def _row_any(flags: tf.Tensor, rows: tf.Tensor, nrows: tf.Tensor) -> tf.Tensor:
    return tf.math.unsorted_segment_max(tf.cast(flags, tf.int32), rows, nrows) > 0


def _substr(strings: tf.Tensor, pos, length) -> tf.Tensor:
    """tf.strings.substr with pos / length broadcast to the shape of `strings` (bytes)."""
    shape = tf.shape(strings)
    pos = tf.broadcast_to(tf.cast(pos, tf.int32), shape)
    length = tf.broadcast_to(tf.cast(length, tf.int32), shape)
    return tf.strings.substr(strings, pos, length)


def _string_content(raw: tf.Tensor) -> tf.Tensor:
    """'"abc"' -> 'abc' (raw JSON string literals, still escaped)."""
    return _substr(raw, 1, tf.maximum(tf.strings.length(raw) - 2, 0))


def unescape(strings: tf.Tensor):
    """JSON string contents [N] (no quotes) -> (decoded [N], lone_surrogate [N] bool).

    Decodes \\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX, surrogate pairs included; the
    work is skipped (tf.cond) when no string holds a backslash, and otherwise
    done for those strings only.
    """
    strings = tf.convert_to_tensor(strings, tf.string)
    has_escape = tf.logical_not(tf.strings.regex_full_match(strings, r"[^\\]*"))
    return tf.cond(
        tf.reduce_any(has_escape),
        lambda: _unescape_some(strings, has_escape),
        lambda: (strings, tf.zeros_like(has_escape)),
    )


def _unescape_some(strings: tf.Tensor, has_escape: tf.Tensor):
    index = tf.where(has_escape)[:, 0]
    count = tf.size(index, out_type=tf.int64)
    pieces = tf_text.regex_split(
        tf.gather(strings, index), delim_regex_pattern=_ESCAPE, keep_delim_regex_pattern=_ESCAPE
    )  # [n, (pieces)]: literal runs and single escapes
    flat = pieces.flat_values
    row = pieces.value_rowids()
    length = tf.strings.length(flat)
    one = tf.minimum(length, 1)
    is_escape = tf.equal(_substr(flat, 0, one), "\\")  # literal runs hold no backslash
    second = _substr(flat, one, one)
    is_unicode = is_escape & tf.equal(second, "u")
    # one-character escapes: a table lookup by the escaped character
    escaped = tf.constant(['"', "\\", "/", "b", "f", "n", "r", "t"])
    decoded = tf.constant(['"', "\\", "/", "\b", "\f", "\n", "\r", "\t"])
    simple = tf.gather(decoded, tf.argmax(tf.cast(tf.equal(second[:, None], escaped[None, :]), tf.int32), 1))
    # \uXXXX: hex digits -> code point, surrogate pairs joined
    u_index = tf.where(is_unicode)[:, 0]
    hex_digits = tf.reshape(
        tf.strings.unicode_decode(_substr(tf.gather(flat, u_index), 2, 4), "UTF-8").flat_values, [-1, 4]
    )
    nibbles = tf.where(hex_digits <= 57, hex_digits - 48, tf.bitwise.bitwise_or(hex_digits, 32) - 87)
    codes = tf.reduce_sum(nibbles * tf.constant([4096, 256, 16, 1], tf.int32), axis=1)
    code = tf.scatter_nd(u_index[:, None], codes + 1, tf.shape(flat, out_type=tf.int64)) - 1  # -1: no \u
    high = (code >= 0xD800) & (code <= 0xDBFF)
    low = (code >= 0xDC00) & (code <= 0xDFFF)
    pair_high = high & tf.concat([low[1:], [False]], 0) & _not_last_of_row(row)
    pair_low = tf.concat([[False], pair_high[:-1]], 0)
    next_code = tf.concat([code[1:], [0]], 0)
    combined = tf.where(pair_high, 0x10000 + (code - 0xD800) * 0x400 + (next_code - 0xDC00), code)
    lone = (high & ~pair_high) | (low & ~pair_low)
    encoded = tf.strings.unicode_encode(
        tf.RaggedTensor.from_tensor(tf.maximum(tf.gather(combined, u_index), 0)[:, None]), "UTF-8"
    )  # a lone surrogate becomes U+FFFD here (and is reported)
    unicode_text = tf.scatter_nd(u_index[:, None], encoded, tf.shape(flat, out_type=tf.int64))
    unicode_text = tf.where(pair_low, "", unicode_text)
    text = tf.where(is_unicode, unicode_text, tf.where(is_escape, simple, flat))
    joined = tf.strings.reduce_join(pieces.with_flat_values(text), axis=1)
    out = tf.tensor_scatter_nd_update(strings, index[:, None], joined)
    lone_rows = tf.cast(_row_any(lone, row, count), tf.int32)
    return out, tf.scatter_nd(index[:, None], lone_rows, tf.shape(strings, tf.int64)) > 0


def python_number_str(numbers: tf.Tensor) -> tf.Tensor:
    """JSON number literals [N] -> ``str(json.loads(literal))`` in Python.

    Integers keep their digits ("-0" -> "0"); other numbers are float64 written
    the way Python's ``repr(float)`` does: the shortest digits that round-trip,
    fixed notation for 1e-4 <= |x| < 1e16 ("1000.0", "0.0001"), else "1e+16",
    "1.5e-05"; overflow gives "inf".  (Subnormal floats are flushed to zero by
    TF's float formatting: "5e-324" -> "0.0", unlike Python.)
    """
    numbers = tf.convert_to_tensor(numbers, tf.string)
    is_int = tf.strings.regex_full_match(numbers, r"-?[0-9]+")
    ints = tf.strings.regex_replace(numbers, r"^-0$", "0")
    return tf.cond(tf.reduce_all(is_int), lambda: ints, lambda: _with_floats(numbers, is_int, ints))


def _with_floats(numbers: tf.Tensor, is_int: tf.Tensor, ints: tf.Tensor) -> tf.Tensor:
    f_index = tf.where(~is_int)[:, 0]
    floats = tf.strings.to_number(tf.gather(numbers, f_index), tf.float64)
    infinite = tf.math.is_inf(floats)
    finite = tf.where(infinite, tf.zeros_like(floats), floats)
    # shortest round-tripping scientific form: "d.ddde+XX" with 1..17 digits
    candidates = tf.stack([tf.strings.as_string(finite, precision=p, scientific=True) for p in range(17)], axis=1)
    exact = tf.equal(tf.strings.to_number(candidates, tf.float64), finite[:, None])
    exact = tf.concat([exact[:, :-1], tf.ones_like(exact[:, -1:])], 1)
    best = tf.gather(candidates, tf.argmax(tf.cast(exact, tf.int32), axis=1, output_type=tf.int32), batch_dims=1)
    negative = tf.strings.regex_full_match(best, "-.*")
    digits = tf.strings.regex_replace(best, r"^-?([0-9])(?:\.([0-9]*))?e.*$", r"\1\2")
    digits = tf.strings.regex_replace(digits, r"^([0-9]+?)0*$", r"\1")
    exponent = tf.strings.to_number(tf.strings.regex_replace(best, r"^.*e", ""), tf.int32)
    length = tf.strings.length(digits)
    zeros = tf.fill(tf.shape(digits), "0" * 20)
    pad = lambda n: _substr(zeros, 0, tf.clip_by_value(n, 0, 20))  # noqa: E731
    split_at = tf.clip_by_value(exponent + 1, 0, length)
    whole = tf.strings.join([digits, pad(exponent - length + 1), ".0"])  # 1234.0
    inner = tf.strings.join([_substr(digits, 0, split_at), ".", _substr(digits, split_at, length)])  # 12.34
    small = tf.strings.join(["0.", pad(-exponent - 1), digits])  # 0.0012
    fixed = tf.where(exponent >= length - 1, whole, tf.where(exponent >= 0, inner, small))
    mantissa = tf.where(
        length > 1, tf.strings.join([_substr(digits, 0, 1), ".", _substr(digits, 1, length)]), digits
    )
    exponent_text = tf.strings.as_string(tf.abs(exponent), width=2, fill="0")
    science = tf.strings.join([mantissa, tf.where(exponent < 0, "e-", "e+"), exponent_text])
    text = tf.where((exponent >= -4) & (exponent < 16), fixed, science)
    text = tf.where(infinite, "inf", text)
    text = tf.where(negative | (infinite & (floats < 0)), tf.strings.join(["-", text]), text)
    return tf.tensor_scatter_nd_update(ints, f_index[:, None], text)


# ----------------------------------------------------------------- API


def parse_tables(tables: tf.Tensor) -> Dict[str, tf.RaggedTensor]:
    """JSON table strings ``[B]`` -> ``{"field", "value", "entity", "group"}`` ragged ``[B, (items)]``.

    The same items as ``tablegen_tf.readers.jsonl`` (``RawTable.items``): see
    the module docstring. Raises ``tf.errors.InvalidArgumentError`` at run
    time (eager, tf.function or SavedModel) for the first invalid element, e.g.
    ``tables[3]: table[1].value must be a string or a number, got missing``.
    """
    tables = tf.reshape(tf.convert_to_tensor(tables, tf.string), [-1])
    batch = tf.size(tables, out_type=tf.int64)

    # (a) whole-element checks: UTF-8, grammar, 'table' present and well-typed
    # (the grammar admits valid UTF-8 only: RE2 classes hold valid code points)
    grammar = tf.strings.regex_full_match(tables, DOCUMENT_PATTERN)
    safe = tf.strings.strip(tf.where(grammar, tables, "{}"))
    top_keys, top_values, top_rows = _pairs(safe, _TOP_MEMBER)
    top_keys = unescape(_string_content(top_keys))[0]
    table, has_table = _last_with_key(top_keys, top_values, top_rows, batch, "table")
    table_ok = tf.strings.regex_full_match(table, _TABLE_PATTERN)
    empty = tf.strings.regex_full_match(table, _EMPTY_ARRAY)
    code = tf.where(grammar, 0, _E_GRAMMAR)
    missing = ~has_table | tf.equal(table, "null")  # json: entry.get("table") is None
    for error, bad in ((_E_NO_TABLE, missing), (_E_TABLE_TYPE, ~table_ok), (_E_EMPTY, empty)):
        code = tf.where(tf.equal(code, 0) & bad, error, code)
    table = tf.where(tf.equal(code, 0), table, "[]")

    # (b) items -> members -> the four keys (the last of duplicates wins)
    items, item_rows = _split(tf.strings.regex_replace(table, _ITEM_SPLIT, "\\1" + _SEP), _SEP)
    items, item_rows = _select(_not_last_of_row(item_rows), items, item_rows)  # drop the empty rest
    num_items = tf.size(items, out_type=tf.int64)
    keys, values, member_rows = _pairs(items, _ITEM_MEMBER)
    keys = unescape(_string_content(keys))[0]
    raw, found = zip(*(_last_with_key(keys, values, member_rows, num_items, key) for key in ITEM_KEYS))
    raw = tf.stack(raw, axis=1)  # [I, 4] raw JSON texts ("" if missing)
    found = tf.stack(found, axis=1)
    first = _substr(raw, 0, tf.minimum(tf.strings.length(raw), 1))
    is_string = tf.equal(first, '"')
    is_null = tf.equal(raw, "null") | ~found
    is_bool = tf.equal(raw, "true") | tf.equal(raw, "false")
    is_array = tf.equal(first, "[")
    is_number = found & ~(is_string | is_null | is_bool | is_array)

    # (c) strings unescaped, numbers str()-ed the Python way
    flat_raw = tf.reshape(raw, [-1])
    s_index = tf.where(tf.reshape(is_string, [-1]))[:, 0]
    s_text, s_lone = unescape(_string_content(tf.gather(flat_raw, s_index)))
    n_index = tf.where(tf.reshape(is_number, [-1]))[:, 0]
    n_text = python_number_str(tf.gather(flat_raw, n_index))
    text = tf.tensor_scatter_nd_update(
        tf.fill(tf.shape(flat_raw), ""), tf.concat([s_index, n_index], 0)[:, None], tf.concat([s_text, n_text], 0)
    )
    text = tf.reshape(text, [-1, 4])
    lone = tf.scatter_nd(s_index[:, None], tf.cast(s_lone, tf.int32), tf.shape(flat_raw, tf.int64))
    lone = tf.reduce_any(tf.reshape(lone, [-1, 4]) > 0, axis=1)
    field = tf.strings.regex_replace(text[:, 0], _PY_STRIP, "")
    value = tf.strings.regex_replace(text[:, 1], _PY_STRIP, "")
    entity, group = text[:, 2], text[:, 3]

    # item problems (codes index _ITEM_ERRORS); the first bad item of each table
    item_checks = (
        ~is_string[:, 0] | tf.equal(field, ""),
        is_null[:, 1],
        is_bool[:, 1],
        is_array[:, 1],
        is_bool[:, 2] | is_array[:, 2],
        is_bool[:, 3] | is_array[:, 3],
    )
    item_code = tf.zeros_like(field, tf.int32)
    for error, bad in reversed(list(enumerate(item_checks, 1))):
        item_code = tf.where(bad, error, item_code)
    item_counts = tf.math.unsorted_segment_sum(tf.ones_like(item_rows), item_rows, batch)
    item_starts = tf.cumsum(item_counts, exclusive=True)
    position = tf.range(num_items) - tf.gather(item_starts, item_rows)  # index in its table
    big = tf.constant(tf.int64.max, tf.int64)
    bad_item = tf.math.unsorted_segment_min(tf.where(item_code > 0, position, big), item_rows, batch)
    keep = tf.not_equal(value, "")  # items with an empty value are dropped
    kept_counts = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), item_rows, batch)
    for error, bad in (
        (_E_ITEM, bad_item < item_counts),
        (_E_ALL_EMPTY, tf.equal(kept_counts, 0)),
        (_E_SURROGATE, _row_any(lone & keep, item_rows, batch)),  # dropped items are not checked
    ):
        code = tf.where(tf.equal(code, 0) & bad, error, code)

    # Errors: the message is only built when something is invalid.
    invalid = code > 0
    check = tf.cond(
        tf.reduce_any(invalid),
        lambda: _fail(tables, invalid, code, item_code, bad_item, item_starts),
        lambda: tf.constant(True),
    )

    # (d) outputs: the kept items of each table
    with tf.control_dependencies([check]):
        kept_counts = tf.identity(kept_counts)
    kept = tf.where(keep)[:, 0]
    first_column = tf.RaggedTensor.from_row_lengths(tf.gather(field, kept), kept_counts, validate=False)
    columns = {"value": value, "entity": entity, "group": group}
    parsed = {key: first_column.with_flat_values(tf.gather(column, kept)) for key, column in columns.items()}
    return {"field": first_column, **parsed}


def _fail(tables, invalid, code, item_code, bad_item, item_starts) -> tf.Tensor:
    """Raises InvalidArgumentError naming the first invalid element (runs only then)."""
    index = tf.argmax(tf.cast(invalid, tf.int32), output_type=tf.int64)
    element = tables[index]
    utf8 = tf.equal(tf.strings.unicode_transcode(element, "UTF-8", "UTF-8", errors="replace"), element)
    code = tf.where(tf.equal(code, _E_GRAMMAR) & ~utf8, _E_UTF8, code)
    size = tf.size(item_code, tf.int64)
    bad = tf.minimum(bad_item[index], size)  # int64 max when the table has no bad item
    bad_code = tf.gather(tf.concat([item_code, [0]], 0), tf.minimum(item_starts[index] + bad, size))
    item_problem = tf.strings.join(
        ["table[", tf.strings.as_string(bad), "]", tf.gather(tf.constant(_ITEM_ERRORS), bad_code)]
    )
    table_problem = tf.gather(tf.constant(_TABLE_ERRORS), code[index])
    problem = tf.where(tf.equal(code[index], _E_ITEM), item_problem, table_problem)
    count = tf.strings.as_string(tf.reduce_sum(tf.cast(invalid, tf.int32)))
    message = tf.strings.join(
        ["tables[", tf.strings.as_string(index), "]: ", problem, " (", count, " of ",
         tf.strings.as_string(tf.size(invalid)), " tables invalid)"]
    )
    with tf.control_dependencies([tf.debugging.Assert(False, ["invalid serving input:", message])]):
        return tf.constant(False)


def table_records(parsed: Dict[str, tf.RaggedTensor], tokenizer: Tokenizer) -> Dict[str, tf.RaggedTensor]:
    """Items ``[B, (items)]`` -> records ``[B, (records)]`` keyed by ``tablegen_tf.schema``.

    Like ``tablegen_tf.readers.build`` + ``TableExample.add_field``: one record per value
    token (pos_start 1-based from the start, pos_end from the end), field /
    entity / group repeated; items whose value has no token give no record.
    Positions are int64, the rest strings.
    """
    values = parsed["value"]
    tokens = tokenizer.tokenize(values.flat_values)  # [items, (tokens)]
    item_of_token = tokens.value_rowids()
    lengths = tokens.row_lengths()
    token_index = tf.range(tf.size(tokens.flat_values, out_type=tf.int64))
    pos_start = token_index - tf.gather(tokens.row_splits, item_of_token) + 1
    pos_end = tf.gather(lengths, item_of_token) - pos_start + 1
    table_lengths = tf.math.unsorted_segment_sum(lengths, values.value_rowids(), values.nrows())
    records = tf.RaggedTensor.from_row_lengths(tokens.flat_values, table_lengths, validate=False)

    def repeated(key):
        return records.with_flat_values(tf.gather(parsed[key].flat_values, item_of_token))

    return {
        schema.RECORD_FIELD: repeated("field"),
        schema.RECORD_VALUE: records,
        schema.RECORD_POS_START: records.with_flat_values(pos_start),
        schema.RECORD_POS_END: records.with_flat_values(pos_end),
        schema.RECORD_ENTITY: repeated("entity"),
        schema.RECORD_GROUP: repeated("group"),
    }


def batched_records_features(
    vocabs: Vocabularies,
    records: Dict[str, tf.RaggedTensor],
    max_position: int,
    max_records: int = 0,
) -> Dict[str, tf.Tensor]:
    """Ragged records ``[B, (R)]`` -> the dense padded record tensors of CONTRACT.md.

    Runs ``input_pipeline.records_features`` (the training code) on the flat
    records and pads per batch: ids 0, record_mask False, record_value_text "".
    ``max_records`` > 0 keeps each table's first records, like
    ``InputConfig.max_records``. The record axis is padded to a multiple of RECORD_BUCKET.
    """
    ragged = records[schema.RECORD_VALUE]
    flat = records_features(vocabs, {key: value.flat_values for key, value in records.items()}, max_position)
    out = {}
    for key, value in flat.items():
        padded = ragged.with_flat_values(value)
        if max_records:
            padded = padded[:, :max_records]
        out[key] = padded.to_tensor(shape=tf.stack([padded.nrows(), _bucketed(padded.bounding_shape(1))]))
    return out


def _bucketed(width):
    return -(-width // RECORD_BUCKET) * RECORD_BUCKET


def serving_records(tables: tf.Tensor, tokenizer: Tokenizer) -> Dict[str, tf.RaggedTensor]:
    """``tables`` [B] JSON strings -> ragged records (parse_tables + table_records)."""
    return table_records(parse_tables(tables), tokenizer)
