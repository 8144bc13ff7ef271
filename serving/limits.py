"""Request size caps (server flags) and the bounded readers that enforce them.

Every cap is checked before the work it bounds: JSON nesting depth before
json.loads (whose recursion would otherwise raise RecursionError), decompressed
size while inflating (a gzip bomb stops at the cap, it is never inflated).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, fields

import numpy as np

from serving.errors import invalid, too_large


@dataclass(frozen=True)
class Limits:
    """Per-request caps; each field is the server flag of the same name."""
    max_request_bytes: int = 64 << 20   # gRPC message and REST body (after gunzip)
    max_json_depth: int = 64            # nesting of a REST body and of each table
    max_table_bytes: int = 1 << 20      # one `tables` row
    max_table_records: int = 1000       # records per table
    max_value_tokens: int = 200         # whitespace-separated words per record string
    max_value_chars: int = 2000         # characters per record string


def flag(name: str) -> str:
    """The command-line flag that sets Limits.<name>, for error messages."""
    return "--" + name.replace("_", "-")


def add_limit_arguments(parser) -> None:
    group = parser.add_argument_group("request limits")
    help_text = {
        "max_request_bytes": "largest gRPC message / REST body, after gzip decoding",
        "max_json_depth": "deepest JSON nesting in a REST body or a table",
        "max_table_bytes": "largest table (one `tables` row), in bytes",
        "max_table_records": "most records in one table",
        "max_value_tokens": "most whitespace-separated words in one record string",
        "max_value_chars": "most characters in one record string",
    }
    for field in fields(Limits):
        group.add_argument(flag(field.name), type=int, default=field.default,
                           help=help_text[field.name] + " (default: %(default)s)")


def limits_from_args(args) -> Limits:
    values = {f.name: getattr(args, f.name, f.default) for f in fields(Limits)}
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{flag(name)} must be at least 1, got {value}")
    return Limits(**values)


# A JSON string, or an unterminated one running to the end of the text. Possessive
# quantifiers: every match attempt succeeds in one pass, so stripping is linear
# even on adversarial input such as '"\"\"\"...'.
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_OPENING = np.frombuffer(b"[{", np.uint8)


def json_depth(text: str) -> int:
    """Deepest bracket nesting outside strings, without parsing (linear, in C)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if not brackets:
        return 0
    codes = np.frombuffer(brackets.encode("ascii"), np.uint8)
    steps = np.where(np.isin(codes, _OPENING), 1, -1)
    return int(np.cumsum(steps).max())


def check_json_depth(text: str, cap: int, what: str) -> None:
    depth = json_depth(text)
    if depth > cap:
        raise invalid(f"{what} is nested {depth} levels deep, above the cap of {cap} "
                      f"({flag('max_json_depth')})")


def gunzip(data: bytes, cap: int) -> bytes:
    """Inflate a gzip body, refusing at `cap` output bytes instead of inflating a bomb."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        output = inflater.decompress(data, cap + 1)
    except zlib.error as error:
        raise invalid(f"request body is not valid gzip: {error}") from error
    if len(output) > cap:
        raise too_large(f"gzip request body inflates to more than {cap} bytes "
                        f"({flag('max_request_bytes')})")
    if not inflater.eof:
        raise invalid("request body is truncated gzip (stream does not end)")
    if inflater.unused_data:
        raise invalid(f"request body has {len(inflater.unused_data)} bytes after the gzip stream")
    return output
